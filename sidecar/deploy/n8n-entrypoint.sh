#!/bin/sh
# Entrypoint of the n8n image with the Idempotent Claim node (n8n-node/Dockerfile).
#
# n8n manages community packages in $N8N_USER_FOLDER/.n8n/nodes: its installer
# (Settings > Community Nodes, or N8N_COMMUNITY_PACKAGES with
# N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=true) downloads a package from the npm
# registry into nodes/node_modules/<package>, records it in nodes/package.json
# and in its database, and only then lists it in Settings. It replaces the
# whole package folder when it installs or updates. A package found in
# nodes/node_modules without that record is loaded too, but not listed.
#
# First it refuses (exit 1, n8n not started) a queue-mode mismatch, which
# would otherwise run but do nothing useful:
#   - EXECUTIONS_MODE=queue while the Redis host (QUEUE_BULL_REDIS_HOST) does
#     not resolve: in docker-compose.yml, N8N_EXECUTIONS_MODE=queue without
#     --profile queue, where there is no redis service;
#   - a `worker` or `webhook` process while EXECUTIONS_MODE is not queue: n8n
#     would run it in queue mode anyway, next to a main that never enqueues,
#     so it would wait forever (--profile queue without
#     N8N_EXECUTIONS_MODE=queue);
#   - an EXECUTIONS_MODE other than regular or queue.
#
# This image also carries the package, built from this repository, so that
# the stack works before (or without) the npm release. Before starting n8n,
# this script decides what to do with that copy, IC_NODE_INSTALL:
#
#   auto (default)
#     n8n when N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV=true, else image.
#   image
#     The image's copy is installed when the package folder is absent, and
#     marked with a file inside the folder recording the image build.
#     - Folder present with that mark: the image's copy, replaced when this
#       image is a different build.
#     - Folder present without the mark: n8n (or someone) installed it: it
#       is never touched, whatever its version.
#     - Folder absent although the image installed it once in this nodes
#       folder (nodes/.idempotent-claim-image-seeded): it was uninstalled in
#       n8n, and stays so. Delete that file to get the image's copy back.
#   n8n
#     n8n alone installs the package; a copy marked as the image's is removed.
#   off
#     Nothing is installed or removed.
#
# Then it runs n8n's own entrypoint with the same arguments, so `worker`,
# `webhook` and other n8n commands work unchanged.
#
# Environment (all optional):
#   EXECUTIONS_MODE      n8n's: regular (default) or queue
#   QUEUE_BULL_REDIS_HOST n8n's Redis host in queue mode (default localhost)
#   IC_NODE_INSTALL      auto | image | n8n | off (default auto)
#   N8N_USER_FOLDER      n8n's user folder (data in $N8N_USER_FOLDER/.n8n); default $HOME
#   IC_NODE_PACKAGE_DIR  the image's package (an unpacked npm tarball); default
#                        /opt/idempotent-claim/n8n-nodes-idempotent-claim; the
#                        file "$IC_NODE_PACKAGE_DIR.build" names its build
#   IC_N8N_ENTRYPOINT    n8n's entrypoint; default /docker-entrypoint.sh (falls back to `n8n`)
set -eu

pkg=n8n-nodes-idempotent-claim
src="${IC_NODE_PACKAGE_DIR:-/opt/idempotent-claim/$pkg}"
src="${src%/}"
user_folder="${N8N_USER_FOLDER:-${HOME:-/home/node}}"
nodes="$user_folder/.n8n/nodes"
modules="$nodes/node_modules"
dst="$modules/$pkg"
mark="$dst/.idempotent-claim-image"
seeded="$nodes/.idempotent-claim-image-seeded"

log() { echo "idempotent-claim: $*" >&2; }

# resolves HOST: the host name resolves (getent where the image has it,
# else Node's resolver, which every n8n image has).
resolves() {
	if command -v getent >/dev/null 2>&1; then
		getent hosts "$1" >/dev/null 2>&1
	else
		node -e 'require("dns").lookup(process.argv[1], (err) => process.exit(err ? 1 : 0))' "$1" >/dev/null 2>&1
	fi
}

exec_mode="${EXECUTIONS_MODE:-regular}"
case "$exec_mode" in
regular | queue) ;;
*)
	log "EXECUTIONS_MODE must be regular or queue, not '$exec_mode' (docker-compose.yml: N8N_EXECUTIONS_MODE)"
	exit 1
	;;
esac
case "${1:-}" in
worker | webhook)
	if [ "$exec_mode" != queue ]; then
		log "refusing to start n8n $1: EXECUTIONS_MODE is $exec_mode, so the main n8n runs every execution itself and this process would never get one."
		log "Queue mode needs both: N8N_EXECUTIONS_MODE=queue docker compose --profile queue up"
		exit 1
	fi
	;;
esac
if [ "$exec_mode" = queue ]; then
	redis_host="${QUEUE_BULL_REDIS_HOST:-localhost}"
	if ! resolves "$redis_host"; then
		log "refusing to start n8n in queue mode: the Redis host '$redis_host' (QUEUE_BULL_REDIS_HOST) does not resolve."
		log "In docker-compose.yml, queue mode needs both: N8N_EXECUTIONS_MODE=queue docker compose --profile queue up"
		log "(or leave N8N_EXECUTIONS_MODE unset for regular mode)"
		exit 1
	fi
fi

mode="${IC_NODE_INSTALL:-auto}"
if [ "$mode" = auto ]; then
	if [ "${N8N_COMMUNITY_PACKAGES_MANAGED_BY_ENV:-false}" = true ]; then
		mode=n8n
	else
		mode=image
	fi
fi

# The "version" of a package.json, without a JSON parser: npm writes one
# key per line.
version_of() {
	sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$1/package.json" 2>/dev/null | head -n 1
}

# Scaled workers share the nodes folder: one changes it at a time. The
# change takes milliseconds; a lock older than that is from a killed start.
lock="$nodes/.idempotent-claim.lock"
unlock() { rmdir "$lock" 2>/dev/null || true; }
take_lock() {
	mkdir -p "$nodes"
	i=0
	until mkdir "$lock" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -ge 30 ]; then
			log "taking over the stale lock $lock"
			return 0
		fi
		sleep 1
	done
}

install_image_copy() {
	if [ ! -f "$src/package.json" ] || [ ! -s "$src.build" ]; then
		log "node package missing in the image at $src (package.json and $src.build)"
		exit 1
	fi
	mkdir -p "$modules"
	# Stage next to the destination, then swap: a failed copy never leaves a
	# half-installed package in place, and files of an older build are dropped.
	tmp="$modules/.$pkg.image-$$"
	rm -rf "$tmp"
	cp -R "$src" "$tmp"
	cp "$src.build" "$tmp/.idempotent-claim-image"
	rm -rf "$dst"
	mv "$tmp" "$dst"
	: >"$seeded"
	log "installed $pkg $(version_of "$dst") from the image into $modules"
}

case "$mode" in
off) ;;
n8n)
	if [ -f "$mark" ]; then
		take_lock
		trap unlock EXIT
		rm -rf "$dst"
		unlock
		trap - EXIT
		log "removed the image's copy of $pkg: n8n installs it (IC_NODE_INSTALL=n8n)"
	fi
	;;
image)
	take_lock
	trap unlock EXIT
	if [ -f "$mark" ]; then
		if [ "$(cat "$mark")" = "$(cat "$src.build" 2>/dev/null)" ]; then
			log "$pkg $(version_of "$dst") from this image is installed"
		else
			install_image_copy
		fi
	elif [ -d "$dst" ]; then
		log "keeping $pkg $(version_of "$dst"), installed by n8n or by hand (not the image's copy)"
	elif [ -f "$seeded" ]; then
		log "$pkg was uninstalled after the image installed it: not reinstalling (install it in Settings > Community Nodes, or delete $seeded)"
	else
		install_image_copy
	fi
	unlock
	trap - EXIT
	;;
*)
	log "IC_NODE_INSTALL must be auto, image, n8n or off, not '$mode'"
	exit 1
	;;
esac

next="${IC_N8N_ENTRYPOINT:-/docker-entrypoint.sh}"
if [ -x "$next" ]; then
	exec "$next" "$@"
fi
exec n8n "$@"
