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
# claimd runs in the foreground (Ctrl-C stops it); its PID is written to
# .run/claimd.pid for signals, next to the address in .run/claimd.addr, and
# both files are removed when claimd exits. Before it builds anything the
# script refuses to start (exit 1, the PID file left as it is) when the PID
# in .run/claimd.pid is a running claimd, or when something already listens
# on the address, and says what runs there and how to stop it. A PID file of
# a process that has exited, or of another program (left by a claimd that
# was killed with SIGKILL), is stale: it is removed and says so.
#
# The build prints a line every IC_PROGRESS_SECONDS (default 15) while it
# runs: the first one downloads and compiles every Go module (1-4 min).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }

# shellcheck disable=SC1091 # sidecar/scripts/progress.sh, from the checkout root
. sidecar/scripts/progress.sh

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

# free_port_after PORT: the first port above PORT that nothing answers on
# (for the "another address" hint; 9090 is Prometheus's).
free_port_after() {
	local p
	for ((p = $1 + 1; p < $1 + 100; p++)); do
		[ "$p" = 9090 ] && continue
		answers 127.0.0.1 "$p" || break
	done
	printf '%s' "$p"
}

# build_hint: what to expect from go build. On a first build (the module
# cache lacks pgx, a dependency of claimd) every module is downloaded and
# compiled.
build_hint() {
	local dir
	dir=$(go list -m -f '{{.Dir}}' github.com/jackc/pgx/v5 2>/dev/null) || dir=""
	if [ -z "$dir" ] || [ ! -d "$dir" ]; then
		printf 'first build: downloads and compiles the Go modules, 1-4 min'
	fi
}

# already_running PID [ADDRESS]: the message, then exit 1.
already_running() {
	say "run: claimd is already running (pid $1)${2:+ on http://$2}; stop it: kill -TERM $1"
	say "     (a second claimd needs another CLAIMD_ADDR and its own PID file: start it"
	say "     with bin/claimd serve rather than make run)"
	exit 1
}

if [ -e "$pid_file" ]; then
	old=$(cat "$pid_file" 2>/dev/null || true)
	# Not this script's own PID: a stale file may name a PID since reused.
	if [[ $old =~ ^[0-9]+$ ]] && [ "$old" != $$ ] && kill -0 "$old" 2>/dev/null &&
		args=$(args_of "$old") && is_claimd "$args"; then
		already_running "$old" "$(cat "$addr_file" 2>/dev/null || true)"
	fi
	# Stale: claimd is gone (killed with SIGKILL, or the machine restarted)
	# and the PID, if any, is not a claimd's.
	say "run: removing the stale $pid_file${old:+ (pid $old is not a running claimd)}"
	rm -f "$pid_file" "$addr_file"
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
	say "       CLAIMD_ADDR=127.0.0.1:$(free_port_after "$port") make run"
	exit 1
fi

progress_step run "building bin/claimd" \
	"$(build_hint)" \
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
  listening   http://$addr   (another address: CLAIMD_ADDR=127.0.0.1:$(free_port_after "$port") make run)
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

# claimd runs in the foreground, so Ctrl-C reaches it; the inner shell
# writes its own PID, which exec hands to claimd, before it becomes claimd.
# The files go when claimd has exited (unless they name another claimd by
# then).
mkdir -p .run
echo "$addr" >"$addr_file"
# shellcheck disable=SC2317 # called from the trap
remove_pid_file() {
	local p
	p=$(cat "$pid_file" 2>/dev/null || true)
	if [ -n "$p" ] && [ "$p" = "${claimd_pid:-}" ]; then
		rm -f "$pid_file" "$addr_file"
	fi
}
claimd_pid=""
trap remove_pid_file EXIT
# Ctrl-C reaches claimd itself (it takes SIGINT, although started in the
# background): it drains and exits, then so does this script. A SIGTERM to
# this script is passed on.
trap '' INT
trap '[ -z "$claimd_pid" ] || kill -TERM "$claimd_pid" 2>/dev/null || true' TERM
# shellcheck disable=SC2016 # $$ and $@ are the inner shell's
bash -c 'echo $$ >"$1"; shift; exec bin/claimd serve "$@"' bash "$pid_file" "$@" &
claimd_pid=$!
while :; do
	rc=0
	wait "$claimd_pid" || rc=$?
	# A trapped signal ends wait early (status > 128): wait again.
	kill -0 "$claimd_pid" 2>/dev/null || break
done
exit "$rc"
