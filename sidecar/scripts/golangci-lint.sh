#!/usr/bin/env bash
# Runs golangci-lint (https://golangci-lint.run), the pinned version, with
# sidecar/.golangci.yml on the repository's Go packages (make lint).
#
# Usage: sidecar/scripts/golangci-lint.sh [ARG...]
#   no arguments: run ./sidecar/... ./schema/...
#   arguments:    passed to `golangci-lint run` after --config, e.g.
#                 ./sidecar/verify/... or --fix ./sidecar/strictjson
#
# golangci-lint is built once, at the pinned version, into
# $IC_CACHE_DIR/tools/bin (default $HOME/.cache/idempotent-claim) with
# `go install` (about two minutes), and used from there; a cached binary of
# another version is replaced.
set -euo pipefail

GOLANGCI_LINT_VERSION=v2.15.0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN="${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}/tools/bin"
LINT="$BIN/golangci-lint"

say() { printf 'golangci-lint.sh: %s\n' "$*" >&2; }

# have reports whether the cached golangci-lint is the pinned version.
have() {
	[ -x "$LINT" ] && [ "v$("$LINT" version --short 2>/dev/null)" = "$GOLANGCI_LINT_VERSION" ]
}

if ! have; then
	say "building golangci-lint $GOLANGCI_LINT_VERSION into $BIN (once; a few minutes)"
	mkdir -p "$BIN"
	# Outside the module, so that go install uses golangci-lint's own
	# go.mod, not this repository's.
	(cd "${TMPDIR:-/tmp}" && GOBIN="$BIN" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION")
	have || {
		say "the build did not leave golangci-lint $GOLANGCI_LINT_VERSION in $BIN"
		exit 1
	}
fi

cd "$ROOT"
[ $# -gt 0 ] || set -- ./sidecar/... ./schema/...
exec "$LINT" run --config sidecar/.golangci.yml "$@"
