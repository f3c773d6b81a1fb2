#!/usr/bin/env bash
# Build the real tracing backends ragtrail's e2e tests run against, from Go modules only:
#   - Jaeger v2 all-in-one (module version v1.76.0 == Jaeger v2.13.0, same commit)
#   - a custom OpenTelemetry Collector (otelcol-ragtrail) made with the Collector Builder
#   - a Weaviate server (weaviate-server) for the Weaviate integration's tests, patched to listen on
#     127.0.0.1 only (scripts/weaviate-loopback.patch: upstream opens some ports on all interfaces)
#
# Binaries go to a cache OUTSIDE the repo (never commit them):
#   ${RAGTRAIL_BACKENDS_DIR:-$HOME/.cache/ragtrail-backends}/bin/{jaeger,otelcol-ragtrail,weaviate-server}
# The script is idempotent: a binary is rebuilt only when its pinned versions (a stamp file, with the
# Weaviate patch's sha256) changed or the binary is missing. GOCACHE / GOMODCACHE keep their defaults
# so a warm run (cache hit, or a rebuild with a warm Go build cache) is fast.
#
# Usage: scripts/build-backends.sh [--force] [jaeger|collector|weaviate ...]   (no target: all three)
# Prints "jaeger=<path>", "otelcol=<path>" and "weaviate=<path>" on stdout; logs go to stderr. Exits
# non-zero on any build failure.
set -euo pipefail

# ---- pinned versions (one release for every collector component) ----------------------------
JAEGER_MODULE_VERSION="v1.76.0"          # == Jaeger v2.13.0
OTELCOL_BUILDER_VERSION="v0.161.0"       # go.opentelemetry.io/collector/cmd/builder
OTELCOL_CORE_VERSION="v0.161.0"          # core components (otlp receiver/exporters, batch, ...)
OTELCOL_CONTRIB_VERSION="v0.161.0"       # contrib components (tail_sampling, transform, lb, ...)
AWS_SERVICEDISCOVERY_VERSION="v1.40.2"  # see the replace in write_manifest
WEAVIATE_MODULE_VERSION="v1.35.2"        # github.com/weaviate/weaviate == Weaviate 1.35.2
# v0.161.0 is the newest release at which every contrib component we need (notably
# exporter/loadbalancingexporter) is served by the Go module proxy here.

BACKENDS_DIR="${RAGTRAIL_BACKENDS_DIR:-$HOME/.cache/ragtrail-backends}"
BIN_DIR="$BACKENDS_DIR/bin"
WORK_DIR="$BACKENDS_DIR/work"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export CGO_ENABLED="${CGO_ENABLED:-0}"

FORCE=0
TARGETS=()
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    jaeger|collector|weaviate) TARGETS+=("$arg") ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-backends: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(jaeger collector weaviate)

command -v go >/dev/null 2>&1 || { echo "build-backends: 'go' not found on PATH (need Go >= 1.26, or an older Go with GOTOOLCHAIN=auto to fetch it)" >&2; exit 1; }
mkdir -p "$BIN_DIR" "$WORK_DIR"

log() { echo "build-backends: $*" >&2; }

# up_to_date <binary> <stamp-text>: true when the binary exists and was built from <stamp-text>.
up_to_date() {
  [ "$FORCE" = 0 ] && [ -x "$1" ] && [ -f "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ]
}

build_jaeger() {
  local out="$BIN_DIR/jaeger" stamp="jaeger $JAEGER_MODULE_VERSION $(go env GOVERSION)"
  if up_to_date "$out" "$stamp"; then log "jaeger up to date ($JAEGER_MODULE_VERSION)"; return 0; fi
  local mod="$WORK_DIR/jaeger"
  rm -rf "$mod"; mkdir -p "$mod"
  log "building jaeger $JAEGER_MODULE_VERSION in $mod"
  (
    cd "$mod"
    go mod init ragtrail-backends/jaeger >/dev/null 2>&1
    # A plain `go install ...@version` is refused (jaeger's go.mod has a replace directive);
    # a scratch module that depends on it as a tool builds fine.
    go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_MODULE_VERSION"
    go build -trimpath -o "$out.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
  )
  mv -f "$out.tmp" "$out"
  echo "$stamp" > "$out.stamp"
  # Record what resolved, for the README / debugging.
  (cd "$mod" && go list -m all) > "$BACKENDS_DIR/jaeger.modules.txt" 2>/dev/null || true
}

# The test build of Weaviate binds 127.0.0.1 only: scripts/weaviate-loopback.patch turns upstream's
# all-interfaces listens (gRPC, cluster API, Prometheus, profiler) into loopback ones.
WEAVIATE_PATCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/weaviate-loopback.patch"

# patch_weaviate <source dir>: apply the loopback patch exactly (no fuzz: a hunk that does not match
# fails the build), then fail if any all-interfaces listen is left in the server's (non-test) code.
patch_weaviate() {
  (cd "$1" && patch -p1 --forward --fuzz=0 --batch --no-backup-if-mismatch --quiet --dry-run < "$WEAVIATE_PATCH" \
    && patch -p1 --forward --fuzz=0 --batch --no-backup-if-mismatch --quiet < "$WEAVIATE_PATCH") \
    || { log "FAILED: $WEAVIATE_PATCH does not apply to weaviate $WEAVIATE_MODULE_VERSION; update it"; return 1; }
  local left
  left="$(grep -rnE --include='*.go' --exclude='*_test.go' --exclude-dir=test \
    '(Listen(AndServe)?(TLS)?\(("tcp", )?|Addr: +)(fmt\.Sprintf\()?"(0\.0\.0\.0|\[::\])?:' "$1" \
    | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)"
  if [ -n "$left" ]; then
    log "FAILED: weaviate $WEAVIATE_MODULE_VERSION still listens on all interfaces here (extend $WEAVIATE_PATCH):"
    echo "$left" >&2
    return 1
  fi
}

build_weaviate() {
  local out="$BIN_DIR/weaviate-server" patch_sha
  [ -f "$WEAVIATE_PATCH" ] || { log "FAILED: $WEAVIATE_PATCH is missing"; return 1; }
  patch_sha="$(sha256sum < "$WEAVIATE_PATCH" | cut -c1-16)"
  local stamp="weaviate $WEAVIATE_MODULE_VERSION loopback-patch=$patch_sha $(go env GOVERSION)"
  if up_to_date "$out" "$stamp"; then log "weaviate up to date ($WEAVIATE_MODULE_VERSION, loopback patch $patch_sha)"; return 0; fi
  local mod="$WORK_DIR/weaviate" module="github.com/weaviate/weaviate"
  rm -rf "$mod"; mkdir -p "$mod"
  log "building weaviate $WEAVIATE_MODULE_VERSION (loopback patch $patch_sha) in $mod"
  (
    cd "$mod"
    go mod init ragtrail-backends/weaviate >/dev/null 2>&1
    # The module's source, patched, replaces the module: only the listen addresses differ from
    # upstream, and only Weaviate's own packages recompile (its dependencies come from the Go build
    # cache when it is warm). weaviate's go.mod has no replace directive (checked at v1.35.2), so the
    # scratch module pins the same dependency versions (nothing else in this module raises them).
    # The server reports its version (1.35.2, from its embedded OpenAPI spec) without -ldflags; only
    # the git commit stays empty.
    # Cold (empty GOMODCACHE and GOCACHE), measured 2026-12-06 on 2 cores, unpatched: 20m00s wall
    # under load average ~15 (303 s user + 74 s sys CPU, 1.8 GB of modules, 1.4 GB build cache,
    # 1.8 GB peak RSS); 11m19s on a quieter machine. The binary is 168 MB. Patched, same day: 11m31s
    # wall (206 s user + 44 s sys, load ~10) with the modules downloaded but none of their packages in
    # the build cache; 21 s once the build cache holds them, giving the same binary byte for byte.
    local src
    src="$(go mod download -json "$module@$WEAVIATE_MODULE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
    [ -n "$src" ] && [ -d "$src" ] || { log "FAILED: no source directory for $module@$WEAVIATE_MODULE_VERSION"; exit 1; }
    cp -R "$src" weaviate-src
    chmod -R u+w weaviate-src
    patch_weaviate weaviate-src
    go mod edit -require="$module@$WEAVIATE_MODULE_VERSION" -replace="$module=./weaviate-src"
    go get -tool "$module/cmd/weaviate-server"
    go build -trimpath -o "$out.tmp" "$module/cmd/weaviate-server"
  )
  mv -f "$out.tmp" "$out"
  echo "$stamp" > "$out.stamp"
  (cd "$mod" && go list -m all) > "$BACKENDS_DIR/weaviate.modules.txt" 2>/dev/null || true
}

write_manifest() {
  local core="go.opentelemetry.io/collector" contrib="github.com/open-telemetry/opentelemetry-collector-contrib"
  cat <<EOF
dist:
  name: otelcol-ragtrail
  description: OpenTelemetry Collector for ragtrail (core + contrib $OTELCOL_CONTRIB_VERSION)
  output_path: $1
receivers:
  - gomod: $core/receiver/otlpreceiver $OTELCOL_CORE_VERSION
processors:
  - gomod: $core/processor/batchprocessor $OTELCOL_CORE_VERSION
  - gomod: $core/processor/memorylimiterprocessor $OTELCOL_CORE_VERSION
  - gomod: $contrib/processor/tailsamplingprocessor $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/processor/transformprocessor $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/processor/attributesprocessor $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/processor/filterprocessor $OTELCOL_CONTRIB_VERSION
exporters:
  - gomod: $core/exporter/otlpexporter $OTELCOL_CORE_VERSION
  - gomod: $core/exporter/otlphttpexporter $OTELCOL_CORE_VERSION
  - gomod: $core/exporter/debugexporter $OTELCOL_CORE_VERSION
  - gomod: $contrib/exporter/fileexporter $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/exporter/loadbalancingexporter $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/exporter/clickhouseexporter $OTELCOL_CONTRIB_VERSION
  - gomod: $contrib/exporter/prometheusexporter $OTELCOL_CONTRIB_VERSION
replaces:
  # loadbalancingexporter's aws_cloud_map resolver wants servicediscovery v1.48.0, which the Go
  # module proxy here refuses (403); v1.40.2 is served and has the same DiscoverInstances API.
  - github.com/aws/aws-sdk-go-v2/service/servicediscovery => github.com/aws/aws-sdk-go-v2/service/servicediscovery $AWS_SERVICEDISCOVERY_VERSION
EOF
}

build_collector() {
  local out="$BIN_DIR/otelcol-ragtrail" src="$WORK_DIR/otelcol"
  # the stamp covers the whole builder manifest: adding a component rebuilds too
  local manifest_sha
  manifest_sha="$(write_manifest "$src" | sha256sum | cut -c1-16)"
  local stamp="otelcol builder=$OTELCOL_BUILDER_VERSION manifest=$manifest_sha $(go env GOVERSION)"
  if up_to_date "$out" "$stamp"; then log "collector up to date ($OTELCOL_CONTRIB_VERSION)"; return 0; fi
  local builder="$BIN_DIR/ocb-$OTELCOL_BUILDER_VERSION"
  if [ ! -x "$builder" ]; then
    log "installing collector builder $OTELCOL_BUILDER_VERSION"
    GOBIN="$WORK_DIR/gobin" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_BUILDER_VERSION"
    mv -f "$WORK_DIR/gobin/builder" "$builder"
  fi
  mkdir -p "$src"
  write_manifest "$src" > "$WORK_DIR/otelcol-builder.yaml"
  log "building collector (core $OTELCOL_CORE_VERSION, contrib $OTELCOL_CONTRIB_VERSION) in $src"
  "$builder" --config "$WORK_DIR/otelcol-builder.yaml"
  mv -f "$src/otelcol-ragtrail" "$out"
  echo "$stamp" > "$out.stamp"
  (cd "$src" && go list -m all) > "$BACKENDS_DIR/otelcol.modules.txt" 2>/dev/null || true
}

for t in "${TARGETS[@]}"; do
  case "$t" in
    jaeger) build_jaeger ;;
    collector) build_collector ;;
    weaviate) build_weaviate ;;
  esac
done

for t in "${TARGETS[@]}"; do
  case "$t" in
    jaeger) echo "jaeger=$BIN_DIR/jaeger" ;;
    collector) echo "otelcol=$BIN_DIR/otelcol-ragtrail" ;;
    weaviate) echo "weaviate=$BIN_DIR/weaviate-server" ;;
  esac
done
