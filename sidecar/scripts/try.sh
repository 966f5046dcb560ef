#!/usr/bin/env bash
# `make try`: the node in a running n8n, on this machine, in one command.
#
# Builds bin/claimd and the node package (n8n-node/dist), installs the pinned
# Node 24 and n8n into IC_CACHE_DIR when missing (n8n-node/scripts/
# install-n8n.sh, as make n8n: first time several minutes), starts the
# project-local PostgreSQL (sidecar/scripts/devdb.sh, database claimd_try),
# claimd (tenant "try") and n8n with the node installed, imports the example
# workflows (n8n-node/examples) with a credential for this claimd, publishes
# the inline one, creates n8n's owner account, and prints the editor's URL,
# the login and a delivery to paste. Ctrl-C (or SIGTERM) stops n8n and
# claimd, by the PIDs it started, removes their PID files and exits 0 (130
# or 143 when it comes before the summary); the database
# keeps running (make db-stop) and everything else stays for the next
# make try, which reuses it (an import runs again only when the example
# files changed). Start over: rm -rf .run/try.
#
# State (git-ignored), in TRY_DIR (default .run/try): n8n's user folder and
# SQLite database (n8n/), the login (login, mode 0600), claimd's API key
# (claimd-key), n8n's encryption key, the generated import files (import/),
# the logs (n8n.log, claimd.log) and the PID files (try.pid, n8n.pid,
# claimd.pid).
#
# Env:
#   TRY_N8N_PORT     n8n's port (default 5688; its task broker takes the next
#                    one). Not 5678: an n8n of your own may run there.
#   TRY_CLAIMD_PORT  claimd's port (default 8088; make run's is 8080, and
#                    9090 is Prometheus's)
#   TRY_DIR          the state folder (default .run/try in the checkout)
#   TRY_CLAIMD_DATABASE_URL  claimd's database (default: the project-local
#                    cluster's claimd_try, created when missing)
#   TRY_NO_BUILD=1   build and install nothing: use TRY_CLAIMD_BIN (default
#                    bin/claimd), n8n-node/dist and the cached n8n as they are
#   TRY_ONESHOT=1    once everything answers, send the sample delivery twice
#                    through n8n, check the answers (done, then duplicate),
#                    stop and exit 0 (1 when an answer is wrong): for tests
#   IC_CACHE_DIR, IC_PROGRESS_SECONDS (seconds between progress lines,
#                    default 15)
#
# Linux only (the n8n install is). Every progress line goes to stderr; the
# summary (URL, login, sample delivery) to stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# shellcheck disable=SC1091 # sidecar/scripts/progress.sh, from the checkout root
. sidecar/scripts/progress.sh

say() { printf 'try: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

export IC_PROGRESS_SECONDS=${IC_PROGRESS_SECONDS:-15}
# No "new version of npm available" notices between the progress lines.
export npm_config_update_notifier=false
N8N_PORT=${TRY_N8N_PORT:-5688}
CLAIMD_PORT=${TRY_CLAIMD_PORT:-8088}
DIR=${TRY_DIR:-$ROOT/.run/try}
ONESHOT=${TRY_ONESHOT:-0}
NO_BUILD=${TRY_NO_BUILD:-0}
CLAIMD_BIN=${TRY_CLAIMD_BIN:-$ROOT/bin/claimd}
for p in "$N8N_PORT" "$CLAIMD_PORT"; do
	if ! [[ $p =~ ^[1-9][0-9]*$ ]] || [ "$p" -ge 65535 ]; then
		die "TRY_N8N_PORT and TRY_CLAIMD_PORT must be port numbers (got '$p')"
	fi
done
BROKER_PORT=$((N8N_PORT + 1))
N8N_URL="http://127.0.0.1:$N8N_PORT"
CLAIMD_URL="http://127.0.0.1:$CLAIMD_PORT"

# What the examples are imported with (see n8n-node/examples/README.md).
PKG=n8n-nodes-idempotent-claim
INLINE_ID=icInlineClaim001
INLINE_PATH=idempotent-claim-inline
STANDIN_ID=icTryProtected01
STANDIN_PATH=try-protected-api
CLAIM_CRED_ID=icTryClaimApi001
OWNER_EMAIL=owner@try.invalid
TENANT=try

command -v curl >/dev/null || die "curl is not installed (make doctor lists what to install)"
case "$(uname -s)" in
Linux) ;;
*) die "make try runs n8n from the cache that n8n-node/scripts/install-n8n.sh fills: Linux only" ;;
esac

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# --- one make try at a time; what an earlier one left ----------------------

# cmdline_of PID: the process's arguments joined by spaces; fails when there
# is no such process (or only a zombie).
cmdline_of() {
	local a
	a=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
	[ -n "$a" ] && printf '%s' "${a% }"
}

# ours PIDFILE PATTERN: the PID in PIDFILE when it runs and its command line
# matches PATTERN (a bash glob), else fails.
ours() {
	local pid args
	pid=$(cat "$1" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	args=$(cmdline_of "$pid") || return 1
	# shellcheck disable=SC2053 # PATTERN is a glob on purpose
	[[ $args == $2 ]] || return 1
	printf '%s' "$pid"
}

if pid=$(ours "$DIR/try.pid" "*bash*try.sh*") && [ "$pid" != $$ ]; then
	die "make try is already running (pid $pid); stop it with Ctrl-C in its terminal, or: kill -TERM $pid"
fi
for what in n8n claimd; do
	if [ "$what" = n8n ]; then pat="*n8n* start*"; else pat="*claimd serve*"; fi
	if pid=$(ours "$DIR/$what.pid" "$pat"); then
		die "the $what of an earlier make try still runs (pid $pid: $(cmdline_of "$pid")); stop it: kill -TERM $pid"
	fi
	if [ -e "$DIR/$what.pid" ]; then
		say "removing the stale $DIR/$what.pid (its process is gone)"
		rm -f "$DIR/$what.pid"
	fi
done

answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# holder PORT: "pid N: COMMAND" of what listens on PORT, when ss can tell.
holder() {
	local out pid
	command -v ss >/dev/null || return 1
	out=$(ss -Hltnp "sport = :$1" 2>/dev/null) || return 1
	[[ $out =~ pid=([0-9]+) ]] || return 1
	pid=${BASH_REMATCH[1]}
	printf 'pid %s: %s' "$pid" "$(cmdline_of "$pid" || echo '?')"
}

for spec in "n8n:$N8N_PORT:TRY_N8N_PORT" "n8n's task broker:$BROKER_PORT:TRY_N8N_PORT" "claimd:$CLAIMD_PORT:TRY_CLAIMD_PORT"; do
	IFS=: read -r what port var <<<"$spec"
	if answers 127.0.0.1 "$port"; then
		by=$(holder "$port") || by=""
		die "port $port (for $what) is taken${by:+ by $by}: stop that, or choose another port, e.g. $var=$((port + 10)) make try"
	fi
done

echo $$ >"$DIR/try.pid"

# --- stopping: by the PIDs started here -------------------------------------

n8n_pid=""
claimd_pid=""

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

# shellcheck disable=SC2317 # called from the EXIT trap
# stop_proc NAME PID: SIGTERM, up to 30 s to exit, then SIGKILL to its
# process group (it leads one: started with setsid); reaps it.
stop_proc() {
	local name=$1 pid=$2 i
	[ -n "$pid" ] || return 0
	if alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 300; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			say "$name (pid $pid) did not stop within 30 s of SIGTERM; killing it"
		fi
	fi
	# Whatever it started (n8n's task runner) goes with it.
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

stopping=0
# shellcheck disable=SC2317 # called from the traps
cleanup() {
	local rc=$?
	[ "$stopping" = 0 ] || return 0
	stopping=1
	trap '' INT TERM HUP
	progress_stop
	if [ -n "$n8n_pid$claimd_pid" ]; then
		say "stopping n8n and claimd…"
		stop_proc n8n "$n8n_pid"
		rm -f "$DIR/n8n.pid"
		stop_proc claimd "$claimd_pid"
		rm -f "$DIR/claimd.pid"
		say "stopped. The database keeps running (make db-stop stops it); make try starts it all again."
	fi
	rm -f "$DIR/try.pid"
	exit "$rc"
}
ready=0
trap cleanup EXIT
# Ctrl-C and SIGTERM are how make try is meant to end: once everything it
# started has stopped, it exits 0 (while it is still starting: 130 and 143).
trap 'if [ "$ready" = 1 ]; then exit 0; else exit 130; fi' INT
trap 'if [ "$ready" = 1 ]; then exit 0; else exit 143; fi' TERM
trap 'exit 129' HUP

# --- build and install ---------------------------------------------------------

# node_built: n8n-node/dist is newer than every source of the package.
node_built() {
	local mark=n8n-node/dist/nodes/IdempotentClaim/IdempotentClaim.node.js
	[ -f "$mark" ] || return 1
	[ -z "$(find n8n-node/nodes n8n-node/credentials n8n-node/icons n8n-node/package.json \
		n8n-node/tsconfig.json -newer "$mark" -print -quit 2>/dev/null)" ]
}

if [ "$NO_BUILD" != 1 ]; then
	command -v go >/dev/null || die "Go is not installed (make doctor lists what to install)"
	hint=""
	dir=$(go list -m -f '{{.Dir}}' github.com/jackc/pgx/v5 2>/dev/null) || dir=""
	[ -n "$dir" ] && [ -d "$dir" ] || hint="first build: downloads and compiles the Go modules, 1-4 min"
	progress_step try "building bin/claimd" "$hint" go build -o bin/claimd ./sidecar/cmd/claimd
	CLAIMD_BIN=$ROOT/bin/claimd
	if node_built; then
		say "the node package is built (n8n-node/dist)"
	else
		hint=""
		[ -d n8n-node/node_modules ] || hint="first time: npm ci, then tsc; 1-3 min"
		# Through a pipe: build-node then writes lines, not a spinner.
		# shellcheck disable=SC2016 # $1 is the inner shell's
		progress_step try "building the node package (make build-node)" "$hint" \
			bash -c 'set -o pipefail; "$1" --no-print-directory -s build-node 2>&1 | cat >&2' bash "${MAKE:-make}"
	fi
fi
[ -x "$CLAIMD_BIN" ] || die "no claimd binary at $CLAIMD_BIN (make build-go builds bin/claimd)"
[ -f n8n-node/dist/nodes/IdempotentClaim/IdempotentClaim.node.js ] ||
	die "the node package is not built (make build-node builds n8n-node/dist)"

cache=${IC_CACHE_DIR:-$HOME/.cache/idempotent-claim}
if [ "$NO_BUILD" != 1 ]; then
	if [ ! -f "$cache/n8n-2.41.1/.install-complete" ]; then
		say "installing Node 24 and n8n 2.41.1 into $cache (what make n8n does; first time:"
		say "  several minutes, 4-17 min measured, ~3 GB; every later run reuses it)"
	fi
	install_out=$(n8n-node/scripts/install-n8n.sh) || die "the n8n install failed (see above)"
	NODE_BIN=$(printf '%s\n' "$install_out" | sed -n 's/^IC_NODE_BIN=//p')
	N8N_BIN=$(printf '%s\n' "$install_out" | sed -n 's/^IC_N8N_BIN=//p')
else
	# The paths install-n8n.sh prints, when it has installed them.
	NODE_BIN=""
	for d in "$cache"/node-24.*/node_modules/node-linux-*/bin/node; do
		[ ! -x "$d" ] || NODE_BIN=$d
	done
	N8N_BIN=$cache/n8n-2.41.1/node_modules/n8n/bin/n8n
fi
if [ ! -x "$NODE_BIN" ] || [ ! -f "$N8N_BIN" ] || [ ! -f "$cache/n8n-2.41.1/.install-complete" ]; then
	die "n8n 2.41.1 is not installed in $cache: make n8n installs it"
fi
NODE_DIR=$(dirname "$(dirname "$NODE_BIN")")

# --- database ------------------------------------------------------------------

if [ -n "${TRY_CLAIMD_DATABASE_URL:-}" ]; then
	db_url=$TRY_CLAIMD_DATABASE_URL
else
	sidecar/scripts/devdb.sh start
	sidecar/scripts/devdb.sh createdb claimd_try
	db_url=$(sidecar/scripts/devdb.sh url claimd_try)
fi

# --- secrets, made once ------------------------------------------------------------

# secret FILE BYTES: the hex secret kept in FILE (mode 0600), made when missing.
secret() {
	if [ ! -s "$1" ]; then
		(
			umask 077
			od -An -tx1 -N"$2" /dev/urandom | tr -d ' \n' >"$1.tmp"
		)
		mv "$1.tmp" "$1"
	fi
	cat "$1"
}
claimd_key=$(secret "$DIR/claimd-key" 24)
n8n_key=$(secret "$DIR/n8n-encryption-key" 24)
hook_token=$(secret "$DIR/dispatch-token" 16)
operator_token=$(secret "$DIR/operator-token" 16)
reconciler_token=$(secret "$DIR/reconciler-token" 16)
if [ ! -s "$DIR/login" ]; then
	# n8n wants 8+ characters with a digit and an upper-case letter.
	pw="Try-$(od -An -tx1 -N9 /dev/urandom | tr -d ' \n')-9"
	(
		umask 077
		printf 'email=%s\npassword=%s\n' "$OWNER_EMAIL" "$pw" >"$DIR/login.tmp"
	)
	mv "$DIR/login.tmp" "$DIR/login"
fi
login_email=$(sed -n 's/^email=//p' "$DIR/login")
login_password=$(sed -n 's/^password=//p' "$DIR/login")

# --- n8n's environment ---------------------------------------------------------------

USER_FOLDER=$DIR/n8n

# n8n_env: this shell's environment made n8n's: inherited n8n, database and
# claimd settings dropped, then the try settings (as the end-to-end tests
# set them; SQLite in the user folder). For subshells only.
n8n_env() {
	local v
	for v in $(compgen -e); do
		case $v in
		N8N_* | DB_* | EXECUTIONS_* | QUEUE_* | WEBHOOK_URL | OFFLOAD_* | EXTERNAL_HOOK_FILES | CLAIMD_* | DATABASE_URL) unset "$v" ;;
		esac
	done
	export PATH="$NODE_DIR/bin:$PATH" \
		N8N_USER_FOLDER="$USER_FOLDER" \
		N8N_ENCRYPTION_KEY="$n8n_key" \
		N8N_LISTEN_ADDRESS=127.0.0.1 \
		N8N_HOST=127.0.0.1 \
		N8N_PROTOCOL=http \
		N8N_PORT="$N8N_PORT" \
		N8N_RUNNERS_BROKER_PORT="$BROKER_PORT" \
		N8N_EDITOR_BASE_URL="$N8N_URL/" \
		N8N_WEBHOOK_URL="$N8N_URL/" \
		N8N_DIAGNOSTICS_ENABLED=false \
		N8N_VERSION_NOTIFICATIONS_ENABLED=false \
		N8N_PERSONALIZATION_ENABLED=false \
		N8N_TEMPLATES_ENABLED=false \
		N8N_SECURE_COOKIE=false \
		N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false \
		N8N_LOG_OUTPUT=console \
		NODE_ENV=production
}

# n8n_cli WHAT ARGS...: one n8n CLI command (n8n not running), its output
# in n8n.log; shows the log's end when it fails.
n8n_cli() {
	local what=$1 rc=0
	shift
	# shellcheck disable=SC2016 # $1 and $@ are the inner shell's
	progress_step try "$what" "" \
		bash -c 'log=$1; shift; "$@" >>"$log" 2>&1' bash "$DIR/n8n.log" \
		env -u NODE_OPTIONS "$@" || rc=$?
	if [ "$rc" != 0 ]; then
		tail -n 30 "$DIR/n8n.log" >&2
		die "$what failed (log: $DIR/n8n.log)"
	fi
}

# --- the node package, as a community-node install lays it out ------------------------

dest=$USER_FOLDER/.n8n/nodes/node_modules/$PKG
rm -rf "$dest"
mkdir -p "$dest"
cp n8n-node/package.json "$dest/"
cp -R n8n-node/dist "$dest/dist"

# --- import files --------------------------------------------------------------------

imp=$DIR/import
rm -rf "$imp"
mkdir -p "$imp/workflows" "$imp/credentials"
chmod 0700 "$imp/credentials"

standin_url="$N8N_URL/webhook/$STANDIN_PATH"
for f in n8n-node/examples/*.json; do
	case ${f##*/} in
	remove-duplicates-baseline.json) continue ;; # make compare's, not a pattern
	esac
	sed -e "s#__CREDENTIAL_ID__#$CLAIM_CRED_ID#g" \
		-e "s#__EFFECT_URL__#$standin_url#g" \
		-e "s#__HOOK_CREDENTIAL_ID__#icTryDispatch001#g" \
		-e "s#__OPERATOR_CREDENTIAL_ID__#icTryOperator001#g" \
		-e "s#__RECONCILER_CREDENTIAL_ID__#icTryReconcile01#g" \
		"$f" >"$imp/workflows/${f##*/}"
done

# The stand-in for "your API" that Call Protected API posts to: it answers
# {"effect_id": "eff_<its execution id>"}, so each effect is one execution of
# "Try: protected API (stand-in)" in the editor.
cat >"$imp/workflows/try-protected-api.json" <<EOF
{
  "id": "$STANDIN_ID",
  "name": "Try: protected API (stand-in)",
  "active": false,
  "settings": { "executionOrder": "v1" },
  "nodes": [
    {
      "id": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e01",
      "name": "About",
      "type": "n8n-nodes-base.stickyNote",
      "typeVersion": 1,
      "position": [-40, -260],
      "parameters": {
        "content": "## Stand-in for your API (make try)\\nThe inline example's **Call Protected API** posts here. One execution of this workflow is one effect: send the same delivery twice and this runs once.",
        "height": 200,
        "width": 460
      }
    },
    {
      "id": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e02",
      "name": "Effect",
      "type": "n8n-nodes-base.webhook",
      "typeVersion": 2,
      "position": [0, 0],
      "parameters": { "httpMethod": "POST", "path": "$STANDIN_PATH", "responseMode": "responseNode", "options": {} },
      "webhookId": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e03"
    },
    {
      "id": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e04",
      "name": "Answer Effect",
      "type": "n8n-nodes-base.respondToWebhook",
      "typeVersion": 1.1,
      "position": [240, 0],
      "parameters": {
        "respondWith": "json",
        "responseBody": "={ \\"effect_id\\": \\"eff_{{ \$execution.id }}\\" }",
        "options": {}
      }
    },
    {
      "id": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e05",
      "name": "Health Check",
      "type": "n8n-nodes-base.webhook",
      "typeVersion": 2,
      "position": [0, 200],
      "parameters": {
        "httpMethod": "GET",
        "path": "$STANDIN_PATH-health",
        "responseMode": "onReceived",
        "options": { "responseData": "ok: $STANDIN_PATH-health" }
      },
      "webhookId": "0c0b7f5e-7a51-4c56-9b0e-3d1f0d6a7e06"
    }
  ],
  "connections": {
    "Effect": { "main": [[{ "node": "Answer Effect", "type": "main", "index": 0 }]] }
  },
  "pinData": {}
}
EOF

# Plain-object data: n8n encrypts it with the instance's key on import.
cat >"$imp/credentials/try.json" <<EOF
[
  {
    "id": "$CLAIM_CRED_ID",
    "name": "Idempotent Claim API",
    "type": "idempotentClaimApi",
    "data": { "baseUrl": "$CLAIMD_URL", "apiKey": "$claimd_key" }
  },
  {
    "id": "icTryDispatch001",
    "name": "Sidecar dispatch token (try)",
    "type": "httpHeaderAuth",
    "data": { "name": "Authorization", "value": "Bearer $hook_token" }
  },
  {
    "id": "icTryOperator001",
    "name": "Reconciliation operator token (try)",
    "type": "httpHeaderAuth",
    "data": { "name": "X-Operator-Token", "value": "$operator_token" }
  },
  {
    "id": "icTryReconcile01",
    "name": "Reconciler token (try)",
    "type": "httpHeaderAuth",
    "data": { "name": "Authorization", "value": "Bearer $reconciler_token" }
  }
]
EOF

# stamp DIR: a checksum of DIR's files and of what they are imported into.
stamp() {
	(
		cd "$1"
		printf '%s\n' "n8n-2.41.1 $USER_FOLDER"
		cat -- *.json
	) | cksum
}

# Imports only what changed since the last make try: a second one keeps
# what you did in the editor (re-importing a workflow overwrites it).
if [ "$(stamp "$imp/credentials")" != "$(cat "$DIR/credentials.imported" 2>/dev/null || true)" ]; then
	(
		n8n_env
		n8n_cli "importing the credentials (n8n import:credentials)" \
			"$NODE_BIN" "$N8N_BIN" import:credentials --input="$imp/credentials/try.json"
	)
	stamp "$imp/credentials" >"$DIR/credentials.imported"
fi
rm -rf "$imp/credentials"
if [ "$(stamp "$imp/workflows")" != "$(cat "$DIR/workflows.imported" 2>/dev/null || true)" ]; then
	(
		n8n_env
		n8n_cli "importing the example workflows (n8n import:workflow)" \
			"$NODE_BIN" "$N8N_BIN" import:workflow --separate --input="$imp/workflows"
		for id in "$STANDIN_ID" "$INLINE_ID"; do
			n8n_cli "publishing workflow $id (n8n publish:workflow)" \
				"$NODE_BIN" "$N8N_BIN" publish:workflow --id="$id"
		done
	)
	stamp "$imp/workflows" >"$DIR/workflows.imported"
else
	say "the example workflows are imported (unchanged since the last make try)"
fi

# --- start ---------------------------------------------------------------------

# wait_url WHAT URL BODY DEADLINE PID: polls URL until it answers 200 with
# BODY in it; fails when PID exits or after DEADLINE seconds. A line every
# IC_PROGRESS_SECONDS says it still waits.
wait_url() {
	local what=$1 url=$2 body=$3 deadline=$4 pid=$5 log=$6 start next got
	start=$(date +%s)
	next=$((start + IC_PROGRESS_SECONDS))
	while :; do
		if ! alive "$pid"; then
			tail -n 40 "$log" >&2
			die "$what exited while starting (log: $log)"
		fi
		if got=$(curl -fsS -m 5 "$url" 2>/dev/null) && [[ $got == *"$body"* ]]; then
			return 0
		fi
		if [ "$(date +%s)" -ge $((start + deadline)) ]; then
			tail -n 40 "$log" >&2
			die "$what did not answer $url within $deadline s (log: $log)"
		fi
		if [ "$(date +%s)" -ge "$next" ]; then
			say "  still starting $what ($(progress_took $(($(date +%s) - start))))…"
			next=$((next + IC_PROGRESS_SECONDS))
		fi
		sleep 0.5
	done
}

say "starting claimd on $CLAIMD_URL (log: $DIR/claimd.log)"
(
	for v in $(compgen -e); do
		case $v in CLAIMD_* | DATABASE_URL) unset "$v" ;; esac
	done
	export DATABASE_URL="$db_url" CLAIMD_ADDR="127.0.0.1:$CLAIMD_PORT" CLAIMD_API_KEYS="$TENANT:$claimd_key"
	exec setsid "$CLAIMD_BIN" serve
) >>"$DIR/claimd.log" 2>&1 </dev/null &
claimd_pid=$!
echo "$claimd_pid" >"$DIR/claimd.pid"
wait_url claimd "$CLAIMD_URL/readyz" "" 120 "$claimd_pid" "$DIR/claimd.log"

began=$(date +%s)
say "starting n8n on $N8N_URL (log: $DIR/n8n.log; ~15 s, a first start ~30 s, more on a busy machine)"
(
	n8n_env
	exec setsid env -u NODE_OPTIONS "$NODE_BIN" "$N8N_BIN" start
) >>"$DIR/n8n.log" 2>&1 </dev/null &
n8n_pid=$!
echo "$n8n_pid" >"$DIR/n8n.pid"
# Readiness answers before the production webhooks are registered: wait for
# the workflows' own GET webhooks.
wait_url n8n "$N8N_URL/webhook/$INLINE_PATH-health" "ok: $INLINE_PATH-health" 300 "$n8n_pid" "$DIR/n8n.log"
wait_url n8n "$N8N_URL/webhook/$STANDIN_PATH-health" "ok: $STANDIN_PATH-health" 60 "$n8n_pid" "$DIR/n8n.log"
say "n8n is serving the workflows ($(progress_took $(($(date +%s) - began))) after start)"

# The owner account, on a fresh n8n: what the editor asks for at first.
if curl -fsS -m 30 "$N8N_URL/rest/settings" | grep -q '"showSetupOnFirstLoad":true'; then
	body=$(printf '{"email":"%s","firstName":"Try","lastName":"Owner","password":"%s"}' "$login_email" "$login_password")
	out=$(curl -sS -m 60 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$body" "$N8N_URL/rest/owner/setup") || out="no answer"
	[ "$out" = 200 ] || die "setting up n8n's owner account failed (HTTP $out; log: $DIR/n8n.log)"
	say "created n8n's owner account ($login_email; password in $DIR/login)"
fi

# --- the summary ---------------------------------------------------------------------

event_id="ord_$(date +%H%M%S)"
sample="curl -sS -X POST $N8N_URL/webhook/$INLINE_PATH -H 'Content-Type: application/json' -d '{\"id\":\"$event_id\",\"amount\":4200}'"
rel_dir=${DIR#"$ROOT"/}
cat <<EOF

  n8n editor   $N8N_URL/   (n8n 2.41.1 with the Idempotent Claim node)
  login        $login_email / $login_password   (kept in $rel_dir/login)
  claimd       $CLAIMD_URL   (tenant "$TENANT", API key in $rel_dir/claimd-key)

  Send the same delivery twice (paste it two times):

    $sample

  The first answers {"status":"done","result_ref":"eff_…"}: the claim was won and
  the protected API ran once. The second answers {"status":"duplicate", …} with the
  same result_ref: the claim was already done, and the API did not run again.

  See it in the editor: open "Idempotent Claim: inline webhook", tab Executions
  ($N8N_URL/workflow/$INLINE_ID/executions): the first run went through Call
  Protected API, the second left by the Duplicate output. "Try: protected API
  (stand-in)" ran once for your deliveries. (Each of the two workflows also
  lists one earlier run: make try's own readiness check, on its -health
  webhook.) The other examples are imported, not published.

  Logs: $rel_dir/n8n.log, $rel_dir/claimd.log. Ctrl-C stops n8n and claimd
  (from another shell: kill -TERM $$).
EOF

if [ "$ONESHOT" != 1 ]; then
	echo
	ready=1
	# Until Ctrl-C, or until one of them exits on its own. (wait -n: any
	# child; a trapped signal ends it at once.)
	while alive "$n8n_pid" && alive "$claimd_pid"; do
		wait -n 2>/dev/null || true
	done
	for p in n8n:"$n8n_pid" claimd:"$claimd_pid"; do
		alive "${p#*:}" || say "${p%%:*} exited on its own; see $DIR/${p%%:*}.log"
	done
	exit 1
fi

# TRY_ONESHOT: the sample, twice, through n8n.
deliver() {
	curl -sS -m 120 -w '\n%{http_code}' -X POST "$N8N_URL/webhook/$INLINE_PATH" \
		-H 'Content-Type: application/json' -d "{\"id\":\"$event_id\",\"amount\":4200}"
}
ok=1
for want in "done" duplicate; do
	got=$(deliver) || got="no answer"
	code=${got##*$'\n'}
	body=${got%$'\n'*}
	echo "delivery of $event_id: HTTP $code $body"
	if [ "$code" != 200 ] || [[ $body != *"\"status\":\"$want\""* ]]; then
		say "expected HTTP 200 with \"status\":\"$want\""
		ok=0
	fi
done
[ "$ok" = 1 ] || exit 1
say "oneshot: done, then duplicate, as expected"
exit 0
