#!/usr/bin/env bash
# Runs n8n's community package scanner, @n8n/scan-community-package (pinned in
# package.json's devDependencies), on this package.
#
# Usage:
#   n8n-node/scripts/scan-package.sh
#       Before publishing, offline: packs the package exactly as `npm publish`
#       would (building dist/ first when it is missing or older than a
#       source), then runs the scanner's two lint passes: one on the node and
#       credential sources plus package.json (what it lints in the source
#       commit a package's provenance names), one on the compiled .js and
#       package.json of the unpacked tarball. Provenance, the scanner's third
#       check, exists only for a published version: see --published.
#   n8n-node/scripts/scan-package.sh --published VERSION
#       After publishing: the scanner's full check of VERSION as published on
#       registry.npmjs.org, as n8n runs it for verification: provenance, then
#       the source commit the provenance names (downloaded from GitHub), then
#       the published tarball. Retries while the registry has not caught up.
#
# Exits 0 when every check passed, 1 otherwise; the scanner's findings are
# printed. Needs Node 24 and `npm ci` in n8n-node.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'scan-package: %s\n' "$*" >&2; }

scanner="$PWD/node_modules/@n8n/scan-community-package/scanner/scanner.mjs"
if [ ! -f "$scanner" ]; then
	log "$scanner is missing: run npm ci in n8n-node"
	exit 1
fi
version=$(node -p 'require("./node_modules/@n8n/scan-community-package/package.json").version')

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The scanner makes a temporary folder when it is loaded: keep it in ours.
export TMPDIR="$tmp"

if [ "${1:-}" = "--published" ]; then
	want="${2:-}"
	if [ -z "$want" ] || [ $# -ne 2 ]; then
		log "usage: $0 --published VERSION"
		exit 2
	fi
	name=$(node -p 'require("./package.json").name')
	log "scanner $version: full check of $name@$want as published"
	node --input-type=module - "$scanner" "$name" "$want" <<'EOF'
import { pathToFileURL } from 'node:url';
const [scanner, name, version] = process.argv.slice(2);
const { analyzePackageByName } = await import(pathToFileURL(scanner).href);
// A version published seconds ago can be missing from the registry's
// metadata or attestations for a while.
let result;
for (let attempt = 1; attempt <= 10; attempt++) {
	result = await analyzePackageByName(name, version);
	if (result.passed) break;
	if (!/No package metadata|attestations|404/i.test(`${result.message}`)) break;
	console.error(`scan-package: not available yet (${result.message}); retrying in 30 s`);
	await new Promise((resolve) => setTimeout(resolve, 30_000));
}
if (result.passed) {
	console.log(`scan-package: ${name}@${result.version} passed provenance, source and tarball checks`);
} else {
	console.log(`scan-package: ${name}@${result.version ?? version} FAILED: ${result.message}`);
	if (result.details) console.log(result.details);
	process.exit(1);
}
EOF
	exit $?
fi

if [ $# -ne 0 ]; then
	log "usage: $0 [--published VERSION]"
	exit 2
fi

# A stale dist/ would be scanned (and packed) as it is: rebuild when any
# input of the build is newer than the node file package.json registers.
ref=$(node -p 'require("./package.json").n8n.nodes[0]')
if [ ! -f "$ref" ] || [ -n "$(find nodes credentials icons tsconfig.json -newer "$ref" -print -quit)" ]; then
	log "dist/ is missing or older than the sources: npm run build"
	npm run build >"$tmp/build.log" 2>&1 || {
		cat "$tmp/build.log" >&2
		exit 1
	}
fi

npm pack --ignore-scripts --pack-destination "$tmp" --loglevel=error >/dev/null
tarball=$(ls "$tmp"/*.tgz)
mkdir "$tmp/package"
tar -xzf "$tarball" -C "$tmp/package" --strip-components=1
log "scanner $version: $(basename "$tarball") and the sources"

node --input-type=module - "$scanner" "$PWD" "$tmp/package" <<'EOF'
import { pathToFileURL } from 'node:url';
const [scanner, sourceDir, packageDir] = process.argv.slice(2);
const { analyzePackage, SOURCE_FILE_PATTERNS } = await import(pathToFileURL(scanner).href);
// The same two passes and file patterns as the scanner's own run on a
// published package (analyzePackageByName), minus the download.
const legs = [
	['sources (nodes/, credentials/, package.json)', await analyzePackage(sourceDir, SOURCE_FILE_PATTERNS)],
	['tarball (compiled .js, package.json)', await analyzePackage(packageDir, ['**/*.js', 'package.json'])],
];
let failed = false;
for (const [what, result] of legs) {
	if (result.passed) {
		console.log(`scan-package: ${what}: passed${result.message ? ` (${result.message})` : ''}`);
	} else {
		failed = true;
		console.log(`scan-package: ${what}: FAILED: ${result.message}`);
		if (result.details) console.log(result.details);
	}
}
console.log('scan-package: provenance: checked after publishing (--published VERSION)');
process.exit(failed ? 1 : 0);
EOF
