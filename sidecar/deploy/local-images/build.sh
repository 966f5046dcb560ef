#!/usr/bin/env bash
# Builds, on this machine, stand-ins for every image docker-compose.yml pulls
# from a registry, for machines that reach no container registry (air-gapped
# hosts, or CI machines like ours): a Debian base made with debootstrap, and
# from it Go, distroless, Node.js, n8n, n8n's task runners, PostgreSQL and
# Redis, each from Debian's packages, the Go module proxy or the npm
# registry at the versions the compose file and Dockerfiles pin.
# docker-compose.local.yml (next to this file) then points the compose file
# at them; nothing else of the compose file changes.
#
#   sidecar/deploy/local-images/build.sh          # build what is missing
#   sidecar/deploy/local-images/build.sh --list   # print the image names
#
# Each image is labelled with a hash of its recipe (its folder here, its
# build arguments, its base's id); an image whose label matches is kept, so
# a second run takes seconds. Needs root (debootstrap), debootstrap, and
# podman (default when installed) or docker: IC_CONTAINER_ENGINE chooses.
#
# Environment (all optional):
#   IC_CONTAINER_ENGINE  podman | docker (default: podman if installed)
#   IC_LOCAL_IMAGES      image name prefix (default localhost/idempotent-claim-local)
#   DEBIAN_MIRROR        debootstrap's mirror (default http://deb.debian.org/debian)
#   IC_EXTRA_CA_DIR      *.crt files added to every image's trusted CAs, for
#                        networks that inspect TLS (default
#                        /usr/local/share/ca-certificates, when it has any)
#   GOPROXY              baked into the Go image (default: `go env GOPROXY`,
#                        else https://proxy.golang.org)
#   NPM_REGISTRY         baked into the Node.js image (default: `npm config
#                        get registry`, else https://registry.npmjs.org/)
# Times measured on a 2-core machine: see the README ("Without a registry").
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${IC_LOCAL_IMAGES:-localhost/idempotent-claim-local}"
engine="${IC_CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
	if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ca_dir="${IC_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"
goproxy="${GOPROXY:-$(go env GOPROXY 2>/dev/null || true)}"
goproxy="${goproxy:-https://proxy.golang.org}"
npm_registry="${NPM_REGISTRY:-$(npm config get registry 2>/dev/null || true)}"
npm_registry="${npm_registry:-https://registry.npmjs.org/}"

# The images, in build order: name:tag, recipe folder, build arguments
# (BASE, NODE_IMAGE and N8N_IMAGE name earlier images).
images=(
	"debian:bookworm|debian|bookworm"
	"debian:trixie|debian|trixie"
	"golang:1.26|golang|BASE=debian:bookworm GOPROXY=$goproxy"
	"distroless-static:nonroot|distroless|BASE=debian:bookworm"
	"node:24|node|BASE=debian:bookworm NPM_REGISTRY=$npm_registry"
	"n8n:2.41.1|n8n|NODE_IMAGE=node:24"
	"runners:2.41.1|runners|N8N_IMAGE=n8n:2.41.1"
	"postgres:17|postgres|BASE=debian:trixie"
	"redis:7|redis|BASE=debian:bookworm"
)

if [ "${1:-}" = --list ]; then
	for spec in "${images[@]}"; do echo "$prefix/${spec%%|*}"; done
	exit 0
fi

log() { echo "local-images: $*" >&2; }
label_key=io.idempotent-claim.recipe

# label IMAGE: the recipe label of IMAGE, empty when it does not exist.
label() {
	"$engine" image inspect --format "{{ index .Config.Labels \"$label_key\" }}" "$1" 2>/dev/null || true
}

# ca_files: the extra CA certificates, one per line (may be none).
ca_files() {
	[ -d "$ca_dir" ] && find "$ca_dir" -maxdepth 1 -name '*.crt' -type f | sort
	return 0
}

# debian SUITE TAG RECIPE: a minimal Debian root made with debootstrap and
# imported as an image.
debian() {
	local suite="$1" tag="$2" recipe="$3" root
	command -v debootstrap >/dev/null || { log "debootstrap is needed (apt-get install debootstrap)"; exit 1; }
	root="$(mktemp -d "${TMPDIR:-/tmp}/ic-debian-$suite.XXXXXX")"
	trap 'rm -rf "$root"' RETURN
	debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
		log "debootstrap $suite failed; its log: $root.log"
		exit 1
	}
	rm -f "$root.log"
	while IFS= read -r crt; do
		[ -n "$crt" ] && cp "$crt" "$root/usr/local/share/ca-certificates/"
	done < <(ca_files)
	chroot "$root" update-ca-certificates >/dev/null
	# Images need no documentation, and apt in a container keeps no cache.
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
	printf 'APT::Install-Recommends "false";\nAPT::Keep-Downloaded-Packages "false";\n' >"$root/etc/apt/apt.conf.d/90idempotent-claim"
	tar -C "$root" -c . | "$engine" import --change "LABEL $label_key=$recipe" --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
}

for spec in "${images[@]}"; do
	IFS='|' read -r name dir args <<<"$spec"
	tag="$prefix/$name"
	build_args=()
	recipe_in="$name|$args"
	if [ "$dir" = debian ]; then
		recipe_in+="|$mirror|$(ca_files | xargs -r sha256sum)"
	else
		for a in $args; do
			k="${a%%=*}" v="${a#*=}"
			case "$k" in
			BASE | NODE_IMAGE | N8N_IMAGE)
				v="$prefix/$v"
				recipe_in+="|$k=$("$engine" image inspect --format '{{.Id}}' "$v")"
				;;
			*) recipe_in+="|$a" ;;
			esac
			build_args+=(--build-arg "$k=$v")
		done
		recipe_in+="|$(cd "$here/$dir" && find . -type f | sort | xargs sha256sum)"
	fi
	recipe="$(printf '%s' "$recipe_in" | sha256sum | cut -c1-16)"
	if [ "$(label "$tag")" = "$recipe" ]; then
		log "$tag is up to date"
		continue
	fi
	log "building $tag"
	start=$(date +%s)
	if [ "$dir" = debian ]; then
		debian "$args" "$tag" "$recipe"
	else
		pull=()
		[ "$engine" = podman ] && pull=(--pull=never --format docker)
		"$engine" build "${pull[@]}" --label "$label_key=$recipe" "${build_args[@]}" -t "$tag" -f "$here/$dir/Containerfile" "$here/$dir" >&2
	fi
	log "built $tag in $(($(date +%s) - start)) s"
done
