#!/usr/bin/env bash
# `make doctor`: checks every prerequisite of `make run` and `make test` and
# prints, for each one that is missing, the command that installs it:
# Debian/Ubuntu (apt-get) and macOS (Homebrew) package names.
#
# Usage: sidecar/scripts/doctor.sh
# Exit:  0 when everything is present, 1 when anything is missing.
#
# One line a check: ok or missing, the tool, the version found (or why it is
# not needed), and for a missing one the install commands; then, when
# something is missing, one install command per platform for all of it.
#
#   make run    go (at least the version in go.mod), GNU make 3.82+, curl and
#               python3 (the commands of README.md#the-first-claim), and unless
#               DATABASE_URL is set PostgreSQL's server programs (initdb,
#               pg_ctl, found as `sidecar/scripts/devdb.sh bindir` finds
#               them) and psql
#   make test   all of make run's, plus node and npm (install-n8n.sh fetches
#               Node 24 with npm), cc, c++ and python3 for node-gyp (the
#               sqlite3 rebuild; not with IC_E2E=0), redis-server (unless
#               IC_REDIS_ADDR is set or something answers on 127.0.0.1:6379),
#               flock, git, promtool (the alerting rules' tests), and
#               PostgreSQL's server programs again: for the
#               project-local cluster unless TEST_DATABASE_URL is set, and
#               pg_basebackup and postgres for the failover tests unless
#               IC_PG_CLUSTER=0, and Chromium for the browser tests
#               (CHROMIUM_PATH, default /usr/bin/chromium; not with IC_E2E=0
#               or IC_BROWSER=0)
#   make try    setsid (util-linux), as well as make run's and make test's
#               node, npm, cc and c++ (the n8n install)
#
# Warnings (not counted as missing): shellcheck (make lint skips the shell
# checks without it), a port make run or make try listens on
# that something else holds (which program, when ss can tell), Debian's
# Prometheus server on :9090 (the prometheus package, installed for
# promtool, starts one), and whether the n8n install is cached yet.
#
# Written for bash 3.2 as well (macOS's /bin/bash).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

sudo=""
[ "$(id -u 2>/dev/null || echo 0)" = 0 ] || sudo="sudo "

missing=0
apt_all=""  # apt packages of everything missing, space-separated, no repeats
brew_all="" # Homebrew formulae, likewise
notes=""    # other steps (a download page, xcode-select), one a line

add_word() { # add_word LIST WORD: prints LIST with WORD appended unless in it
	case " $1 " in
	*" $2 "*) printf '%s' "$1" ;;
	*) printf '%s' "${1:+$1 }$2" ;;
	esac
}

# ok TOOL DETAIL
ok() { printf '  %-8s %-14s %s\n' ok "$1" "$2"; }

warnings=0
# warn WHAT DETAIL: a problem that installing nothing fixes.
warn() {
	warnings=$((warnings + 1))
	printf '  %-8s %-14s %s\n' warning "$1" "$2"
}

# note WHAT DETAIL: for information.
info() { printf '  %-8s %-14s %s\n' info "$1" "$2"; }

# miss TOOL DETAIL APT BREW [NOTE]: APT and BREW are package names ("" when
# that platform has none: NOTE, which names its platform, says what to do
# instead).
miss() {
	local tool=$1 detail=$2 apt=$3 brew=$4 note=${5:-} how="" p
	missing=$((missing + 1))
	if [ -n "$apt" ]; then
		how="Debian/Ubuntu: ${sudo}apt-get install $apt"
		for p in $apt; do apt_all=$(add_word "$apt_all" "$p"); done
	fi
	if [ -n "$brew" ]; then
		how="${how:+$how; }macOS: brew install $brew"
		for p in $brew; do brew_all=$(add_word "$brew_all" "$p"); done
	fi
	if [ -n "$note" ]; then
		how="${how:+$how; }$note"
		case $'\n'"$notes" in
		*$'\n'"$note"$'\n'*) ;;
		*) notes="$notes$note"$'\n' ;;
		esac
	fi
	printf '  %-8s %-14s %s\n' missing "$tool" "$detail: $how"
}

# first_line CMD...: the first line of what CMD prints (stdout and stderr),
# cut after the word that reaches 40 characters (curl and redis-server list
# their build options there). Not `| head -n 1`: with pipefail a chatty
# --version would fail on SIGPIPE.
first_line() {
	local v out="" w
	v=$("$@" 2>&1) || true
	for w in ${v%%$'\n'*}; do
		out="${out:+$out }$w"
		[ "${#out}" -lt 40 ] || break
	done
	printf '%s' "$out"
}

# version_ge A B: A >= B, comparing up to three dot-separated numbers.
version_ge() {
	local a b i x y
	IFS=. read -r -a a <<<"${1%%[!0-9.]*}"
	IFS=. read -r -a b <<<"${2%%[!0-9.]*}"
	for i in 0 1 2; do
		x=${a[i]:-0}
		y=${b[i]:-0}
		if [ "$((10#$x))" -gt "$((10#$y))" ]; then return 0; fi
		if [ "$((10#$x))" -lt "$((10#$y))" ]; then return 1; fi
	done
	return 0
}

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# check_tool TOOL APT BREW [NOTE]: present with its --version's first line.
check_tool() {
	if command -v "$1" >/dev/null 2>&1; then
		ok "$1" "$(first_line "$1" --version)"
	else
		miss "$1" "not found" "$2" "$3" "${4:-}"
	fi
}

check_go() {
	local want="" key val _ have
	while read -r key val _; do
		if [ "$key" = go ]; then want=$val; fi
	done <"$ROOT/go.mod"
	local get="Debian/Ubuntu: Go $want or newer from https://go.dev/dl/ (apt's golang-go is older on most releases)"
	if ! command -v go >/dev/null 2>&1; then
		miss go "not found (go.mod wants $want or newer)" "" go "$get"
		return
	fi
	# From / with GOTOOLCHAIN=local: neither go.mod nor a toolchain download
	# changes what this go reports.
	have=$(cd / && GOTOOLCHAIN=local go version 2>&1) || true
	have=${have#go version go}
	have=${have%% *}
	if version_ge "$have" "$want"; then
		ok go "$have (go.mod: $want or newer)"
	else
		miss go "$have is older than go.mod's $want" "" go "$get"
	fi
}

check_make() {
	local v
	if ! command -v make >/dev/null 2>&1; then
		miss make "not found" make "" "macOS: xcode-select --install"
		return
	fi
	v=$(first_line make --version)
	case $v in
	"GNU Make "*)
		# .SHELLFLAGS, which the Makefile sets, came with GNU make 3.82.
		if version_ge "${v#GNU Make }" 3.82; then
			ok make "$v"
			return
		fi
		;;
	esac
	miss make "$v (GNU make 3.82 or newer needed)" make make "macOS: then run gmake instead of make"
}

pg_bindir=""
pg_looked=0
find_pg() {
	if [ "$pg_looked" = 0 ]; then
		pg_looked=1
		pg_bindir=$("$ROOT/sidecar/scripts/devdb.sh" bindir 2>/dev/null) || pg_bindir=""
	fi
	[ -n "$pg_bindir" ]
}

pg_version() {
	local v
	v=$(first_line "$pg_bindir/pg_ctl" --version)
	printf 'PostgreSQL %s' "${v#pg_ctl (PostgreSQL) }"
}

check_pg_run() {
	if [ -n "${DATABASE_URL:-}" ]; then
		ok postgresql "not needed: DATABASE_URL is set"
		return
	fi
	if find_pg; then
		ok postgresql "$(pg_version) (initdb, pg_ctl in $pg_bindir)"
	else
		miss postgresql "initdb, pg_ctl not found (or set DATABASE_URL)" postgresql postgresql@16
		return
	fi
	if [ -x "$pg_bindir/psql" ] || command -v psql >/dev/null 2>&1; then
		ok psql "$(first_line "$(command -v psql || echo "$pg_bindir/psql")" --version)"
	else
		miss psql "not found (devdb.sh createdb uses it)" postgresql-client postgresql@16
	fi
}

check_pg_test() {
	local why="" tools="initdb pg_ctl" t absent=""
	[ -n "${TEST_DATABASE_URL:-}" ] || why="the project-local cluster"
	if [ "${IC_PG_CLUSTER:-}" != 0 ]; then
		why="${why:+$why, }the failover tests"
		tools="$tools pg_basebackup postgres"
	fi
	if [ -z "$why" ]; then
		ok postgresql "not needed: TEST_DATABASE_URL is set and IC_PG_CLUSTER=0"
		return
	fi
	if ! find_pg; then
		miss postgresql "server programs not found ($why)" postgresql postgresql@16
		return
	fi
	for t in $tools; do
		[ -x "$pg_bindir/$t" ] || absent="${absent:+$absent }$t"
	done
	if [ -n "$absent" ]; then
		miss postgresql "$absent missing in $pg_bindir ($why)" postgresql postgresql@16
	else
		ok postgresql "$(pg_version) ($why)"
	fi
}

check_redis() {
	if command -v redis-server >/dev/null 2>&1; then
		ok redis-server "$(first_line redis-server --version)"
	elif [ -n "${IC_REDIS_ADDR:-}" ]; then
		ok redis-server "not needed: IC_REDIS_ADDR=$IC_REDIS_ADDR"
	elif answers 127.0.0.1 6379; then
		ok redis-server "not needed: something answers on 127.0.0.1:6379"
	else
		miss redis-server "not found, and nothing answers on 127.0.0.1:6379 (or set IC_REDIS_ADDR)" redis-server redis
	fi
}

check_build_tools() {
	if [ "${IC_E2E:-}" = 0 ]; then
		ok "cc, c++" "not needed: IC_E2E=0 (no n8n install)"
		return
	fi
	check_tool cc build-essential "" "macOS: xcode-select --install"
	check_tool c++ build-essential "" "macOS: xcode-select --install"
}

check_platform() {
	[ "${IC_E2E:-}" != 0 ] || return 0
	case "$(uname -s)-$(uname -m)" in
	Linux-x86_64 | Linux-aarch64 | Linux-arm64) ;;
	*)
		miss n8n "install-n8n.sh installs it on Linux x86_64 and arm64 only" "" "" \
			"$(uname -s)-$(uname -m): run make test with IC_E2E=0"
		;;
	esac
}

check_chromium() {
	local c=${CHROMIUM_PATH:-/usr/bin/chromium}
	if [ "${IC_E2E:-}" = 0 ] || [ "${IC_BROWSER:-}" = 0 ]; then
		ok chromium "not needed: IC_E2E=0 or IC_BROWSER=0 (no browser tests)"
	elif [ -x "$c" ]; then
		ok chromium "$(first_line "$c" --version) ($c)"
	else
		miss chromium "$c not found (the browser tests; or set CHROMIUM_PATH, or IC_BROWSER=0)" chromium "" \
			"macOS: install Chromium and set CHROMIUM_PATH to its binary"
	fi
}

# holder PORT: "pid N: COMMAND" of the process listening on PORT, when ss
# can tell (it sees this user's processes only, unless run as root).
holder() {
	local out pid args
	command -v ss >/dev/null 2>&1 || return 1
	out=$(ss -Hltnp "sport = :$1" 2>/dev/null) || return 1
	case $out in *pid=*) ;; *) return 1 ;; esac
	pid=${out#*pid=}
	pid=${pid%%[!0-9]*}
	args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || args=$(ps -o args= -p "$pid" 2>/dev/null) || args=""
	args=${args% }
	printf 'pid %s: %s' "$pid" "${args:-?}"
}

# check_port WHO PORT HINT: warns when something listens on 127.0.0.1:PORT.
check_port() {
	local by
	if answers 127.0.0.1 "$2"; then
		by=$(holder "$2") || by="a program ss cannot name"
		warn "port $2" "taken ($by): $1 cannot listen there; $3"
	else
		ok "port $2" "free ($1)"
	fi
}

check_ports() {
	local addr=${CLAIMD_ADDR:-127.0.0.1:8080} n8n=${TRY_N8N_PORT:-5688} claimd=${TRY_CLAIMD_PORT:-8088} own=""
	[ -s "$ROOT/.run/claimd.pid" ] && own=$(cat "$ROOT/.run/claimd.pid")
	if [ -n "$own" ] && holder "${addr##*:}" 2>/dev/null | grep -q "^pid $own:"; then
		ok "port ${addr##*:}" "make run's claimd runs there (pid $own)"
	else
		check_port "make run's claimd" "${addr##*:}" "stop it, or set CLAIMD_ADDR=127.0.0.1:PORT"
	fi
	check_port "make try's claimd" "$claimd" "stop it, or set TRY_CLAIMD_PORT"
	check_port "make try's n8n" "$n8n" "stop it, or set TRY_N8N_PORT"
	check_port "make try's n8n task broker" "$((n8n + 1))" "stop it, or set TRY_N8N_PORT"
	# Debian's prometheus package (promtool's) starts a Prometheus server.
	local by=""
	answers 127.0.0.1 9090 && by=$(holder 9090) || by=""
	case $by in
	*prometheus*)
		info "port 9090" "a Prometheus server listens ($by): Debian's prometheus package starts one; only promtool is needed (${sudo}systemctl disable --now prometheus)"
		;;
	esac
}

check_n8n_cache() {
	local cache=${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}
	[ "${IC_E2E:-}" != 0 ] || return 0
	if [ -f "$cache/n8n-2.41.1/.install-complete" ]; then
		ok n8n "2.41.1 with Node 24, installed in $cache"
	else
		info n8n "not installed yet in $cache: make test and make try install it (make n8n: several minutes, ~3 GB)"
	fi
}

echo "make run needs:"
check_go
check_make
check_pg_run
check_tool curl curl curl
check_tool python3 python3 python

echo "make test needs all of that, and:"
if command -v node >/dev/null 2>&1; then
	ok node "$(first_line node --version) (any version: make test, make test-short and make try fetch the pinned Node 24 into the cache)"
else
	miss node "not found" nodejs node
fi
check_tool npm npm node
check_build_tools
check_redis
check_tool flock util-linux flock
check_tool git git git
# Debian's prometheus package holds promtool, and starts a Prometheus
# server on :9090 (check_ports says so when it runs).
check_tool promtool prometheus prometheus \
	"Debian/Ubuntu: the prometheus package also starts a Prometheus server on :9090; only promtool is needed: ${sudo}systemctl disable --now prometheus"
check_pg_test
check_chromium
check_platform
check_n8n_cache

echo "make try needs make run's and make test's node, npm, cc and c++, and:"
check_tool setsid util-linux "" "macOS: make try runs on Linux only (the n8n install is Linux's)"

echo "make lint needs:"
if command -v shellcheck >/dev/null 2>&1; then
	ok shellcheck "$(shellcheck --version 2>/dev/null | sed -n 's/^version: */ShellCheck /p')"
else
	# Not counted as missing: make lint runs without it (and CI has none).
	warn shellcheck "not found: make lint skips its shell checks (Debian/Ubuntu: ${sudo}apt-get install shellcheck; macOS: brew install shellcheck)"
fi

echo "ports:"
check_ports

if [ "$missing" = 0 ]; then
	if [ "$warnings" = 0 ]; then
		echo "everything is installed"
	else
		echo "everything is installed; $warnings warning(s) above"
	fi
	exit 0
fi
echo
echo "$missing missing. To install:"
# notes_for PLATFORM: the notes naming PLATFORM, aligned under the commands.
notes_for() {
	printf '%s' "$notes" | while IFS= read -r n; do
		case $n in
		"$1: "*) printf '  %-15s %s\n' "$1:" "${n#"$1: "}" ;;
		esac
	done
}
[ -z "$apt_all" ] || printf '  %-15s %s\n' "Debian/Ubuntu:" "${sudo}apt-get install $apt_all"
notes_for Debian/Ubuntu
[ -z "$brew_all" ] || printf '  %-15s %s\n' "macOS:" "brew install $brew_all"
notes_for macOS
notes_for "$(uname -s)-$(uname -m)"
exit 1
