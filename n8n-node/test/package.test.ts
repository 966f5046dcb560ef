/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-dangerous-functions, no-console --
 * The community-node rules are for code that runs inside n8n; this test runs npm.
 */
/**
 * What `npm publish` would upload: the file list of `npm pack --dry-run --json`
 * checked against an allow-list, a size bound, the files package.json's `n8n`
 * section and the icons point at, and the metadata npm and n8n show.
 *
 * The list comes from the built package: when dist/ is missing (a fresh
 * checkout; `make test` builds first) the test runs `npm run build` once.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';

import pkg from '../package.json';

const ROOT = path.resolve(__dirname, '..');

/** Every path the tarball may hold; anything else fails the test. */
const ALLOWED: RegExp[] = [
	/^package\.json$/,
	/^README\.md$/,
	/^LICENSE$/,
	// Compiled node and credential code, the node's codex file, the icons.
	/^dist\/(nodes|credentials)\/([\w.-]+\/)*[\w.-]+\.js$/,
	/^dist\/nodes\/([\w.-]+\/)*[\w.-]+\.node\.json$/,
	/^dist\/icons\/[\w.-]+\.svg$/,
	// The example workflows the README points at, and their notes.
	/^examples\/[\w.-]+\.json$/,
	/^examples\/README\.md$/,
];

/** Bounds on the whole package: today about 31 kB packed, 130 kB unpacked. */
const MAX_PACKED_BYTES = 96 * 1024;
const MAX_UNPACKED_BYTES = 384 * 1024;
const MAX_FILE_BYTES = 64 * 1024;

interface PackedFile {
	path: string;
	size: number;
	mode: number;
}

interface PackResult {
	name: string;
	version: string;
	size: number;
	unpackedSize: number;
	files: PackedFile[];
}

/** npm itself: the one running `npm test`, else the first on PATH. */
function npm(args: string[]): string {
	const cli = process.env.npm_execpath;
	const [command, prefix] =
		cli && /npm-cli\.js$/.test(cli) ? [process.execPath, [cli]] : ['npm', [] as string[]];
	return execFileSync(command, [...prefix, ...args], {
		cwd: ROOT,
		encoding: 'utf8',
		stdio: ['ignore', 'pipe', 'pipe'],
		maxBuffer: 16 * 1024 * 1024,
	});
}

let packed: PackResult;
let paths: Set<string>;

beforeAll(() => {
	if (!existsSync(path.join(ROOT, 'dist', 'nodes'))) {
		console.log('package.test: dist/ is missing, running `npm run build` first');
		npm(['run', 'build']);
	}
	// --ignore-scripts: the list only, no lifecycle script may change dist/.
	const out = JSON.parse(npm(['pack', '--dry-run', '--json', '--ignore-scripts'])) as PackResult[];
	expect(out).toHaveLength(1);
	packed = out[0];
	paths = new Set(packed.files.map((f) => f.path));
}, 180_000);

/** `file:` icon paths of a built file, as paths inside the package. */
function iconPaths(builtFile: string, icon: unknown): string[] {
	const refs = typeof icon === 'string' ? [icon] : Object.values((icon ?? {}) as object);
	return refs
		.filter((ref): ref is string => typeof ref === 'string' && ref.startsWith('file:'))
		.map((ref) => path.posix.normalize(path.posix.join(path.posix.dirname(builtFile), ref.slice(5))));
}

/** Markdown link and image targets of a file. */
function linkTargets(markdown: string): string[] {
	const targets: string[] = [];
	for (const m of markdown.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
		targets.push(m[1]);
	}
	for (const m of markdown.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/gm)) {
		targets.push(m[1]);
	}
	return targets;
}

describe('npm package contents', () => {
	it('holds only allow-listed files', () => {
		const unexpected = [...paths].filter((p) => !ALLOWED.some((re) => re.test(p)));
		expect(unexpected, 'files outside the allow-list would be published').toEqual([]);
	});

	it('ships no build state, source maps, declarations, sources, tests or images other than SVG', () => {
		const banned = [...paths].filter((p) =>
			/(\.tsbuildinfo|\.map|\.d\.ts|\.ts|\.png|\.jpe?g|\.gif|\.tgz)$|(^|\/)(test|tests|__tests__|node_modules)\//.test(
				p,
			),
		);
		expect(banned).toEqual([]);
	});

	it('stays small', () => {
		expect(packed.size).toBeLessThanOrEqual(MAX_PACKED_BYTES);
		expect(packed.unpackedSize).toBeLessThanOrEqual(MAX_UNPACKED_BYTES);
		const big = packed.files.filter((f) => f.size > MAX_FILE_BYTES).map((f) => `${f.path} ${f.size}`);
		expect(big).toEqual([]);
	});

	it('holds package.json, README.md and LICENSE', () => {
		for (const p of ['package.json', 'README.md', 'LICENSE']) expect(paths).toContain(p);
	});

	it('holds every node and credential file of the n8n section, and the icons they name', async () => {
		const entries = [...pkg.n8n.nodes, ...pkg.n8n.credentials];
		expect(entries.length).toBeGreaterThan(0);
		for (const built of entries) {
			expect(paths, `${built} (package.json n8n section)`).toContain(built);
			// The icon paths are relative to the built file, as n8n resolves them.
			const source = built.replace(/^dist\//, '').replace(/\.js$/, '');
			const module = (await import(`../${source}`)) as Record<string, new () => object>;
			for (const Exported of Object.values(module)) {
				const instance = new Exported() as { icon?: unknown; description?: { icon?: unknown } };
				const icons = iconPaths(built, instance.description?.icon ?? instance.icon);
				expect(icons.length, `${built} names a file icon`).toBeGreaterThan(0);
				for (const icon of icons) expect(paths, `icon of ${built}`).toContain(icon);
			}
		}
		const codex = pkg.n8n.nodes.map((node) => node.replace(/\.js$/, '.json'));
		for (const file of codex) expect(paths, 'the codex file next to the node').toContain(file);
	});

	it('holds every example workflow', () => {
		const examples = readdirSync(path.join(ROOT, 'examples')).filter((f) => f.endsWith('.json'));
		expect(examples.length).toBeGreaterThan(0);
		for (const f of examples) expect(paths).toContain(`examples/${f}`);
	});

	it('has README links that work on npmjs.com: absolute, or anchors', () => {
		// npmjs.com does not resolve a relative link against the package's
		// folder in the repository, so such a link breaks on the package page.
		for (const doc of ['README.md', 'examples/README.md'].filter((p) => paths.has(p))) {
			const relative = linkTargets(readFileSync(path.join(ROOT, doc), 'utf8')).filter(
				(t) => !/^(https?:|mailto:|#)/.test(t),
			);
			expect(relative, `relative links in ${doc}`).toEqual([]);
		}
	});
});

describe('npm package metadata', () => {
	it('is found by n8n as a community node package', () => {
		expect(pkg.name).toMatch(/^n8n-nodes-[a-z0-9-]+$/);
		expect(pkg.keywords).toContain('n8n-community-node-package');
		expect(pkg.n8n.n8nNodesApiVersion).toBe(1);
	});

	it('installs without dependencies or install scripts', () => {
		const p = pkg as { dependencies?: object; scripts?: Record<string, string> };
		expect(p.dependencies ?? {}).toEqual({});
		for (const hook of ['preinstall', 'install', 'postinstall', 'prepare']) {
			expect(p.scripts?.[hook], `scripts.${hook}`).toBeUndefined();
		}
	});

	it('names the real repository, an MIT licence and an author', () => {
		expect(pkg.license).toBe('MIT');
		expect(readFileSync(path.join(ROOT, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
		// npm provenance requires repository.url to be the repository that builds it.
		expect(pkg.repository.url).toBe('git+https://github.com/idempotent-claim/idempotent-claim.git');
		expect(pkg.repository.directory).toBe('n8n-node');
		expect(pkg.homepage).toMatch(/^https:\/\/github\.com\/idempotent-claim\/idempotent-claim\//);
		// n8n's lint and its package scanner require a name and an email
		// (@n8n/community-nodes/valid-author), and verification compares the
		// author with the npm maintainer. The publish workflow refuses a
		// placeholder (.invalid) address; here: present and well-formed.
		expect(pkg.author.name).not.toBe('');
		expect(pkg.author.email).toMatch(/^[^\s@<>]+@[^\s@<>]+\.[a-z]+$/);
		expect(pkg.author.url).toMatch(/^https:\/\/github\.com\/idempotent-claim\//);
	});
});
