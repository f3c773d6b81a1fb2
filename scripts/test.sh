#!/usr/bin/env bash
# The whole test suite, from a clean clone: installs what it needs, builds the real backends
# (Jaeger, OpenTelemetry Collector) from Go modules into a cache outside the repo, runs pytest.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# test: every library integration offline; test-torch: the cross-encoder paths (pulls torch)
.venv/bin/python -m pip install -q -e '.[test,test-torch]'

# the optional native OTLP encoder (native/ragtrail-encoder, PyO3 + maturin; needs a Rust toolchain; cold
# build ~40 s on 2 cores, then incremental in native/ragtrail-encoder/target). Required in CI; elsewhere
# a warning, and its tests skip loudly (the pure-Python encoder is used).
if [ -n "${CI:-}" ]; then
  .venv/bin/python -m pip install -q ./native/ragtrail-encoder
elif command -v cargo >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q ./native/ragtrail-encoder \
    || echo "scripts/test.sh: WARNING: native encoder build failed; its tests will SKIP" >&2
else
  echo "scripts/test.sh: WARNING: no Rust toolchain (cargo); the native encoder's tests will SKIP" >&2
fi

# headless Chromium renders the HTML report in tests (Debian's package)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "scripts/test.sh: could not install chromium; the report test will say so" >&2
fi

# a real Prometheus for the metrics e2e test (tests/e2e/test_prometheus_metrics.py; Debian's package:
# ~19 MB download, ~95 MB installed, ~15 s with --no-install-recommends; nothing when already there).
# Without it that test fails under CI and skips loudly elsewhere.
if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
    || echo "scripts/test.sh: could not install prometheus; the metrics e2e test will SKIP (FAIL under CI)" >&2
fi

# real Jaeger, Collector and Weaviate server for the e2e and Weaviate tests, built from Go modules into a
# cache outside the repo (cold: ~10 min on 2 cores for Jaeger + Collector, plus 11-20 min for
# weaviate-server: 1.8 GB of modules, 5-6 CPU-min; cached: under a second). Required in CI; elsewhere
# those tests skip loudly.
if [ -n "${CI:-}" ]; then
  bash scripts/build-backends.sh
elif command -v go >/dev/null 2>&1; then
  bash scripts/build-backends.sh || echo "scripts/test.sh: WARNING: backend build failed; e2e and Weaviate tests will SKIP" >&2
else
  echo "scripts/test.sh: WARNING: no Go toolchain; e2e tests (real Jaeger/Collector) and Weaviate tests will SKIP" >&2
fi

# the real Arize Phoenix for the `phoenix` tier, in its own venv cached outside the repo (cold: ~5 min
# and ~850 MB; cached: under a second). Required in CI; elsewhere the phoenix tests skip loudly.
if [ -n "${CI:-}" ]; then
  bash scripts/install-phoenix.sh
else
  bash scripts/install-phoenix.sh || echo "scripts/test.sh: WARNING: Phoenix install failed; phoenix tests will SKIP" >&2
fi

# Debian's clickhouse-server for the ClickHouse e2e tier (cold: ~30 s of apt; installed: instant). The
# tier falls back to the embedded engine (chdb, test extra) when Debian's server is too old for the
# Collector's exporter (bookworm: 18.16), so a failed install only warns.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  bash scripts/install-clickhouse.sh >/dev/null || echo "scripts/test.sh: WARNING: clickhouse-server install failed; the ClickHouse tier runs on chdb" >&2
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
