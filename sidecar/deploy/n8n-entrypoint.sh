#!/bin/sh
# Entrypoint of the n8n image with the Idempotent Claim node (n8n-node/Dockerfile).
#
# At every start it installs the node package shipped in the image into n8n's
# community-node folder, $N8N_USER_FOLDER/.n8n/nodes/node_modules/, which is
# what a community-node install produces; the node type is then
# n8n-nodes-idempotent-claim.idempotentClaim. Doing it at start rather than at
# build time matters because .n8n is normally a volume, which hides whatever
# the image had there, and because a newer image must replace the copy an older
# one left in the volume. Then it runs n8n's own entrypoint with the same
# arguments, so `worker`, `webhook` and other n8n commands work unchanged.
#
# Environment (all optional):
#   N8N_USER_FOLDER            n8n's user folder (data in $N8N_USER_FOLDER/.n8n); default $HOME
#   IC_NODE_PACKAGE_DIR        the package to install; default /opt/idempotent-claim/n8n-nodes-idempotent-claim
#   IC_N8N_ENTRYPOINT          n8n's entrypoint; default /docker-entrypoint.sh (falls back to `n8n`)
set -eu

pkg=n8n-nodes-idempotent-claim
src="${IC_NODE_PACKAGE_DIR:-/opt/idempotent-claim/$pkg}"
user_folder="${N8N_USER_FOLDER:-${HOME:-/home/node}}"
modules="$user_folder/.n8n/nodes/node_modules"
dst="$modules/$pkg"

if [ ! -f "$src/package.json" ]; then
	echo "idempotent-claim: node package missing at $src" >&2
	exit 1
fi
mkdir -p "$modules"
# Stage next to the destination, then swap: a failed copy never leaves a
# half-installed package in place, and files of an older version are dropped.
tmp="$modules/.$pkg.installing"
rm -rf "$tmp"
cp -R "$src" "$tmp"
rm -rf "$dst"
mv "$tmp" "$dst"
echo "idempotent-claim: installed $pkg into $modules" >&2

next="${IC_N8N_ENTRYPOINT:-/docker-entrypoint.sh}"
if [ -x "$next" ]; then
	exec "$next" "$@"
fi
exec n8n "$@"
