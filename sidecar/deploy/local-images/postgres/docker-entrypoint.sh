#!/usr/bin/env bash
# The official postgres image's entrypoint contract, for the local stand-in:
#   - started as root: the data directory is given to postgres and the
#     script runs again as postgres;
#   - an empty PGDATA is initialised (initdb, superuser POSTGRES_USER with
#     POSTGRES_PASSWORD, password authentication for every TCP client),
#     POSTGRES_DB created, then /docker-entrypoint-initdb.d/*.sh (sourced
#     when not executable) and *.sql run against a server on the socket
#     only, which is stopped again;
#   - then the server runs in the foreground with the given arguments,
#     listening on all interfaces.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA"
	chown postgres:postgres "$PGDATA"
	chmod 0700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
	: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (the password of POSTGRES_USER)}"
	export POSTGRES_USER="${POSTGRES_USER:-postgres}"
	export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
	# POSTGRES_INITDB_ARGS is a list of arguments, split as the official
	# image splits it.
	# shellcheck disable=SC2086
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
		--auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} >/dev/null
	printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start >/dev/null
	export PGHOST=/var/run/postgresql PGUSER="$POSTGRES_USER"
	if [ "$POSTGRES_DB" != postgres ]; then
		psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				echo "running $f"
				"$f"
			else
				echo "sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			echo "running $f"
			psql -v ON_ERROR_STOP=1 --no-psqlrc --dbname "$POSTGRES_DB" -f "$f"
			;;
		*) ;;
		esac
	done
	unset PGHOST PGUSER
	pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
	echo "PostgreSQL init process complete; ready for start up."
fi

if [ "$1" = postgres ]; then
	shift
	exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
fi
exec "$@"
