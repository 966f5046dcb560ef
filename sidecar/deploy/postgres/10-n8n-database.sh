#!/usr/bin/env bash
# Creates n8n's own role and database next to the sidecar's, in the same
# PostgreSQL. docker-compose.yml mounts this file into
# /docker-entrypoint-initdb.d/, so the postgres image runs it once, when it
# initialises an empty data volume (it is then connected over the local
# socket as POSTGRES_USER). Changing the password later needs ALTER ROLE.
#
# Environment: N8N_DB_PASSWORD (required), N8N_DB_USER and N8N_DB_NAME
# (default n8n); POSTGRES_USER and POSTGRES_DB come from the postgres image.
# Values reach SQL only as psql variables (:"ident", :'literal'), quoted by
# psql, so no value is ever spliced into the SQL text.
#
# The postgres entrypoint sources *.sh files that are not executable, so this
# file sets no shell options; psql's ON_ERROR_STOP makes a failure fatal.

: "${N8N_DB_PASSWORD:?N8N_DB_PASSWORD must be set for the n8n database}"

psql -v ON_ERROR_STOP=1 --no-psqlrc \
	--username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
	--set=n8n_user="${N8N_DB_USER:-n8n}" \
	--set=n8n_db="${N8N_DB_NAME:-n8n}" \
	--set=n8n_password="${N8N_DB_PASSWORD}" \
	--set=claimd_db="${POSTGRES_DB:-postgres}" <<'SQL'
CREATE ROLE :"n8n_user" LOGIN PASSWORD :'n8n_password';
CREATE DATABASE :"n8n_db" OWNER :"n8n_user";
-- Each application reaches only its own database.
REVOKE ALL ON DATABASE :"n8n_db" FROM PUBLIC;
REVOKE CONNECT, TEMPORARY ON DATABASE :"claimd_db" FROM PUBLIC;
SQL
