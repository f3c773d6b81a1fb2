#!/usr/bin/env bash
# Install Debian's clickhouse-server and clickhouse-client for the ClickHouse e2e tier
# (tests/e2e/test_clickhouse.py). Idempotent: nothing is done when both are installed. The tests start
# the server themselves (their own config file, a temporary data dir, free ports on 127.0.0.1); the
# system service is never started or enabled here.
#
# Debian bookworm ships ClickHouse 18.16 (2018): too old for the Collector's ClickHouse exporter
# (Map, DateTime64 columns). The tier then runs on the same engine embedded (chdb, from the `test`
# extra) behind ClickHouse's HTTP interface (tests/chfront.py), and says so; a Debian release that
# ships a recent clickhouse-server is used as it is. Cold: ~30 s (apt); installed: instant.
#
# Usage: scripts/install-clickhouse.sh
# Prints "clickhouse-server=<path>" on stdout; logs go to stderr. Exits non-zero when the install fails.
set -euo pipefail

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,13p' "$0"
  exit 0
fi

if ! command -v clickhouse-server >/dev/null 2>&1 && [ ! -x /usr/sbin/clickhouse-server ] \
  || ! command -v clickhouse-client >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-clickhouse: no apt-get: install clickhouse-server and clickhouse-client by hand" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "install-clickhouse: apt-get install clickhouse-server clickhouse-client" >&2
  $SUDO apt-get update -qq >&2
  # policy-rc.d 101: the package's postinst must not start the system service
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clickhouse-server clickhouse-client >&2
fi
echo "clickhouse-server=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)"
