#!/usr/bin/env bash
# `make compose-env`: writes the secrets docker-compose.yml requires to .env
# next to it (git-ignored, mode 600), so that `docker compose up` starts
# without setup and without any public default.
#
# The list is read from docker-compose.yml itself: every ${NAME:?…} there.
# Each one missing from .env gets a fresh random value (hex, URL-safe, 32
# bytes; CLAIMD_API_KEYS is `demo:` plus one, STRIPE_WEBHOOK_SECRET starts
# with whsec_; IC_HOOK_API_KEY, the settle hook's key, is a bare one:
# docker-compose.yml adds it to claimd's keys as tenant demo). A value already in .env is never changed, so running this
# again after an update only adds the new secrets. A name set in this
# environment is not written (docker compose reads the environment first).
# A name present in .env with an empty value stops the script (exit 1):
# docker compose would refuse it, and overwriting it is not this script's
# call.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

say() { printf '%s\n' "$*" >&2; }

[ -f docker-compose.yml ] || {
	say "compose-env: no docker-compose.yml in $ROOT"
	exit 1
}
names=()
# The pattern is literal: ${NAME:? in the compose file, not an expansion.
# shellcheck disable=SC2016
while IFS= read -r n; do names+=("$n"); done < <(grep -o '\${[A-Z][A-Z0-9_]*:?' docker-compose.yml | sed 's/^\${//; s/:?$//' | sort -u)
[ ${#names[@]} -gt 0 ] || {
	say "compose-env: docker-compose.yml requires no secret (no \${NAME:?…}); nothing to write"
	exit 1
}

random_hex() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }

value_for() {
	case "$1" in
	CLAIMD_API_KEYS) printf 'demo:%s' "$(random_hex)" ;;
	STRIPE_WEBHOOK_SECRET) printf 'whsec_%s' "$(random_hex)" ;;
	*) random_hex ;;
	esac
}

# in_env_file NAME: prints the value of NAME in .env (NAME=… or export
# NAME=…, the last one wins as in docker compose); fails when absent.
in_env_file() {
	[ -f .env ] || return 1
	local line
	line=$(grep -E "^[[:space:]]*(export[[:space:]]+)?$1=" .env | tail -n 1) || return 1
	line=${line#*=}
	line=${line%\"}
	line=${line#\"}
	line=${line%\'}
	line=${line#\'}
	printf '%s' "$line"
}

# Check first, write after: a refusal leaves .env as it was.
missing=()
for name in "${names[@]}"; do
	if [ -n "${!name:-}" ]; then
		say "compose-env: $name is set in the environment; not written to .env"
		continue
	fi
	if current=$(in_env_file "$name"); then
		if [ -z "$current" ]; then
			say "compose-env: $name is empty in .env: docker compose refuses an empty secret."
			say "             Set a value there, or delete the line and run make compose-env again."
			exit 1
		fi
		continue
	fi
	missing+=("$name")
done

umask 077
written=()
for name in "${missing[@]+"${missing[@]}"}"; do
	if [ ${#written[@]} -eq 0 ] && [ -s .env ] && [ -n "$(tail -c 1 .env)" ]; then
		echo >>.env # the last line had no newline
	fi
	if [ ${#written[@]} -eq 0 ]; then
		printf '# Written by make compose-env on %s: random secrets for docker-compose.yml.\n' "$(date -u +%Y-%m-%d)" >>.env
	fi
	printf '%s=%s\n' "$name" "$(value_for "$name")" >>.env
	written+=("$name")
done

if [ ${#written[@]} -eq 0 ]; then
	say "compose-env: .env already has every secret docker-compose.yml requires; nothing changed"
	exit 0
fi
say "compose-env: wrote ${written[*]} to $ROOT/.env (git-ignored; keep it, and keep N8N_ENCRYPTION_KEY: n8n's stored credentials need it)"
