#!/usr/bin/env bash
# Manages the project-local PostgreSQL cluster used by `make run` and
# `make test` when DATABASE_URL / TEST_DATABASE_URL are not set.
#
# Usage: sidecar/scripts/devdb.sh start|stop|status|url [DB]|createdb DB|bindir|destroy
#   start     initialise the cluster if missing, then start it and wait until
#             it accepts connections (no-op when already running)
#   stop      stop it (fast shutdown; no-op when stopped)
#   status    print whether it runs; exit 0 when running, 3 when stopped or
#             not initialised (for scripts; make db-status prints the same
#             and exits 0 either way)
#   url [DB]  print postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable
#             (DB defaults to postgres)
#   createdb DB  create database DB in the running cluster unless it exists
#   bindir    print the folder holding initdb/pg_ctl (and pgbench, psql)
#   destroy   stop the cluster and delete it with all its data
#
# Layout (all git-ignored): .pgdata/data (the cluster), .pgdata/port (the
# port chosen at the first start, reused afterwards), .pgdata/postgres.log.
# The server listens on 127.0.0.1 only, on TCP only (no Unix socket), with
# trust authentication: it is a developer and test database, never a
# production one. The preferred port is 54329 (DEVDB_PORT overrides); when it
# is taken by something else, the next free port is used and remembered.
#
# Running as root: initdb and postgres refuse to run as root. When this script
# runs with uid 0 it runs every server-side command (initdb, pg_ctl) as an
# unprivileged user through runuser (or su): DEVDB_USER if set, else the
# `postgres` user if it exists, else `nobody`. The cluster folder is chowned to
# that user. If that user cannot reach the checkout (for instance a checkout
# under /root, mode 0700), the cluster lives in /var/tmp/idempotent-claim-pg-*
# instead and .pgdata/datadir records where.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE="$ROOT/.pgdata"
PORT_FILE="$STATE/port"
DATADIR_FILE="$STATE/datadir"
PREFERRED_PORT="${DEVDB_PORT:-54329}"
# Tests open a few hundred connections at once (concurrent-claim tests, n8n,
# several sidecars); the PostgreSQL default of 100 is too low for them.
MAX_CONNECTIONS=300

die() {
	printf 'devdb: %s\n' "$*" >&2
	exit 1
}
log() { printf 'devdb: %s\n' "$*" >&2; }

# find_bindir prints the first folder that holds both initdb and pg_ctl:
# PATH first, then the usual install folders (newest version first).
find_bindir() {
	local d c
	if c=$(command -v pg_ctl 2>/dev/null) && [ -n "$c" ]; then
		# Resolve symlinks (for example /usr/local/bin/pg_ctl ->
		# /usr/lib/postgresql/NN/bin/pg_ctl) so the sibling tools are found.
		if command -v readlink >/dev/null && readlink -f / >/dev/null 2>&1; then
			c=$(readlink -f "$c")
		fi
		d=$(dirname "$c")
		if [ -x "$d/initdb" ]; then
			echo "$d"
			return 0
		fi
	fi
	local candidates=()
	shopt -s nullglob
	# Version folders sorted numerically, highest first.
	local versioned=(/usr/lib/postgresql/*/bin)
	if [ ${#versioned[@]} -gt 0 ]; then
		while IFS= read -r d; do candidates+=("$d"); done < <(printf '%s\n' "${versioned[@]}" | sort -t/ -k4,4nr)
	fi
	candidates+=(/usr/local/pgsql/bin /opt/homebrew/opt/postgresql*/bin /usr/local/opt/postgresql*/bin
		/Applications/Postgres.app/Contents/Versions/latest/bin)
	shopt -u nullglob
	for d in "${candidates[@]}"; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

need_bindir() {
	if ! BIN=$(find_bindir); then
		cat >&2 <<'EOF'
devdb: PostgreSQL server programs (initdb, pg_ctl) not found on PATH or in the
usual install folders. Install PostgreSQL, or point the project at an existing
server instead:
  Debian/Ubuntu:  sudo apt-get install postgresql
  macOS:          brew install postgresql@16
  or set DATABASE_URL (make run) / TEST_DATABASE_URL (make test), e.g.
    export DATABASE_URL='postgres://USER:PASSWORD@HOST:5432/DB?sslmode=disable'
EOF
		exit 1
	fi
}

# --- running as root -------------------------------------------------------

RUN_AS=""
if [ "$(id -u)" = 0 ]; then
	if [ -n "${DEVDB_USER:-}" ]; then
		RUN_AS=$DEVDB_USER
	elif id postgres >/dev/null 2>&1; then
		RUN_AS=postgres
	else
		RUN_AS=nobody
	fi
	id "$RUN_AS" >/dev/null 2>&1 || die "running as root and user '$RUN_AS' does not exist; set DEVDB_USER to an unprivileged user"
fi

# as_runner runs a command as the cluster owner (RUN_AS when root, else the
# caller), from a folder that user can enter. File descriptor 8 (the start
# lock, see lock) is closed for the child: a postmaster started by pg_ctl
# would otherwise inherit it and hold the lock for as long as it runs.
as_runner() {
	local dir=$1
	shift
	if [ -z "$RUN_AS" ]; then
		(cd "$dir" && "$@" 8>&-)
	elif command -v runuser >/dev/null; then
		(cd "$dir" && runuser -u "$RUN_AS" -- "$@" 8>&-)
	elif command -v su >/dev/null; then
		local cmd
		cmd=$(printf '%q ' "$@")
		(cd "$dir" && su -s /bin/sh "$RUN_AS" -c "$cmd" 8>&-)
	else
		die "running as root, and neither runuser nor su is available to drop to '$RUN_AS'"
	fi
}

# data_root prints the folder holding data/ and postgres.log.
data_root() {
	if [ -f "$DATADIR_FILE" ]; then
		cat "$DATADIR_FILE"
	else
		echo "$STATE"
	fi
}

# prepare_state creates .pgdata and, when root, picks a folder the cluster
# owner can reach and hands it over.
prepare_state() {
	mkdir -p "$STATE"
	[ -n "$RUN_AS" ] || return 0
	if [ ! -f "$DATADIR_FILE" ] && [ ! -d "$STATE/data" ]; then
		chown "$RUN_AS" "$STATE"
		if ! as_runner / test -w "$STATE" -a -x "$STATE"; then
			local sum ext
			sum=$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)
			ext="/var/tmp/idempotent-claim-pg-$sum"
			log "user '$RUN_AS' cannot reach $STATE; keeping the cluster in $ext"
			echo "$ext" >"$DATADIR_FILE"
		fi
	fi
	local dr
	dr=$(data_root)
	mkdir -p "$dr"
	chown "$RUN_AS" "$dr"
	chmod 0700 "$dr"
	[ ! -d "$dr/data" ] || chown -R "$RUN_AS" "$dr/data"
}

# --- helpers ---------------------------------------------------------------

port_in_use() {
	# A successful TCP connect means something listens there.
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

is_running() {
	local dr
	dr=$(data_root)
	[ -f "$dr/data/PG_VERSION" ] || return 1
	as_runner "$dr" "$BIN/pg_ctl" status -D "$dr/data" >/dev/null 2>&1
}

stored_port() {
	[ -f "$PORT_FILE" ] || die "no cluster yet: run 'sidecar/scripts/devdb.sh start' (or make db-start) first"
	cat "$PORT_FILE"
}

choose_port() {
	local p
	if [ -f "$PORT_FILE" ]; then
		p=$(cat "$PORT_FILE")
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
		log "port $p (used before) is taken by another program; choosing another"
	fi
	for ((p = PREFERRED_PORT; p < PREFERRED_PORT + 100; p++)); do
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free port in $PREFERRED_PORT-$((PREFERRED_PORT + 99)) on 127.0.0.1"
}

wait_ready() {
	local port=$1 pgready="" i
	if [ -x "$BIN/pg_isready" ]; then
		pgready="$BIN/pg_isready"
	elif command -v pg_isready >/dev/null; then
		pgready=$(command -v pg_isready)
	fi
	[ -n "$pgready" ] || return 0 # pg_ctl -w already waited for "ready"
	# pg_ctl -w returns once the postmaster reports ready, so this normally
	# succeeds on the first try; the loop only covers slow starts after a
	# crash recovery.
	for ((i = 0; i < 60; i++)); do
		if "$pgready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -t 1; then
			return 0
		fi
		sleep 1
	done
	die "server did not accept connections on 127.0.0.1:$port; see $(data_root)/postgres.log"
}

psql_cmd() {
	local psql=""
	if [ -x "$BIN/psql" ]; then
		psql="$BIN/psql"
	elif command -v psql >/dev/null; then
		psql=$(command -v psql)
	else
		die "psql not found (install the PostgreSQL client)"
	fi
	"$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(stored_port)" -U postgres "$@"
}

lock() {
	mkdir -p "$STATE"
	if command -v flock >/dev/null; then
		exec 8>"$STATE/.lock"
		flock 8
	fi
}

# --- subcommands -----------------------------------------------------------

cmd_start() {
	need_bindir
	lock
	prepare_state
	local dr data
	dr=$(data_root)
	data="$dr/data"
	if [ -f "$data/PG_VERSION" ]; then
		local have want
		have=$(cat "$data/PG_VERSION")
		want=$("$BIN/pg_ctl" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')
		if [ "$have" != "$want" ]; then
			die "the cluster in $data was made by PostgreSQL $have but $BIN is PostgreSQL $want; remove it with 'make db-reset' (deletes its data) or put the $have binaries first on PATH"
		fi
	else
		log "initialising a new cluster in $data (PostgreSQL binaries: $BIN)"
		rm -rf "$data"
		as_runner "$dr" "$BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale >"$dr/initdb.log" 2>&1 ||
			die "initdb failed; see $dr/initdb.log"
		cat >>"$data/postgresql.conf" <<EOF

# idempotent-claim developer cluster (sidecar/scripts/devdb.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = $MAX_CONNECTIONS
EOF
		[ -z "$RUN_AS" ] || chown "$RUN_AS" "$data/postgresql.conf"
	fi

	if is_running; then
		log "already running on 127.0.0.1:$(stored_port)"
		return 0
	fi
	local port tries=0
	touch "$dr/postgres.log"
	[ -z "$RUN_AS" ] || chown "$RUN_AS" "$dr/postgres.log"
	while :; do
		port=$(choose_port)
		echo "$port" >"$PORT_FILE"
		local mark
		mark=$(wc -l <"$dr/postgres.log")
		if as_runner "$dr" "$BIN/pg_ctl" start -D "$data" -l "$dr/postgres.log" -w -t 120 -o "-p $port" >/dev/null; then
			break
		fi
		# A port can be taken in ways a connect probe does not see (another
		# server bound to it but not accepting yet): move on to the next one.
		tries=$((tries + 1))
		if [ "$tries" -lt 5 ] && tail -n +"$((mark + 1))" "$dr/postgres.log" | grep -q "Address already in use"; then
			log "port $port is taken; trying the next one"
			PREFERRED_PORT=$((port + 1))
			rm -f "$PORT_FILE"
			continue
		fi
		tail -n 20 "$dr/postgres.log" >&2 || true
		die "pg_ctl start failed; see $dr/postgres.log (DEVDB_PORT picks another port)"
	done
	wait_ready "$port"
	log "running on 127.0.0.1:$port (log: $dr/postgres.log)"
}

cmd_stop() {
	need_bindir
	if ! is_running; then
		log "not running"
		return 0
	fi
	local dr
	dr=$(data_root)
	as_runner "$dr" "$BIN/pg_ctl" stop -D "$dr/data" -m fast -w -t 120 >/dev/null
	log "stopped"
}

cmd_status() {
	need_bindir
	if is_running; then
		echo "running on 127.0.0.1:$(stored_port) (data: $(data_root)/data)"
		return 0
	fi
	if [ -f "$(data_root)/data/PG_VERSION" ]; then
		echo "stopped (data: $(data_root)/data)"
	else
		echo "not initialised"
	fi
	return 3
}

cmd_url() {
	local db=${1:-postgres} port
	port=$(stored_port)
	[ -n "$port" ] || die "no cluster yet: run 'make run' or 'make db-start' first"
	printf 'postgres://postgres@127.0.0.1:%s/%s?sslmode=disable\n' "$port" "$db"
}

cmd_createdb() {
	local db=${1:?usage: devdb.sh createdb DB}
	[[ $db =~ ^[a-z_][a-z0-9_]*$ ]] || die "database name '$db' must match [a-z_][a-z0-9_]*"
	need_bindir
	is_running || die "not running: run 'sidecar/scripts/devdb.sh start' first"
	if [ "$(psql_cmd -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
		psql_cmd -d postgres -c "CREATE DATABASE $db" >/dev/null
		log "created database $db"
	fi
}

cmd_destroy() {
	need_bindir
	cmd_stop
	local dr
	dr=$(data_root)
	[ "$dr" = "$STATE" ] || rm -rf "$dr"
	rm -rf "$STATE"
	log "removed the cluster"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
url) cmd_url "${2:-}" ;;
createdb) cmd_createdb "${2:-}" ;;
bindir)
	need_bindir
	echo "$BIN"
	;;
destroy) cmd_destroy ;;
*)
	# The usage block: from the Usage: line to the first empty comment line.
	sed -n '/^# Usage:/,/^#$/{/^#$/d;s/^# \{0,1\}//p;}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
