#!/usr/bin/env bash
# Install the REAL Arize Phoenix server the `phoenix` test tier runs against, into its own venv in a
# cache OUTSIDE the repo (it is ~850 MB with its own pins of pydantic, SQLAlchemy, OpenTelemetry...,
# so it never shares the test venv):
#   ${RAGTRAIL_PHOENIX_DIR:-$HOME/.cache/ragtrail-phoenix}/venv/bin/phoenix
# Idempotent: nothing is done when the venv already holds the pinned version (a stamp file says
# which); a half-built venv (interrupted install) is removed and rebuilt. Cold: ~5 min on 2 cores
# (a download of ~200 MB of wheels); cached: under a second.
#
# Usage: scripts/install-phoenix.sh [--force]
# Prints "phoenix=<path>" on stdout; logs go to stderr. Exits non-zero when the install fails.
set -euo pipefail

PHOENIX_VERSION="20.26.1"   # arize-phoenix; docs/phoenix.md says what this version shows
PHOENIX_DIR="${RAGTRAIL_PHOENIX_DIR:-$HOME/.cache/ragtrail-phoenix}"
VENV="$PHOENIX_DIR/venv"
STAMP="$VENV/.ragtrail-phoenix-version"
PYTHON="${PYTHON:-python3}"

FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install-phoenix: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

installed_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("arize-phoenix"))' 2>/dev/null || true
}

if [ "$FORCE" = 0 ] && [ -x "$VENV/bin/phoenix" ]; then
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PHOENIX_VERSION" ]; then
    echo "phoenix=$VENV/bin/phoenix"
    exit 0
  fi
  if [ "$(installed_version)" = "$PHOENIX_VERSION" ]; then  # installed before the stamp existed
    echo "$PHOENIX_VERSION" > "$STAMP"
    echo "phoenix=$VENV/bin/phoenix"
    exit 0
  fi
fi

echo "install-phoenix: installing arize-phoenix==$PHOENIX_VERSION into $VENV (cold: ~5 min)" >&2
mkdir -p "$PHOENIX_DIR"
# a venv records its own path in its scripts, so it is built in place: the old one is set aside and
# put back if the install fails (no half-built venv is left at $VENV)
rm -rf "$VENV.old"
if [ -d "$VENV" ]; then mv "$VENV" "$VENV.old"; fi
if ! { "$PYTHON" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q --upgrade pip >&2 \
       && "$VENV/bin/python" -m pip install -q "arize-phoenix==$PHOENIX_VERSION" >&2; }; then
  rm -rf "$VENV"
  if [ -d "$VENV.old" ]; then mv "$VENV.old" "$VENV"; fi
  echo "install-phoenix: pip install of arize-phoenix==$PHOENIX_VERSION failed" >&2
  exit 1
fi
rm -rf "$VENV.old"
echo "$PHOENIX_VERSION" > "$STAMP"
echo "phoenix=$VENV/bin/phoenix"
