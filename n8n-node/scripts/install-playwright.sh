#!/usr/bin/env bash
# Installs the pinned playwright-core that drives Debian's Chromium for the
# browser tests of the console (sidecar/e2e/console_browser_test.go) and the
# documents' screenshots (make screenshot:
# n8n-node/examples/README.md#walk-through-inline-claimjson; make
# console-screenshots: sidecar/docs/operations.md#console-screenshots), into
# a per-user cache outside the checkout: one install for all of them, reused
# by later runs and by CI on the same machine. Idempotent: a completed install is
# detected by a marker written only after the package loads; a half install
# is removed and redone. Concurrent runs are serialised with flock.
#
# playwright-core downloads no browser (the tests use the system Chromium:
# CHROMIUM_PATH, default /usr/bin/chromium; Debian: apt-get install chromium).
#
# Usage: n8n-node/scripts/install-playwright.sh
# Env:   IC_CACHE_DIR  cache root (default: $HOME/.cache/idempotent-claim)
#        NPM           npm to run (default: npm on PATH; any Node >= 18)
# Output (stdout, one line, nothing else):
#   IC_SCREENSHOT_TOOLS=<folder whose node_modules holds playwright-core>
# Progress and errors go to stderr.
set -euo pipefail

PLAYWRIGHT_VERSION=1.65.1

CACHE_DIR="${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}"
TOOLS="$CACHE_DIR/screenshot-tools"
PKG="$TOOLS/node_modules/playwright-core/package.json"
MARKER="$TOOLS/.install-complete-$PLAYWRIGHT_VERSION"
NPM=${NPM:-npm}

log() { printf 'install-playwright: %s\n' "$*" >&2; }

installed() {
	[ -f "$MARKER" ] && [ -f "$PKG" ] &&
		grep -q "\"version\": *\"$PLAYWRIGHT_VERSION\"" "$PKG"
}

if installed; then
	log "playwright-core $PLAYWRIGHT_VERSION present"
	printf 'IC_SCREENSHOT_TOOLS=%s\n' "$TOOLS"
	exit 0
fi

command -v "$NPM" >/dev/null || {
	log "$NPM not found: install Node.js and npm (Debian: apt-get install nodejs npm)"
	exit 1
}

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.install-playwright.lock"
if ! flock -w 600 9; then
	log "another install held the lock for 10 minutes; giving up"
	exit 1
fi

if ! installed; then
	log "installing playwright-core $PLAYWRIGHT_VERSION into $TOOLS"
	rm -rf "$TOOLS"
	mkdir -p "$TOOLS"
	printf '{\n  "name": "ic-screenshot-tools",\n  "private": true\n}\n' >"$TOOLS/package.json"
	"$NPM" install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error \
		"playwright-core@$PLAYWRIGHT_VERSION" >&2 || {
		rc=$?
		log "npm install playwright-core@$PLAYWRIGHT_VERSION failed (exit $rc)"
		exit "$rc"
	}
	node -e 'require(require.resolve("playwright-core", { paths: [process.argv[1]] }))' "$TOOLS" || {
		log "playwright-core does not load from $TOOLS"
		exit 1
	}
	date -u +%Y-%m-%dT%H:%M:%SZ >"$MARKER"
	log "playwright-core $PLAYWRIGHT_VERSION installed"
fi

printf 'IC_SCREENSHOT_TOOLS=%s\n' "$TOOLS"
