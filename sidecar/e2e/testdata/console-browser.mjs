// Drives claimd's web console (/ui) in headless Chromium with playwright-core
// and checks what a user sees and does: sign-in, a wrong key refused, every
// view, every action with its effect on the record, tenant isolation, CSRF
// refusal, sign-out and a phone-width render. Optionally writes the
// screenshots of sidecar/docs/operations.md#console-screenshots.
//
// Run by the Go test TestConsoleBrowser (sidecar/e2e/console_browser_test.go),
// which starts claimd on a fresh database, seeds records through the API,
// writes the seed file, runs this script and then checks the effects in
// PostgreSQL.
//
// Environment:
//   IC_CONSOLE_URL        claimd's base URL, http://127.0.0.1:PORT (required)
//   IC_CONSOLE_SEED       JSON file the Go test wrote: keys, tenants, records,
//                         expectations (required; see consoleSeed in the test)
//   IC_CONSOLE_SCREENSHOTS
//                         folder to write the documents' screenshots to (optional)
//   IC_CONSOLE_DEBUG      folder for a screenshot of the page when a check
//                         fails (optional)
//   CHROMIUM_PATH         Chromium binary (default /usr/bin/chromium)
//   IC_SCREENSHOT_TOOLS   folder whose node_modules holds playwright-core
//                         (n8n-node/scripts/install-playwright.sh prints it)
//
// Output: one JSON object per line on stdout, one per check:
//   {"check":"<name>","ok":true,"data":{...}}
//   {"check":"<name>","ok":false,"error":"<what differed>"}
// and {"done":true,"checks":N,"failed":M} last. Progress goes to stderr.
// Exit status 0 when every check passed, 1 otherwise (2: could not start).
//
// No fixed sleeps: every step waits for the navigation it causes (the page's
// load event and its document response) or for an element.

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

function loadPlaywright() {
	const tools = required('IC_SCREENSHOT_TOOLS');
	const require = createRequire(join(tools, 'package.json'));
	try {
		return require('playwright-core');
	} catch (err) {
		throw new Error(
			`playwright-core not found under ${tools}/node_modules (${err.code || err.message}); ` +
				'install it with n8n-node/scripts/install-playwright.sh',
		);
	}
}

// Chromium switches for a quiet, self-contained headless run (see
// n8n-node/scripts/screenshot.mjs).
const chromiumArgs = [
	'--no-sandbox',
	'--disable-gpu',
	'--disable-quic',
	'--no-first-run',
	'--disable-background-networking',
	'--disable-component-update',
	'--disable-sync',
];

// One step (a navigation, an element) may take this long on a busy machine.
const stepTimeout = 30_000;

const base = required('IC_CONSOLE_URL').replace(/\/+$/, '');
const seed = JSON.parse(readFileSync(required('IC_CONSOLE_SEED'), 'utf8'));
const shots = env.IC_CONSOLE_SCREENSHOTS || '';
const debugDir = env.IC_CONSOLE_DEBUG || '';

let checks = 0;
let failed = 0;

function report(obj) {
	process.stdout.write(JSON.stringify(obj) + '\n');
}

function log(msg) {
	process.stderr.write(`console-browser: ${msg}\n`);
}

class CheckError extends Error {}

function expect(cond, msg) {
	if (!cond) {
		throw new CheckError(msg);
	}
}

// canonical is JSON with object keys sorted: objects compare by content.
function canonical(v) {
	return JSON.stringify(v, (_, x) =>
		x && typeof x === 'object' && !Array.isArray(x)
			? Object.fromEntries(Object.keys(x).sort().map((k) => [k, x[k]]))
			: x,
	);
}

function expectEqual(got, want, what) {
	const g = canonical(got);
	const w = canonical(want);
	expect(g === w, `${what}: got ${g}, want ${w}`);
}

function sorted(a) {
	return [...a].sort();
}

// Fatal stops the run: a check the later ones cannot do without failed.
class Fatal extends Error {}

// check runs one named check on page; a failure is reported (with a debug
// screenshot) and the run goes on with the next check, unless the check is
// fatal (sign-in: every later check needs the session).
async function check(name, page, fn, { fatal = false } = {}) {
	checks++;
	const began = Date.now();
	try {
		const data = await fn();
		report({ check: name, ok: true, ms: Date.now() - began, ...(data ? { data } : {}) });
		log(`ok   ${name}`);
	} catch (err) {
		failed++;
		// When the page is the console's error page, say what it says.
		let shown = '';
		if (page) {
			const e = page.locator('[data-testid="error"]');
			if ((await e.count().catch(() => 0)) > 0) {
				const code = await e.getAttribute('data-code').catch(() => '');
				const msg = await page.locator('[data-testid="error-message"]').innerText().catch(() => '');
				shown = ` (the page shows error ${code}: ${msg.trim()})`;
			}
		}
		report({ check: name, ok: false, ms: Date.now() - began, error: err.message + shown, url: page ? page.url() : '' });
		log(`FAIL ${name}: ${err.message}${shown}`);
		if (debugDir && page) {
			mkdirSync(debugDir, { recursive: true });
			await page.screenshot({ path: join(debugDir, `${name}.png`), fullPage: true }).catch(() => {});
		}
		if (fatal) {
			throw new Fatal(`${name} failed: the checks after it need it`);
		}
	}
}

// isDocument matches the response of the page's own final document (not a
// redirect, not the stylesheet).
function isDocument(page) {
	return (r) =>
		r.request().isNavigationRequest() &&
		r.frame() === page.mainFrame() &&
		!(r.status() >= 300 && r.status() < 400);
}

// navigate runs act (a click that submits a form or follows a link) and
// resolves once the document it leads to has loaded, with that document's
// HTTP status.
async function navigate(page, act) {
	const done = Promise.all([page.waitForResponse(isDocument(page)), page.waitForEvent('load')]);
	// When act throws, done is never awaited: keep its timeout from
	// becoming an unhandled rejection.
	done.catch(() => {});
	await act();
	const [resp] = await done;
	return resp.status();
}

async function open(page, path) {
	const resp = await page.goto(base + path);
	return resp.status();
}

function pathOf(page) {
	const u = new URL(page.url());
	return u.pathname + u.search;
}

async function text(page, selector) {
	return (await page.locator(selector).innerText()).replace(/\s+/g, ' ').trim();
}

async function testid(page, id) {
	return text(page, `[data-testid="${id}"]`);
}

// errorPage returns the error page's code, status, field and message.
async function errorPage(page) {
	const e = page.locator('[data-testid="error"]');
	await e.waitFor();
	const field = page.locator('[data-testid="error-field"]');
	return {
		code: await e.getAttribute('data-code'),
		status: Number(await e.getAttribute('data-status')),
		field: (await field.count()) > 0 ? (await field.innerText()).trim() : '',
		message: (await page.locator('[data-testid="error-message"]').innerText()).trim(),
	};
}

async function rowIDs(page) {
	return page.locator('[data-testid="claim-row"]').evaluateAll((rows) => rows.map((r) => r.dataset.claimId));
}

// timeline returns the record page's delivery log entries.
async function timeline(page) {
	return page.locator('[data-testid="delivery"]').evaluateAll((items) =>
		items.map((li) => {
			const t = (sel) => {
				const el = li.querySelector(`[data-testid="${sel}"]`);
				return el ? el.textContent.replace(/\s+/g, ' ').trim() : '';
			};
			return { outcome: li.dataset.outcome, actor: t('delivery-actor'), detail: t('delivery-detail') };
		}),
	);
}

async function sessionCookie(context) {
	return (await context.cookies(base + '/ui/')).find((c) => c.name === 'claimd_session');
}

async function signIn(page, key) {
	await open(page, '/ui/signin');
	await page.locator('input[name="api_key"]').fill(key);
	return navigate(page, () => page.getByRole('button', { name: 'Sign in' }).click());
}

// filterList opens the list, sets the filter form's fields and submits it.
async function filterList(page, fields) {
	await open(page, '/ui/claims');
	const form = page.locator('form[action="/ui/claims"]');
	for (const [name, value] of Object.entries(fields)) {
		const el = form.locator(`[name="${name}"]`);
		if ((await el.evaluate((e) => e.tagName)) === 'SELECT') {
			await el.selectOption(value);
		} else {
			await el.fill(value);
		}
	}
	return navigate(page, () => form.getByRole('button', { name: 'Filter' }).click());
}

// act opens a record's confirmation page for action, fills the form and
// submits it; it returns the resulting document's status.
async function act(page, id, action, { outcome, resultRef, note, confirm = true, before } = {}) {
	expectEqual(await open(page, `/ui/claims/${id}`), 200, 'record page status');
	const link = page.locator(`a[href$="/claims/${id}/${action}"]`);
	expectEqual(await navigate(page, () => link.click()), 200, `${action} confirmation page status`);
	const form = page.locator('form[method="post"][action$="/' + action + '"]');
	await form.waitFor();
	if (outcome) {
		await form.locator(`input[name="outcome"][value="${outcome}"]`).check();
	}
	if (resultRef !== undefined) {
		await form.locator('[name="result_ref"]').fill(resultRef);
	}
	if (note !== undefined) {
		await form.locator('[name="note"]').fill(note);
	}
	if (confirm) {
		await form.locator('input[name="confirm"]').check();
	}
	if (before) {
		await before(form);
	}
	return navigate(page, () => form.locator('button[type="submit"]').click());
}

// recordAfter checks the record page an action redirected to: its state,
// the flash, and the delivery-log entry the action wrote (the last one of
// outcome, with the actor and the note).
async function recordAfter(page, id, { state, outcome, note, action }) {
	expectEqual(pathOf(page), `/ui/claims/${id}?done=${action}`, 'page after the action');
	await page.locator('[data-testid="flash"]').waitFor();
	if (state) {
		expectEqual(await testid(page, 'record-state'), state, 'state after the action');
	}
	const entries = (await timeline(page)).filter((e) => e.outcome === outcome);
	expect(entries.length === 1, `want one ${outcome} entry in the delivery log, got ${entries.length}`);
	expectEqual(entries[0].actor, `by ${seed.actorA}`, `${outcome} entry's actor`);
	expectEqual(entries[0].detail, note, `${outcome} entry's note`);
	return entries[0];
}

// noHorizontalScroll fails when the page is wider than the viewport.
async function noHorizontalScroll(page, what) {
	const { scroll, width } = await page.evaluate(() => ({
		scroll: document.documentElement.scrollWidth,
		width: window.innerWidth,
	}));
	expect(scroll <= width, `${what} scrolls sideways at ${width} px: ${scroll} px wide`);
	return { scroll, width };
}

async function shot(page, name, opts = {}) {
	if (!shots) {
		return;
	}
	mkdirSync(shots, { recursive: true });
	await page.evaluate(() => document.fonts.ready);
	await page.screenshot({ path: join(shots, name), animations: 'disabled', ...opts });
	log(`wrote ${name}`);
}

async function main() {
	const { chromium } = loadPlaywright();
	const browser = await chromium.launch({
		executablePath: env.CHROMIUM_PATH || '/usr/bin/chromium',
		headless: true,
		args: chromiumArgs,
	});
	const contextOptions = {
		viewport: { width: 1280, height: 800 },
		deviceScaleFactor: 1,
		locale: 'en-US',
		timezoneId: 'UTC',
		colorScheme: 'light',
		reducedMotion: 'reduce',
	};
	const r = seed.records;
	try {
		// --- tenant A, desktop ---
		const ctxA = await browser.newContext(contextOptions);
		const a = await ctxA.newPage();
		a.setDefaultTimeout(stepTimeout);

		await check('signed_out_redirects_to_signin', a, async () => {
			expectEqual(await open(a, '/ui/'), 200, 'status');
			expectEqual(pathOf(a), '/ui/signin', 'page');
			await a.locator('input[name="api_key"]').waitFor();
		}, { fatal: true });

		await check('wrong_key_refused', a, async () => {
			const status = await signIn(a, seed.wrongKey);
			expectEqual(status, 401, 'status');
			const e = await errorPage(a);
			expectEqual(e.code, 'unauthorized', 'error code');
			expect(!(await a.content()).includes(seed.wrongKey), 'the error page quotes the key');
			expect(!(await sessionCookie(ctxA)), 'a session cookie was set');
			return e;
		});

		await check('sign_in', a, async () => {
			expectEqual(await signIn(a, seed.keyA), 200, 'status');
			expectEqual(pathOf(a), '/ui/', 'page after sign-in');
			expectEqual(await text(a, '#whoami-tenant'), seed.tenantA, 'tenant shown');
			expectEqual(await text(a, '#whoami-key'), seed.actorA, 'key prefix shown');
			const c = await sessionCookie(ctxA);
			expect(c, 'no session cookie');
			expect(c.httpOnly, 'session cookie is not HttpOnly');
			expectEqual(c.sameSite, 'Strict', 'session cookie SameSite');
			expectEqual(c.path, '/ui', 'session cookie path');
			expect(!(await a.content()).includes(seed.keyA), 'the page shows the API key');
		}, { fatal: true });

		await check('overview', a, async () => {
			expectEqual(await open(a, '/ui/'), 200, 'status');
			const rows = await a.locator('[data-testid="overview-row"]').evaluateAll((trs) =>
				trs.map((tr) => {
					const cell = (id) => tr.querySelector(`[data-testid="${id}"]`).textContent.trim();
					const counts = {};
					for (const td of tr.querySelectorAll('[data-testid^="count-"]')) {
						counts[td.dataset.testid.slice('count-'.length)] = Number(td.textContent.trim());
					}
					return {
						source: tr.dataset.source,
						counts,
						conflicts: cell('conflicts'),
						oldestReceived: cell('oldest-received'),
						oldestProcessing: cell('oldest-processing'),
						dispatchDeadLettered: Number(cell('dispatch-dead-lettered')),
					};
				}),
			);
			const bySource = Object.fromEntries(rows.map((row) => [row.source, row]));
			expectEqual(sorted(Object.keys(bySource)), sorted(Object.keys(seed.overview)), 'sources shown');
			for (const [source, want] of Object.entries(seed.overview)) {
				const got = bySource[source];
				expectEqual(got.counts, want.counts, `${source} counts by state`);
				expectEqual(got.conflicts, want.conflicts, `${source} conflicts`);
				expectEqual(got.dispatchDeadLettered, want.dispatchDeadLettered, `${source} dispatch dead letters`);
				expectEqual(got.oldestReceived !== '—', want.hasReceived, `${source} oldest received shown (${got.oldestReceived})`);
				expectEqual(got.oldestProcessing !== '—', want.hasProcessing, `${source} oldest processing shown (${got.oldestProcessing})`);
			}
			await shot(a, 'overview.png');
			return { rows };
		});

		await check('overview_count_links_to_list', a, async () => {
			await open(a, '/ui/');
			const link = a.locator('[data-testid="overview-row"][data-source="stripe"] [data-testid="count-unknown"] a');
			expectEqual(await navigate(a, () => link.click()), 200, 'status');
			const u = new URL(a.url());
			expectEqual([u.pathname, u.searchParams.get('state'), u.searchParams.get('source')], ['/ui/claims', 'unknown', 'stripe'], 'list URL');
			expectEqual(sorted(await rowIDs(a)), sorted([r.unknown1, r.unknown2]), 'records listed');
		});

		await check('list_all_newest_first', a, async () => {
			expectEqual(await open(a, '/ui/claims'), 200, 'status');
			const ids = await rowIDs(a);
			expectEqual(sorted(ids), sorted(seed.allA), 'records of tenant A');
			await shot(a, 'list.png');
			return { rows: ids.length };
		});

		await check('list_filter_state', a, async () => {
			expectEqual(await filterList(a, { state: 'unknown' }), 200, 'status');
			expectEqual(new URL(a.url()).searchParams.get('state'), 'unknown', 'state in the URL');
			expectEqual(sorted(await rowIDs(a)), sorted([r.unknown1, r.unknown2]), 'unknown records');
			expectEqual(await a.locator('select[name="state"]').inputValue(), 'unknown', 'the form keeps the filter');
		});

		await check('list_filter_source', a, async () => {
			expectEqual(await filterList(a, { source: 'shopify' }), 200, 'status');
			expectEqual(sorted(await rowIDs(a)), sorted(seed.shopify), 'shopify records');
		});

		await check('list_filter_event_id_prefix', a, async () => {
			expectEqual(await filterList(a, { event_id_prefix: 'evt_unknown_' }), 200, 'status');
			expectEqual(sorted(await rowIDs(a)), sorted([r.unknown1, r.unknown2]), 'records by prefix');
			// Compared byte for byte: % is no wildcard.
			expectEqual(await filterList(a, { event_id_prefix: 'evt%' }), 200, 'status');
			await a.locator('[data-testid="claims-empty"]').waitFor();
		});

		await check('list_filter_time_range', a, async () => {
			const at = (ms) => new Date(Date.now() + ms).toISOString().slice(0, 16);
			expectEqual(await filterList(a, { time_field: 'created', from: at(-3600_000), to: at(3600_000) }), 200, 'status');
			expectEqual(sorted(await rowIDs(a)), sorted(seed.allA), 'records first seen within the last hour');
			expectEqual(await filterList(a, { time_field: 'updated', from: at(3600_000) }), 200, 'status');
			await a.locator('[data-testid="claims-empty"]').waitFor();
			expectEqual(await filterList(a, { to: at(-3600_000) }), 200, 'status');
			await a.locator('[data-testid="claims-empty"]').waitFor();
		});

		await check('list_keyset_paging', a, async () => {
			expectEqual(await open(a, '/ui/claims?source=shopify&limit=3'), 200, 'status');
			const pages = [];
			for (;;) {
				pages.push(await rowIDs(a));
				const next = a.locator('[data-testid="next-page"]');
				if ((await next.count()) === 0) {
					break;
				}
				expect(pages.length < 10, 'more than 10 pages');
				expectEqual(await navigate(a, () => next.click()), 200, 'next page status');
			}
			const all = pages.flat();
			expectEqual(pages.map((p) => p.length), [3, 3, 1], 'page sizes');
			expectEqual(new Set(all).size, all.length, 'a record on two pages');
			expectEqual(sorted(all), sorted(seed.shopify), 'records over all pages');
			return { pages: pages.length };
		});

		await check('record_page', a, async () => {
			expectEqual(await open(a, `/ui/claims/${r.completed}`), 200, 'status');
			const want = seed.completed;
			for (const [field, value] of Object.entries(want.fields)) {
				expectEqual(await testid(a, `field-${field}`), value, `field ${field}`);
			}
			const log = await timeline(a);
			expectEqual(log.map((e) => e.outcome), want.outcomes, 'delivery log outcomes');
			await a.locator('#actions-none').waitFor();
			expect(!(await a.content()).includes(seed.tokens.completed), 'the page shows the claim token');
			return { outcomes: log.map((e) => e.outcome) };
		});

		await check('record_page_open_states', a, async () => {
			expectEqual(await open(a, `/ui/claims/${r.unknown1}`), 200, 'status');
			expectEqual(await testid(a, 'record-state'), 'unknown', 'state');
			expectEqual(await testid(a, 'field-last_error'), seed.unknownError, 'last error');
			await a.locator('[data-testid="action-resolve"]').waitFor();
			expectEqual(await a.locator('[data-testid="action-release"]').count(), 0, 'release offered for unknown');

			expectEqual(await open(a, `/ui/claims/${r.processing1}`), 200, 'status');
			expectEqual(await testid(a, 'record-state'), 'processing', 'state');
			expect((await testid(a, 'field-lease_until')) !== '—', 'no lease end shown for processing');
			await a.locator('[data-testid="action-release"]').waitFor();

			expectEqual(await open(a, `/ui/claims/${r.ingested}`), 200, 'status');
			expectEqual(await testid(a, 'dispatch-state'), 'dead_lettered', 'dispatch state');
			expectEqual(await testid(a, 'dispatch-last-status'), 'HTTP 400', 'dispatch last status');
			await a.locator('[data-testid="action-replay"]').waitFor();
		});

		await check('action_not_open_for_state', a, async () => {
			expectEqual(await open(a, `/ui/claims/${r.completed}/resolve`), 409, 'status');
			expectEqual((await errorPage(a)).code, 'invalid_state', 'error code');
		});

		await check('action_needs_confirmation_and_note', a, async () => {
			// The browser enforces the required fields; the server must too.
			const dropRequired = (form) =>
				form.evaluate((f) => f.querySelectorAll('[required]').forEach((el) => el.removeAttribute('required')));
			let status = await act(a, r.unknown1, 'resolve', { outcome: 'completed', note: 'no box', confirm: false, before: dropRequired });
			expectEqual(status, 422, 'status without the box');
			expectEqual((await errorPage(a)).field, 'confirm', 'field named');
			status = await act(a, r.unknown1, 'resolve', { outcome: 'completed', note: '', before: dropRequired });
			expectEqual(status, 422, 'status without a note');
			expectEqual((await errorPage(a)).field, 'note', 'field named');
			await open(a, `/ui/claims/${r.unknown1}`);
			expectEqual(await testid(a, 'record-state'), 'unknown', 'state after the refused actions');
		});

		await check('action_resolve_unknown_completed', a, async () => {
			const note = seed.notes.resolveCompleted;
			expectEqual(await open(a, `/ui/claims/${r.unknown1}`), 200, 'record page');
			await navigate(a, () => a.locator('[data-testid="action-resolve"]').click());
			const outcomes = await a.locator('input[name="outcome"]').evaluateAll((els) => els.map((e) => e.value));
			expectEqual(outcomes, ['completed', 'retry', 'failed'], 'outcomes offered for unknown');
			await a.locator('input[name="outcome"][value="completed"]').check();
			await a.locator('[name="result_ref"]').fill(seed.resolvedRef);
			await a.locator('[name="note"]').fill(note);
			await a.locator('input[name="confirm"]').check();
			await shot(a, 'confirm.png');
			expectEqual(await navigate(a, () => a.getByRole('button', { name: 'Resolve' }).click()), 200, 'status');
			await recordAfter(a, r.unknown1, { state: 'completed', outcome: 'resolved_completed', note, action: 'resolve' });
			expectEqual(await testid(a, 'field-result_ref'), seed.resolvedRef, 'result ref after resolve');
			// The record page of sidecar/docs/operations.md#console-screenshots:
			// the flash, the fields and a delivery log that ends with the
			// operator's entry.
			await shot(a, 'record.png', { fullPage: true });
		});

		await check('action_resolve_unknown_failed', a, async () => {
			const note = seed.notes.resolveFailed;
			expectEqual(await act(a, r.unknown2, 'resolve', { outcome: 'failed', note }), 200, 'status');
			await recordAfter(a, r.unknown2, { state: 'dead_lettered', outcome: 'resolved_failed', note, action: 'resolve' });
		});

		await check('action_resolve_dead_lettered_completed', a, async () => {
			const note = seed.notes.resolveDead;
			await open(a, `/ui/claims/${r.dead1}/resolve`);
			const outcomes = await a.locator('input[name="outcome"]').evaluateAll((els) => els.map((e) => e.value));
			expectEqual(outcomes, ['completed', 'retry'], 'outcomes offered for dead_lettered');
			expectEqual(await act(a, r.dead1, 'resolve', { outcome: 'completed', resultRef: seed.deadRef, note }), 200, 'status');
			await recordAfter(a, r.dead1, { state: 'completed', outcome: 'resolved_completed', note, action: 'resolve' });
			expectEqual(await testid(a, 'field-result_ref'), seed.deadRef, 'result ref after resolve');
		});

		await check('action_release', a, async () => {
			const note = seed.notes.release;
			expectEqual(await act(a, r.processing1, 'release', { note }), 200, 'status');
			await recordAfter(a, r.processing1, { state: 'unknown', outcome: 'released', note, action: 'release' });
			await a.locator('[data-testid="action-resolve"]').waitFor();
		});

		await check('action_replay', a, async () => {
			const note = seed.notes.replay;
			expectEqual(await act(a, r.ingested, 'replay', { note }), 200, 'status');
			await recordAfter(a, r.ingested, { outcome: 'dispatch_replayed', note, action: 'replay' });
			const st = await testid(a, 'dispatch-state');
			expect(st === 'pending' || st === 'dispatched', `dispatch state after replay: ${st}`);
			expectEqual(await a.locator('[data-testid="action-replay"]').count(), 0, 'replay still offered');
			return { dispatchState: st };
		});

		await check('csrf_wrong_token_refused', a, async () => {
			const status = await act(a, r.processing2, 'release', {
				note: 'forged',
				before: (form) => form.locator('input[name="csrf"]').evaluate((el) => (el.value = 'x' + el.value.slice(1))),
			});
			expectEqual(status, 403, 'status');
			expectEqual((await errorPage(a)).code, 'forbidden', 'error code');
		});

		// A page of another origin posts the release form with the session's
		// real token (as if it had leaked): the browser's Sec-Fetch-Site and
		// Origin give it away. The pages are served by route interception, so
		// no server runs for them.
		const csrfToken = await (async () => {
			await open(a, '/ui/');
			return a.locator('#signout-form input[name="csrf"]').inputValue();
		})();
		const forged = (origin) => `<!doctype html><title>forged</title>
			<form method="post" action="${base}/ui/claims/${r.processing2}/release">
			<input name="csrf" value="${csrfToken}"><input name="confirm" value="yes">
			<input name="note" value="forged from ${origin}"><button type="submit">Win a prize</button></form>`;
		for (const [name, origin] of [
			['csrf_same_site_other_origin_refused', `http://127.0.0.1:${seed.otherPort}`],
			['csrf_cross_site_refused', 'http://attacker.invalid'],
		]) {
			await check(name, a, async () => {
				await ctxA.route(`${origin}/**`, (route) =>
					route.fulfill({ status: 200, contentType: 'text/html', body: forged(origin) }),
				);
				await a.goto(`${origin}/prize`);
				const status = await navigate(a, () => a.getByRole('button', { name: 'Win a prize' }).click());
				// Same site: the session cookie goes along and the origin
				// check refuses (403); cross-site: SameSite=Strict keeps the
				// cookie back, so there is no session at all (401) either way
				// nothing is done.
				expect(status === 403 || status === 401, `status ${status}, want 403 or 401`);
				const code = (await errorPage(a)).code;
				await open(a, `/ui/claims/${r.processing2}`);
				expectEqual(await testid(a, 'record-state'), 'processing', 'state after the forged post');
				return { status, code };
			});
		}

		// --- tenant B ---
		const ctxB = await browser.newContext(contextOptions);
		const b = await ctxB.newPage();
		b.setDefaultTimeout(stepTimeout);

		await check('tenant_isolation', b, async () => {
			expectEqual(await signIn(b, seed.keyB), 200, 'sign-in status');
			expectEqual(await text(b, '#whoami-tenant'), seed.tenantB, 'tenant shown');
			const sources = await b.locator('[data-testid="overview-row"]').evaluateAll((trs) => trs.map((tr) => tr.dataset.source));
			expectEqual(sources, ['stripe'], 'B sees its own sources only');
			expectEqual(
				await b.locator('[data-testid="overview-row"][data-source="stripe"] [data-testid="count-unknown"]').innerText(),
				'0',
				'B counts A records',
			);
			await open(b, '/ui/claims');
			expectEqual(await rowIDs(b), [r.b1], 'B lists its own records only');
			for (const [what, path] of [
				['record page', `/ui/claims/${r.unknown1}`],
				['confirmation page', `/ui/claims/${r.processing2}/release`],
			]) {
				expectEqual(await open(b, path), 404, `A's ${what} opened by B: status`);
				expectEqual((await errorPage(b)).code, 'not_found', `A's ${what} opened by B: code`);
				expect(!(await b.content()).includes('evt_'), `A's ${what} opened by B shows an event id`);
			}
			// B's own, valid form, pointed at A's record.
			const status = await act(b, r.b1, 'release', {
				note: 'B releases A',
				before: (form) =>
					form.evaluate((f, id) => (f.action = f.action.replace(/claims\/[^/]+\/release$/, `claims/${id}/release`)), r.processing2),
			});
			expectEqual(status, 404, "B's release of A's record: status");
		});

		// --- phone width ---
		const phone = await browser.newContext({
			...contextOptions,
			viewport: { width: 390, height: 844 },
			isMobile: true,
			hasTouch: true,
		});
		const p = await phone.newPage();
		p.setDefaultTimeout(stepTimeout);
		await check('phone_width', p, async () => {
			expectEqual(await signIn(p, seed.keyA), 200, 'sign-in status');
			const out = {};
			out.overview = await noHorizontalScroll(p, 'overview');
			await p.locator('[data-testid="overview-row"]').first().waitFor();
			await shot(p, 'phone.png');
			await open(p, '/ui/claims');
			out.list = await noHorizontalScroll(p, 'list');
			await open(p, `/ui/claims/${r.completed}`);
			out.record = await noHorizontalScroll(p, 'record page');
			await open(p, `/ui/claims/${r.processing2}/release`);
			out.confirm = await noHorizontalScroll(p, 'confirmation page');
			await navigate(p, () => p.getByRole('button', { name: 'Sign out' }).click());
			return out;
		});

		await check('sign_out', a, async () => {
			await open(a, '/ui/');
			expectEqual(await navigate(a, () => a.getByRole('button', { name: 'Sign out' }).click()), 200, 'status');
			expectEqual(pathOf(a), '/ui/signin', 'page after sign-out');
			expect(!(await sessionCookie(ctxA)), 'the session cookie is still set');
			expectEqual(await open(a, `/ui/claims/${r.completed}`), 200, 'status');
			expectEqual(pathOf(a), '/ui/signin', 'a record after sign-out');
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
