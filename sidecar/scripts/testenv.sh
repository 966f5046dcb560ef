#!/usr/bin/env bash
# Runs a command (the Go tests) with the services the test suites need.
#
# Usage: sidecar/scripts/testenv.sh COMMAND [ARG...]
#
# PostgreSQL: TEST_DATABASE_URL when set; otherwise the project-local cluster
# of sidecar/scripts/devdb.sh is started (and left running, as for
# `make run`; `make db-stop` stops it) and TEST_DATABASE_URL points at it.
#
# Redis (queue-mode end-to-end tests): IC_REDIS_ADDR when set, else
# 127.0.0.1:6379 when something answers there; otherwise, if redis-server is
# installed, a throwaway Redis without persistence is started on a free port
# for the duration of COMMAND and stopped afterwards by its PID.
#
# The PostgreSQL bin folder (pgbench, psql) is put on PATH when found.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEVDB="$ROOT/sidecar/scripts/devdb.sh"

say() { printf 'testenv: %s\n' "$*" >&2; }

[ $# -gt 0 ] || {
	say "usage: $0 COMMAND [ARG...]"
	exit 2
}

if [ -z "${TEST_DATABASE_URL:-}" ]; then
	"$DEVDB" start
	TEST_DATABASE_URL=$("$DEVDB" url)
	export TEST_DATABASE_URL
	say "TEST_DATABASE_URL=$TEST_DATABASE_URL (project-local cluster)"
fi
if bindir=$("$DEVDB" bindir 2>/dev/null); then
	export PATH="$bindir:$PATH"
fi

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

redis_pid=""
redis_dir=""
# shellcheck disable=SC2317 # called from the traps
stop_all() {
	if [ -n "$redis_pid" ] && kill -0 "$redis_pid" 2>/dev/null; then
		kill "$redis_pid" 2>/dev/null || true
		# Give it up to 10 s to exit. Bounded: the daemon is not our child,
		# and until whoever adopted it reaps it, kill -0 still succeeds.
		for ((i = 0; i < 100; i++)); do
			kill -0 "$redis_pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	[ -z "$redis_dir" ] || rm -rf "$redis_dir"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${IC_REDIS_ADDR:-}" ] && ! answers 127.0.0.1 6379; then
	if command -v redis-server >/dev/null; then
		port=""
		for ((p = 56379; p < 56479; p++)); do
			if ! answers 127.0.0.1 "$p"; then
				port=$p
				break
			fi
		done
		[ -n "$port" ] || {
			say "no free port for Redis in 56379-56478"
			exit 1
		}
		mkdir -p "$ROOT/.run"
		redis_dir=$(mktemp -d "$ROOT/.run/redis.XXXXXX")
		redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
			--dir "$redis_dir" --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log"
		# --daemonize returns after the fork; the pid file is written by
		# the daemon, and the port answers once it is listening.
		for ((i = 0; i < 100; i++)); do
			if [ -s "$redis_dir/redis.pid" ] && answers 127.0.0.1 "$port"; then
				break
			fi
			sleep 0.1
		done
		redis_pid=$(cat "$redis_dir/redis.pid" 2>/dev/null || true)
		answers 127.0.0.1 "$port" || {
			say "redis-server did not start; see $redis_dir/redis.log"
			exit 1
		}
		export IC_REDIS_ADDR="127.0.0.1:$port"
		say "IC_REDIS_ADDR=$IC_REDIS_ADDR (throwaway redis-server, pid $redis_pid)"
	else
		say "no Redis at 127.0.0.1:6379 and redis-server is not installed: the queue-mode"
		say "end-to-end tests will fail. Install it (Debian/Ubuntu: apt-get install redis-server;"
		say "macOS: brew install redis) or set IC_REDIS_ADDR=host:port."
	fi
fi

# Not exec: the EXIT trap must run to stop a Redis started here. The command
# stays in the foreground (a background job would ignore Ctrl-C): Ctrl-C
# reaches the whole process group, go test stops its test binaries, and the
# traps run once it has returned.
rc=0
"$@" || rc=$?
exit "$rc"
