// Drives the console's source pages (/ui/sources/{source}) in headless
// Chromium with playwright-core and checks the charts as a user and a
// screen reader get them: present, labelled (role=img named by its title
// and description, axis labels), their bars and tables equal to the
// seeded counts, readable at phone width without sideways scrolling, and
// no Content-Security-Policy violation on any page (the console sends no
// script and allows none, nor inline styles). Optionally writes the
// chart screenshots of sidecar/docs/operations.md#console-charts.
//
// Run by the Go test TestConsoleCharts (sidecar/e2e/console_charts_test.go),
// which starts claimd, seeds two sources through the API and waits for the
// maintenance loop's rollup before running this script.
//
// Environment: as testdata/console-browser.mjs (IC_CONSOLE_URL,
// IC_CONSOLE_SEED, IC_CONSOLE_SCREENSHOTS, IC_CONSOLE_DEBUG, CHROMIUM_PATH,
// IC_SCREENSHOT_TOOLS). Output: one JSON line per check, then
// {"done":true,"checks":N,"failed":M}; exit 0 when all passed.

import { createRequire } from 'node:module';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const env = process.env;

function required(name) {
	const v = env[name];
	if (!v) {
		throw new Error(`${name} is not set`);
	}
	return v;
}

const base = required('IC_CONSOLE_URL').replace(/\/+$/, '');
const seed = JSON.parse(readFileSync(required('IC_CONSOLE_SEED'), 'utf8'));
const shots = env.IC_CONSOLE_SCREENSHOTS || '';
const debugDir = env.IC_CONSOLE_DEBUG || '';
const stepTimeout = 30_000;
const wantCSP =
	"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

let checks = 0;
let failed = 0;
const report = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const log = (m) => process.stderr.write(`console-charts: ${m}\n`);

class CheckError extends Error {}
function expect(cond, msg) {
	if (!cond) {
		throw new CheckError(msg);
	}
}
function expectEqual(got, want, what) {
	const g = JSON.stringify(got);
	const w = JSON.stringify(want);
	expect(g === w, `${what}: got ${g}, want ${w}`);
}

async function check(name, page, fn) {
	checks++;
	const began = Date.now();
	try {
		const data = await fn();
		report({ check: name, ok: true, ms: Date.now() - began, ...(data ? { data } : {}) });
		log(`ok   ${name}`);
	} catch (err) {
		failed++;
		report({ check: name, ok: false, ms: Date.now() - began, error: err.message, url: page ? page.url() : '' });
		log(`FAIL ${name}: ${err.message}`);
		if (debugDir && page) {
			mkdirSync(debugDir, { recursive: true });
			await page.screenshot({ path: join(debugDir, `${name}.png`), fullPage: true }).catch(() => {});
		}
	}
}

// violations collects every CSP violation a page reports: the console's
// messages Chromium prints for a blocked resource or attribute, and the
// securitypolicyviolation events (listened to by an init script, which
// the browser runs outside the page's CSP).
const violations = [];
async function watch(context) {
	await context.addInitScript(() => {
		document.addEventListener('securitypolicyviolation', (e) => {
			console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`);
		});
	});
	context.on('page', (p) => observe(p));
}
function observe(page) {
	page.on('console', (msg) => {
		const t = msg.text();
		if (/Content Security Policy|CSP violation/i.test(t)) {
			violations.push(`${page.url()}: ${t}`);
		}
	});
}

// open loads a console page, checks its status and CSP header.
async function open(page, path, status = 200) {
	const resp = await page.goto(base + path);
	expectEqual(resp.status(), status, `${path} status`);
	expectEqual(resp.headers()['content-security-policy'], wantCSP, `${path} Content-Security-Policy`);
	return resp;
}

async function signIn(page) {
	await open(page, '/ui/signin');
	await page.locator('input[name="api_key"]').fill(seed.key);
	await Promise.all([page.waitForURL(base + '/ui/'), page.getByRole('button', { name: 'Sign in' }).click()]);
}

// charts reads every chart of the page as a screen reader and the bars
// show it.
async function charts(page) {
	return page.locator('[data-testid="chart"]').evaluateAll((figs) =>
		figs.map((fig) => {
			const svg = fig.querySelector('svg');
			const named = (svg.getAttribute('aria-labelledby') || '')
				.split(/\s+/)
				.filter(Boolean)
				.map((id) => document.getElementById(id));
			const sums = {};
			for (const m of svg.querySelectorAll('[data-value]')) {
				sums[m.dataset.series] = (sums[m.dataset.series] || 0) + Number(m.dataset.value);
			}
			const heads = [...fig.querySelectorAll('table thead th')].map((th) => th.textContent.trim());
			const tableSums = {};
			for (const tr of fig.querySelectorAll('table tbody tr')) {
				[...tr.querySelectorAll('td')].forEach((td, i) => {
					const h = heads[i + 1];
					tableSums[h] = (tableSums[h] || 0) + Number(td.dataset.value);
				});
			}
			const r = svg.getBoundingClientRect();
			return {
				id: fig.dataset.chart,
				role: svg.getAttribute('role'),
				labelledBy: named.map((el) => (el ? el.tagName.toLowerCase() : null)),
				title: (svg.querySelector('title') || {}).textContent || '',
				desc: (svg.querySelector('desc') || {}).textContent || '',
				heading: (fig.querySelector('h2') || {}).textContent || '',
				xLabel: (svg.querySelector('[data-testid="x-label"]') || {}).textContent || '',
				yLabel: (svg.querySelector('[data-testid="y-label"]') || {}).textContent || '',
				marks: svg.querySelectorAll('[data-value]').length,
				styled: fig.querySelectorAll('[style]').length,
				sums,
				tableSums,
				width: r.width,
				right: r.right,
			};
		}),
	);
}

function checkCharts(list, source) {
	expectEqual(
		list.map((c) => c.id),
		['chart-deliveries', 'chart-duplicates', 'chart-conflicts', 'chart-missed', 'chart-lag'],
		`${source}: charts`,
	);
	for (const c of list) {
		expectEqual(c.role, 'img', `${c.id} role`);
		expectEqual(c.labelledBy, ['title', 'desc'], `${c.id} is labelled by`);
		expect(c.title.trim() && c.desc.trim(), `${c.id} has no title or no description`);
		expect(c.xLabel.trim() && c.yLabel.trim(), `${c.id} has no axis label`);
		expect(c.marks > 0, `${c.id} has no bars`);
		expectEqual(c.styled, 0, `${c.id} elements with a style attribute`);
		for (const [series, v] of Object.entries(c.sums)) {
			const head = Object.keys(c.tableSums).find((h) => h === series || h.startsWith(series + ' ('));
			expect(head, `${c.id}: no table column for ${series}`);
			expectEqual(c.tableSums[head], v, `${c.id} table column ${series} sum`);
		}
	}
	const by = Object.fromEntries(list.map((c) => [c.id, c]));
	for (const [id, series] of Object.entries(seed.expect[source])) {
		for (const [name, want] of Object.entries(series)) {
			expectEqual(by[id].sums[name] ?? 0, want, `${source} ${id} ${name} (sum of the bars)`);
		}
	}
	const dup = Object.values(by['chart-duplicates'].sums).reduce((a, b) => a + b, 0);
	expectEqual(dup, seed.duplicates[source], `${source} duplicates stopped (all causes)`);
	expect(
		by['chart-lag'].desc.includes(`${seed.dispatched[source]} dispatches`),
		`${source} dispatch lag desc names ${seed.dispatched[source]} dispatches: ${by['chart-lag'].desc}`,
	);
	return by;
}

async function shot(page, name) {
	if (!shots) {
		return;
	}
	mkdirSync(shots, { recursive: true });
	await page.evaluate(() => document.fonts.ready);
	await page.screenshot({ path: join(shots, name), fullPage: true, animations: 'disabled' });
	log(`wrote ${name}`);
}

async function main() {
	const tools = required('IC_SCREENSHOT_TOOLS');
	const { chromium } = createRequire(join(tools, 'package.json'))('playwright-core');
	const browser = await chromium.launch({
		executablePath: env.CHROMIUM_PATH || '/usr/bin/chromium',
		headless: true,
		args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
	});
	const opts = { deviceScaleFactor: 1, locale: 'en-US', timezoneId: 'UTC', colorScheme: 'light', reducedMotion: 'reduce' };
	try {
		const desk = await browser.newContext({ ...opts, viewport: { width: 1280, height: 800 } });
		await watch(desk);
		const page = await desk.newPage();
		observe(page);
		page.setDefaultTimeout(stepTimeout);
		await check('sign_in', page, () => signIn(page));
		await check('overview_saved', page, async () => {
			await open(page, '/ui/');
			const t = async (id) => (await page.locator(`[data-testid="${id}"]`).first().innerText()).trim();
			expectEqual(Number(await t('saved-duplicates')), seed.saved.duplicates, 'effects not repeated this week');
			expectEqual(Number(await t('saved-conflicts')), seed.saved.conflicts, 'conflicts held this week');
			expectEqual(Number(await t('saved-backfilled')), seed.saved.backfilled, 'missed events recovered');
			const links = await page
				.locator('[data-testid="charts-link"]')
				.evaluateAll((as) => as.map((a) => a.dataset.source));
			expectEqual(links, ['forms', 'stripe'], 'chart links');
			await Promise.all([page.waitForURL(/\/ui\/sources\/stripe$/), page.locator('[data-testid="charts-link"][data-source="stripe"]').click()]);
		});
		await check('source_charts', page, async () => {
			const out = {};
			for (const source of ['forms', 'stripe']) {
				await open(page, `/ui/sources/${source}`);
				checkCharts(await charts(page), source);
				out[source] = 'ok';
			}
			await shot(page, 'source.png');
			return out;
		});
		await check('source_week', page, async () => {
			await open(page, '/ui/sources/stripe?range=7d');
			const by = checkCharts(await charts(page), 'stripe');
			expectEqual(by['chart-deliveries'].marks, 28, '7 days in 6-hour bars');
			await open(page, '/ui/sources/nosuch', 404);
		});

		const phone = await browser.newContext({ ...opts, viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
		await watch(phone);
		const p = await phone.newPage();
		observe(p);
		p.setDefaultTimeout(stepTimeout);
		await check('phone_width', p, async () => {
			await signIn(p);
			const out = {};
			for (const path of ['/ui/', '/ui/sources/stripe', '/ui/sources/forms?range=7d']) {
				await open(p, path);
				// Open every numbers table too: they must not widen the page.
				await p.locator('details.chart-table summary').evaluateAll((ss) => ss.forEach((s) => s.parentElement.setAttribute('open', '')));
				const { scroll, width } = await p.evaluate(() => ({
					scroll: document.documentElement.scrollWidth,
					width: window.innerWidth,
				}));
				expect(scroll <= width, `${path} scrolls sideways at ${width} px: ${scroll} px wide`);
				for (const c of await charts(p)) {
					expect(c.right <= width, `${path} ${c.id} ends at ${c.right} px, past ${width}`);
					expect(c.width >= 300, `${path} ${c.id} is only ${c.width} px wide`);
				}
				out[path] = { scroll, width };
			}
			await open(p, '/ui/sources/stripe');
			await shot(p, 'source-phone.png');
			return out;
		});
		// The watch itself: a style attribute set on the page is refused by
		// the CSP, and the refusal must be seen.
		await check('csp_watch_works', p, async () => {
			const before = violations.length;
			const seen = p.waitForEvent('console', (m) => /Content Security Policy|CSP violation/i.test(m.text()));
			await p.evaluate(() => document.body.insertAdjacentHTML('beforeend', '<p style="color: red">x</p>'));
			await seen;
			expect(violations.length > before, 'a style attribute was not reported as a CSP violation');
			violations.splice(before);
		});
		await check('no_csp_violation', null, async () => {
			expectEqual(violations, [], 'CSP violations');
		});
	} finally {
		await browser.close();
	}
}

main()
	.then(() => {
		report({ done: true, checks, failed });
		process.exit(failed === 0 ? 0 : 1);
	})
	.catch((err) => {
		log(err.stack || err.message);
		report({ done: false, checks, failed, error: err.message });
		process.exit(2);
	});
