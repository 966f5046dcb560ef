#!/usr/bin/env bash
# make compose-test: the shipped docker-compose.yml built, brought up,
# stormed, restarted, upgraded and torn down for real
# (TestComposeStack in sidecar/e2e/compose_stack_test.go says what it checks).
#
# Container engine: podman when installed (its Docker-compatible API is
# served on a socket of this run's own, and sidecar/deploy/local-images/
# health-pump.sh runs the health checks podman cannot schedule without
# systemd), else the Docker engine of DOCKER_HOST. Compose: Docker Compose
# v2 (sidecar/deploy/local-images/compose-tool.sh finds or builds one).
# Images: IC_COMPOSE_IMAGES=local (default) builds the registry images'
# stand-ins with sidecar/deploy/local-images/build.sh and adds
# docker-compose.local.yml; registry pulls them.
#
# The upgrade step starts claimd from COMPOSE_PREVIOUS (a git ref, default
# below), built with the current sidecar/Dockerfile, and replaces it with the
# current build while deliveries flow.
#
# Environment: IC_COMPOSE_IMAGES (local | registry), IC_CONTAINER_ENGINE
# (podman | docker), COMPOSE_PREVIOUS (git ref), IC_CACHE_DIR.
# Everything it starts (the podman service, the health pump) is stopped by
# PID when it ends; the test removes its containers, networks and volumes.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL="$ROOT/sidecar/deploy/local-images"
say() { printf 'compose-test: %s\n' "$*" >&2; }
began=$(date +%s)
elapsed() { echo "$(($(date +%s) - began)) s"; }

engine="${IC_CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
	if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
export IC_CONTAINER_ENGINE="$engine"

pids=()
work="$(mktemp -d "${TMPDIR:-/tmp}/ic-compose-test.XXXXXX")"
# The test names its compose projects with this prefix; whatever of them an
# interrupted run leaves is taken down here.
IC_COMPOSE_PROJECT_PREFIX="ic-test-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
export IC_COMPOSE_PROJECT_PREFIX
compose=""
cleanup() {
	if [ -n "$compose" ]; then
		for p in $($compose ls --all --quiet 2>/dev/null | grep "^$IC_COMPOSE_PROJECT_PREFIX-" || true); do
			say "taking down $p, left by an interrupted run"
			$compose --project-name "$p" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
		done
	fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

if [ "$engine" = podman ]; then
	export CONTAINERS_CONF="${CONTAINERS_CONF:-$LOCAL/containers.conf}"
	sock="$work/podman.sock"
	podman system service --time=0 "unix://$sock" >"$work/podman-service.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
	[ -S "$sock" ] || { say "podman system service did not start: $(tail -5 "$work/podman-service.log")"; exit 1; }
	export DOCKER_HOST="unix://$sock"
	# podman's API builds with buildah; BuildKit's session protocol is not
	# served there.
	export DOCKER_BUILDKIT=0
	"$LOCAL/health-pump.sh" &
	pids+=($!)
fi

compose="$("$LOCAL/compose-tool.sh")"
say "compose: $compose ($($compose version --short 2>/dev/null || echo '?')), engine: $engine ($(elapsed))"

files="$ROOT/docker-compose.yml"
if [ "${IC_COMPOSE_IMAGES:-local}" = local ]; then
	"$LOCAL/build.sh"
	files="$files:$LOCAL/docker-compose.local.yml"
	say "stand-in images ready ($(elapsed))"
fi

# The previous claimd: its sources at COMPOSE_PREVIOUS, the current
# Dockerfile and base images.
previous="${COMPOSE_PREVIOUS:-005be1c}"
prev_src="$work/previous"
mkdir -p "$prev_src"
git -C "$ROOT" archive "$previous" go.mod go.sum schema sidecar | tar -x -C "$prev_src"
build_args=()
if [ "${IC_COMPOSE_IMAGES:-local}" = local ]; then
	build_args=(--build-arg GO_IMAGE=localhost/idempotent-claim-local/golang:1.26
		--build-arg RUNTIME_IMAGE=localhost/idempotent-claim-local/distroless-static:nonroot)
fi
pull=()
[ "$engine" = podman ] && pull=(--pull=never --format docker)
prev_image="localhost/idempotent-claim/claimd:previous-$(git -C "$ROOT" rev-parse --short=12 "$previous")"
if ! "$engine" image inspect "$prev_image" >/dev/null 2>&1; then
	say "building claimd at $previous as $prev_image"
	"$engine" build "${pull[@]}" "${build_args[@]}" -t "$prev_image" -f "$ROOT/sidecar/Dockerfile" "$prev_src" >"$work/previous-build.log" 2>&1 || {
		tail -30 "$work/previous-build.log" >&2
		exit 1
	}
fi
say "previous claimd ready ($(elapsed))"

cd "$ROOT"
trap 'exit 130' INT TERM
IC_COMPOSE_TEST=1 IC_COMPOSE="$compose" COMPOSE_FILE="$files" IC_COMPOSE_PREVIOUS_IMAGE="$prev_image" \
	go test ./sidecar/e2e -run '^TestComposeStack$' -count=1 -v -timeout 80m
say "done in $(elapsed)"
