#!/usr/bin/env bash
# Prints a command that runs Docker Compose v2 (the compose file needs
# v2: top-level name, depends_on.required, profiles): `docker compose` when
# the docker CLI has the plugin, else a docker-compose v2 on the PATH, else
# one built from the Go module proxy (github.com/docker/compose/v2 at
# COMPOSE_VERSION) into $IC_CACHE_DIR/tools once (≈ 19 min cold on 2
# cores; later runs reuse it).
#
# Environment: COMPOSE_VERSION (default v2.40.3), IC_CACHE_DIR (default
# $HOME/.cache/idempotent-claim).
set -Eeuo pipefail
version="${COMPOSE_VERSION:-v2.40.3}"
cache="${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}/tools"
log() { echo "compose-tool: $*" >&2; }

if docker compose version >/dev/null 2>&1; then
	echo "docker compose"
	exit 0
fi
if command -v docker-compose >/dev/null 2>&1 && docker-compose version --short 2>/dev/null | grep -q '^v\?2\.'; then
	command -v docker-compose
	exit 0
fi
bin="$cache/docker-compose-$version"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
command -v go >/dev/null || { log "no Docker Compose v2 and no Go to build one"; exit 1; }
log "building Docker Compose $version from the Go module proxy into $cache (once; ≈ 19 min on 2 cores)"
start=$(date +%s)
dir="$(go mod download -json "github.com/docker/compose/v2@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -n "$dir" ] || { log "go mod download github.com/docker/compose/v2@$version failed"; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/ic-compose.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
mkdir -p "$cache"
(cd "$work" && go build -trimpath -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" -o "$bin.tmp" ./cmd)
mv "$bin.tmp" "$bin"
log "built in $(($(date +%s) - start)) s"
echo "$bin"
