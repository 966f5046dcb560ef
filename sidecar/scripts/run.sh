#!/usr/bin/env bash
# `make run`: builds bin/claimd and starts the sidecar in the foreground.
#
# Database: DATABASE_URL when set; otherwise the project-local cluster of
# sidecar/scripts/devdb.sh (started, and its database `claimd` created, as
# needed). API keys: CLAIMD_API_KEYS when set; otherwise one demo key for
# tenant `demo`, generated once and kept in .run/demo-key (git-ignored).
# Listen address: CLAIMD_ADDR (default 127.0.0.1:8080). Every other CLAIMD_*
# variable is passed through to the binary; extra arguments go to
# `claimd serve`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }

command -v go >/dev/null || {
	say "run: Go is not installed (https://go.dev/dl/, or brew install go; go.mod names the"
	say "     minimum version). make doctor lists every prerequisite and how to install it."
	exit 1
}
say "run: building bin/claimd"
go build -o bin/claimd ./sidecar/cmd/claimd

if [ -z "${DATABASE_URL:-}" ]; then
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

addr=${CLAIMD_ADDR:-127.0.0.1:8080}
export CLAIMD_ADDR=$addr
host=${addr%:*}
port=${addr##*:}
case "$host" in
"" | 0.0.0.0 | "[::]" | "::") host=127.0.0.1 ;;
esac

cat >&2 <<EOF

  database    $db_shown
  listening   http://$addr
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

# exec keeps this PID for claimd: record it for signals.
mkdir -p .run
echo $$ >.run/claimd.pid
exec bin/claimd serve "$@"
