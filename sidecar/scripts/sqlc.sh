#!/usr/bin/env bash
# Runs sqlc (https://sqlc.dev) on sidecar/db/sqlc.yaml: the statements in
# sidecar/db/queries/*.sql, checked against the schema of the migrations,
# generate package sidecar/db/dbsqlc.
#
# Usage: sidecar/scripts/sqlc.sh generate   regenerate sidecar/db/dbsqlc
#        sidecar/scripts/sqlc.sh diff       fail when the committed code differs
#        sidecar/scripts/sqlc.sh check      diff, or skip with a note when
#                                           sqlc is not built and cannot be
#                                           (make lint)
#
# sqlc is built once, at the pinned version, into
# $IC_CACHE_DIR/tools/bin (default $HOME/.cache/idempotent-claim) with
# `go install` (it needs cgo: a C compiler), and used from there.
set -euo pipefail

SQLC_VERSION=v1.31.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN="${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}/tools/bin"
SQLC="$BIN/sqlc"

say() { printf 'sqlc.sh: %s\n' "$*" >&2; }

# have reports whether the cached sqlc is the pinned version.
have() {
	[ -x "$SQLC" ] && [ "$("$SQLC" version 2>/dev/null)" = "$SQLC_VERSION" ]
}

build() {
	say "building sqlc $SQLC_VERSION into $BIN (once; a few minutes)"
	mkdir -p "$BIN"
	(cd "${TMPDIR:-/tmp}" && GOBIN="$BIN" CGO_ENABLED=1 go install "github.com/sqlc-dev/sqlc/cmd/sqlc@$SQLC_VERSION")
}

cmd=${1:-}
case "$cmd" in
generate | diff)
	have || build
	cd "$ROOT/sidecar/db"
	"$SQLC" "$cmd" -f sqlc.yaml
	;;
check)
	if ! have; then
		if ! command -v go >/dev/null || ! command -v "${CC:-cc}" >/dev/null; then
			say "skipped: sqlc is not built and needs go and a C compiler to build (make sqlc)"
			exit 0
		fi
		build || {
			say "skipped: sqlc could not be built (make sqlc shows why)"
			exit 0
		}
	fi
	cd "$ROOT/sidecar/db"
	"$SQLC" diff -f sqlc.yaml || {
		say "sidecar/db/dbsqlc is not what sidecar/db/queries generate: run make sqlc"
		exit 1
	}
	;;
*)
	say "usage: $0 generate|diff|check"
	exit 2
	;;
esac
