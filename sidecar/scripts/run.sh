#!/usr/bin/env bash
# `make run`: builds bin/claimd and starts the sidecar in the foreground.
#
# Database: DATABASE_URL when set; otherwise the project-local cluster of
# sidecar/scripts/devdb.sh (started, and its database `claimd` created, as
# needed; it keeps running after claimd exits). API keys: CLAIMD_API_KEYS
# when set; otherwise one demo key for tenant `demo`, generated once and kept
# in .run/demo-key (git-ignored). Listen address: CLAIMD_ADDR (default
# 127.0.0.1:8080). Every other CLAIMD_* variable is passed through to the
# binary; extra arguments go to `claimd serve`.
#
# claimd keeps this script's PID (exec), written to .run/claimd.pid for
# signals, next to the address in .run/claimd.addr. Before it builds anything
# the script refuses to start (exit 1, the PID file left as it is) when the
# PID in .run/claimd.pid is a running claimd, or when something already
# listens on the address, and says what runs there and how to stop it. A PID
# file of a process that has exited, or of another program, is replaced.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }

command -v go >/dev/null || {
	say "run: Go is not installed (https://go.dev/dl/, or brew install go; go.mod names the"
	say "     minimum version). make doctor lists every prerequisite and how to install it."
	exit 1
}

addr=${CLAIMD_ADDR:-127.0.0.1:8080}
host=${addr%:*}
port=${addr##*:}
case "$host" in
"" | 0.0.0.0 | "[::]" | "::") host=127.0.0.1 ;;
esac
pid_file=.run/claimd.pid
addr_file=.run/claimd.addr

# args_of PID: the process's command line, its arguments joined by spaces;
# fails when there is none (no such process, or a zombie).
args_of() {
	local a
	if [ -r "/proc/$1/cmdline" ]; then
		a=$(tr '\0' ' ' <"/proc/$1/cmdline")
	else
		a=$(ps -o args= -p "$1" 2>/dev/null) || return 1
	fi
	a=${a% }
	[ -n "$a" ] && printf '%s' "$a"
}

# is_claimd ARGS: the command line of a claimd, or of this script before it
# execs one.
is_claimd() {
	local prog script rest
	read -r prog script rest <<<"$1"
	[ "${prog##*/}" = claimd ] && return 0
	case "${prog##*/}:$script" in
	bash:*sidecar/scripts/run.sh | sh:*sidecar/scripts/run.sh) return 0 ;;
	esac
	return 1
}

# listener PORT: the PID listening on PORT, when lsof or ss can tell (they
# see this user's processes only, unless run as root).
listener() {
	local out
	if command -v lsof >/dev/null && out=$(lsof -nP -t -iTCP:"$1" -sTCP:LISTEN 2>/dev/null) && [ -n "$out" ]; then
		printf '%s' "${out%%$'\n'*}"
		return 0
	fi
	if command -v ss >/dev/null && out=$(ss -Hltnp "sport = :$1" 2>/dev/null) && [[ $out =~ pid=([0-9]+) ]]; then
		printf '%s' "${BASH_REMATCH[1]}"
		return 0
	fi
	return 1
}

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# already_running PID [ADDRESS]: the message, then exit 1.
already_running() {
	say "run: claimd is already running (pid $1)${2:+ on http://$2}; stop it: kill -TERM $1"
	say "     (a second claimd needs another CLAIMD_ADDR and its own PID file: start it"
	say "     with bin/claimd serve rather than make run)"
	exit 1
}

if [ -s "$pid_file" ]; then
	old=$(cat "$pid_file")
	# Not this script's own PID: a stale file may name a PID since reused.
	if [[ $old =~ ^[0-9]+$ ]] && [ "$old" != $$ ] && kill -0 "$old" 2>/dev/null &&
		args=$(args_of "$old") && is_claimd "$args"; then
		already_running "$old" "$(cat "$addr_file" 2>/dev/null || true)"
	fi
fi
probe=${host#[}
probe=${probe%]}
if answers "$probe" "$port"; then
	pid=""
	args=""
	if pid=$(listener "$port"); then
		args=$(args_of "$pid") || true
		if is_claimd "$args"; then
			already_running "$pid" "$addr"
		fi
	fi
	say "run: something is already listening on $host:$port${pid:+ (pid $pid${args:+: $args})}."
	say "     Stop it${pid:+ (kill -TERM $pid)}, or start claimd on another address:"
	say "       CLAIMD_ADDR=127.0.0.1:9090 make run"
	exit 1
fi

say "run: building bin/claimd"
go build -o bin/claimd ./sidecar/cmd/claimd

local_db=0
if [ -z "${DATABASE_URL:-}" ]; then
	local_db=1
	sidecar/scripts/devdb.sh start
	sidecar/scripts/devdb.sh createdb claimd
	DATABASE_URL=$(sidecar/scripts/devdb.sh url claimd)
	db_shown=$DATABASE_URL
else
	# Hide a password, whether in the userinfo or a password= parameter.
	db_shown=$(printf '%s' "$DATABASE_URL" | sed -E 's#(://[^:/@]*:)[^@]*@#\1*****@#; s#([?&]password=)[^&]*#\1*****#; s#(^| )(password=)[^ ]*#\1\2*****#')
fi
export DATABASE_URL

key=""
if [ -z "${CLAIMD_API_KEYS:-}" ]; then
	mkdir -p .run
	if [ ! -s .run/demo-key ]; then
		(
			umask 077
			# 32 random bytes, hex-encoded.
			od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >.run/demo-key.tmp
		)
		mv .run/demo-key.tmp .run/demo-key
	fi
	key=$(cat .run/demo-key)
	export CLAIMD_API_KEYS="demo:$key"
fi

export CLAIMD_ADDR=$addr

cat >&2 <<EOF

  database    $db_shown
  listening   http://$addr   (another address: CLAIMD_ADDR=127.0.0.1:9090 make run)
EOF
if [ -n "$key" ]; then
	cat >&2 <<EOF
  api key     $key   (tenant "demo", kept in .run/demo-key)
EOF
	auth_key=$key
else
	say "  api keys    from CLAIMD_API_KEYS"
	auth_key='<your api key>'
fi
cat >&2 <<EOF

  try:
    curl -sS -X POST http://$host:$port/v1/claims \\
      -H 'Authorization: Bearer $auth_key' \\
      -H 'Content-Type: application/json' \\
      -d '{"source":"stripe","event_id":"evt_demo_1"}'
  (the first call answers "outcome":"won", a repeat "in_progress")

  signals     kill -HUP \$(cat .run/claimd.pid) reloads CLAIMD_SOURCES_FILE;
              kill -TERM \$(cat .run/claimd.pid) drains and stops
EOF
if [ "$local_db" = 1 ]; then
	cat >&2 <<'EOF'
  database    the project-local PostgreSQL keeps running after claimd exits:
              make db-stop stops it, make db-reset deletes it with its data
EOF
fi
say ""

# exec keeps this PID for claimd: record it for signals.
mkdir -p .run
echo $$ >"$pid_file"
echo "$addr" >"$addr_file"
exec bin/claimd serve "$@"
