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
#               python3 (the README's quick-start commands), and unless
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
#               IC_PG_CLUSTER=0
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

echo "make run needs:"
check_go
check_make
check_pg_run
check_tool curl curl curl
check_tool python3 python3 python

echo "make test needs all of that, and:"
check_tool node nodejs node
check_tool npm npm node
check_build_tools
check_redis
check_tool flock util-linux flock
check_tool git git git
check_tool promtool prometheus prometheus
check_pg_test
check_platform

if [ "$missing" = 0 ]; then
	echo "everything is installed"
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
