// Takes a screenshot of one workflow in the n8n editor with headless
// Chromium: signs in as a user, opens the workflow, waits until the canvas
// has rendered every node, closes whatever modal or notification n8n put on
// top, zooms to fit and saves a PNG.
//
// Run by the Go test TestScreenshotExampleWorkflow (sidecar/e2e), which
// starts n8n with the example imported and the owner set up, then checks the
// PNG. Run it by hand against any n8n with:
//
//   IC_N8N_URL=http://127.0.0.1:5678 IC_N8N_EMAIL=... IC_N8N_PASSWORD=... \
//   IC_WORKFLOW_ID=icInlineClaim001 IC_SCREENSHOT_OUT=/tmp/wf.png \
//   node n8n-node/scripts/screenshot.mjs
//
// Environment:
//   IC_N8N_URL           n8n base URL (required)
//   IC_N8N_EMAIL         user to sign in as (required)
//   IC_N8N_PASSWORD      that user's password (required; never printed)
//   IC_WORKFLOW_ID       workflow to open (required)
//   IC_SCREENSHOT_OUT    PNG to write (required)
//   IC_WORKFLOW_NODES    JSON array of node names that must be on the canvas
//                        before the screenshot (default: wait for any node)
//   IC_SCREENSHOT_DEBUG  folder for a screenshot of the page when a step fails
//   IC_SCREENSHOT_WIDTH, IC_SCREENSHOT_HEIGHT
//                        viewport in CSS pixels (default 1280 x 900)
//   IC_SCREENSHOT_SCALE  device scale factor (default 1.25): the PNG is
//                        width*scale x height*scale pixels (1600 x 1125)
//   CHROMIUM_PATH        Chromium binary (default /usr/bin/chromium)
//   IC_SCREENSHOT_TOOLS  folder whose node_modules holds playwright-core
//                        (default $IC_CACHE_DIR/screenshot-tools, IC_CACHE_DIR
//                        defaulting to $HOME/.cache/idempotent-claim); install
//                        it with n8n-node/scripts/install-playwright.sh
//
// Exit status 0 when the PNG was written, 1 (with the reason on stderr)
// otherwise.

import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

const env = process.env;

function required(name) {
	const v = env[name];
	if (!v) {
		throw new Error(`${name} is not set`);
	}
	return v;
}

function positive(name, fallback) {
	const raw = env[name];
	if (!raw) {
		return fallback;
	}
	const v = Number(raw);
	if (!(v > 0)) {
		throw new Error(`${name}=${raw} is not a positive number`);
	}
	return v;
}

// How long one step (page load, sign-in, canvas render) may take. n8n's
// editor bundle is large and the machine may be busy with other tests.
const stepTimeout = 120_000;

// Chromium switches that keep a headless run quiet and self-contained: no
// sandbox (containers, root), no GPU, no background traffic to Google.
const chromiumArgs = [
	'--no-sandbox',
	'--disable-gpu',
	'--disable-quic',
	'--no-first-run',
	'--disable-background-networking',
	'--disable-component-update',
	'--disable-sync',
];

// Overlays n8n may open over the canvas, and the buttons that close them.
const overlaySelectors = [
	'.el-overlay',
	'.el-dialog',
	'.el-drawer',
	'.el-message-box',
	'.el-notification',
	'[role="dialog"]',
];
const closeSelectors = [
	'.el-dialog__headerbtn',
	'.el-drawer__close-btn',
	'.el-message-box__headerbtn',
	'.el-notification__closeBtn',
	'[data-test-id="close-button"]',
	'button[aria-label="Close"]',
	'button[aria-label="close"]',
];

function loadPlaywright() {
	const cache = env.IC_CACHE_DIR || join(homedir(), '.cache', 'idempotent-claim');
	const tools = env.IC_SCREENSHOT_TOOLS || join(cache, 'screenshot-tools');
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

// visibleOverlays lists the overlays currently shown, as short descriptions.
async function visibleOverlays(page) {
	const out = [];
	for (const sel of overlaySelectors) {
		const all = page.locator(sel);
		const n = await all.count();
		for (let i = 0; i < n; i++) {
			const el = all.nth(i);
			if (await el.isVisible()) {
				const text = (await el.innerText().catch(() => '')).replace(/\s+/g, ' ').trim();
				out.push({ sel, el, text: text.slice(0, 80) });
			}
		}
	}
	return out;
}

// dismissOverlays closes every visible modal, drawer and notification (its
// close button, else Escape) and fails when one stays open.
async function dismissOverlays(page) {
	for (let pass = 0; pass < 5; pass++) {
		const shown = await visibleOverlays(page);
		if (shown.length === 0) {
			return;
		}
		for (const o of shown) {
			console.error(`screenshot: closing overlay ${o.sel} "${o.text}"`);
			let closed = false;
			for (const c of closeSelectors) {
				const btn = o.el.locator(c).first();
				if ((await btn.count()) > 0 && (await btn.isVisible())) {
					await btn.click();
					closed = true;
					break;
				}
			}
			if (!closed) {
				await page.keyboard.press('Escape');
			}
			await o.el.waitFor({ state: 'hidden', timeout: 10_000 }).catch(() => {});
		}
	}
	const left = await visibleOverlays(page);
	if (left.length > 0) {
		throw new Error(`overlays still open: ${left.map((o) => `${o.sel} "${o.text}"`).join('; ')}`);
	}
}

// waitStableViewport resolves once the canvas transform (pan and zoom) has
// not changed for 30 consecutive animation frames, i.e. the zoom-to-fit
// animation has finished.
async function waitStableViewport(page) {
	return page.evaluate(
		() =>
			new Promise((resolve) => {
				const pane = document.querySelector('.vue-flow__transformationpane');
				let last = null;
				let same = 0;
				const tick = () => {
					const t = pane.style.transform;
					if (t === last) {
						same++;
						if (same >= 30) {
							resolve(t);
							return;
						}
					} else {
						last = t;
						same = 0;
					}
					requestAnimationFrame(tick);
				};
				requestAnimationFrame(tick);
			}),
	);
}

async function main() {
	const base = required('IC_N8N_URL').replace(/\/+$/, '');
	const email = required('IC_N8N_EMAIL');
	const password = required('IC_N8N_PASSWORD');
	const workflowId = required('IC_WORKFLOW_ID');
	const out = required('IC_SCREENSHOT_OUT');
	const nodes = env.IC_WORKFLOW_NODES ? JSON.parse(env.IC_WORKFLOW_NODES) : [];
	// The default viewport is narrower than 16:9: the example is about as
	// tall as it is wide, so zoom to fit is bound by the height, and a wide
	// viewport only adds empty canvas at the sides. The scale brings the PNG
	// to 1600 pixels wide with text still sharp.
	const width = positive('IC_SCREENSHOT_WIDTH', 1280);
	const height = positive('IC_SCREENSHOT_HEIGHT', 900);
	const scale = positive('IC_SCREENSHOT_SCALE', 1.25);
	const executablePath = env.CHROMIUM_PATH || '/usr/bin/chromium';

	const { chromium } = loadPlaywright();
	const browser = await chromium.launch({ executablePath, headless: true, args: chromiumArgs });
	// A fresh context is a fresh profile: no cookies, no local storage.
	const context = await browser.newContext({
		viewport: { width, height },
		deviceScaleFactor: scale,
		locale: 'en-US',
		timezoneId: 'UTC',
		colorScheme: 'light',
		reducedMotion: 'reduce',
	});
	const page = await context.newPage();
	page.setDefaultTimeout(stepTimeout);
	let step = 'start';
	try {
		step = 'sign in';
		await page.goto(`${base}/signin`);
		await page.locator('input[name="emailOrLdapLoginId"]').fill(email);
		await page.locator('input[name="password"]').fill(password);
		await page.locator('[data-test-id="form-submit-button"]').click();
		await page.waitForURL((u) => !u.pathname.startsWith('/signin'));

		step = 'open the workflow';
		await page.goto(`${base}/workflow/${encodeURIComponent(workflowId)}`);
		if (new URL(page.url()).pathname.startsWith('/signin')) {
			throw new Error('redirected to the sign-in page: the session was not accepted');
		}

		step = 'render the canvas';
		const canvasNodes = page.locator('[data-test-id="canvas-node"]');
		await canvasNodes.first().waitFor();
		for (const name of nodes) {
			await page
				.locator(`[data-test-id="canvas-node"][data-node-name=${JSON.stringify(name)}]`)
				.waitFor();
		}
		await page.evaluate(() => document.fonts.ready);
		await page.waitForFunction(() =>
			[...document.querySelectorAll('.vue-flow img')].every(
				(img) => img.complete && img.naturalWidth > 0,
			),
		);

		step = 'dismiss modals';
		await dismissOverlays(page);

		step = 'zoom to fit';
		await page.locator('[data-test-id="zoom-to-fit"]').click();
		// Park the pointer on empty canvas, just inside its left edge, so no
		// tooltip or node toolbar shows.
		const box = await page.locator('[data-test-id="canvas-wrapper"]').boundingBox();
		await page.mouse.move(box.x + 8, box.y + box.height / 2);
		await waitStableViewport(page);
		// The floating "Execute workflow" button sits over the bottom row of
		// nodes; hide it (the screenshot shows the workflow, not the run
		// controls).
		await page.locator('[data-test-id="execute-workflow-button"]').evaluateAll((buttons) => {
			for (const b of buttons) {
				const wrapper = b.closest('[data-test-id="canvas-wrapper"]');
				if (!wrapper) {
					continue;
				}
				// The button's group: its ancestor that is a child of the wrapper.
				let el = b;
				while (el.parentElement !== wrapper) {
					el = el.parentElement;
				}
				el.style.visibility = 'hidden';
			}
		});
		await page.locator('[data-test-id="canvas-minimap"]').waitFor({ state: 'hidden' });
		// No tooltip or popover left open by the clicks above.
		await page.waitForFunction(
			() =>
				![...document.querySelectorAll('.el-popper')].some((el) => {
					const style = getComputedStyle(el);
					const rect = el.getBoundingClientRect();
					return (
						style.display !== 'none' &&
						style.visibility !== 'hidden' &&
						Number(style.opacity) > 0 &&
						rect.width > 0 &&
						rect.height > 0
					);
				}),
		);
		await dismissOverlays(page);

		step = 'screenshot';
		await page.screenshot({ path: out, animations: 'disabled' });
		const shown = await canvasNodes.count();
		console.error(
			`screenshot: wrote ${out} (${width}x${height} at scale ${scale}, ${shown} nodes on the canvas)`,
		);
	} catch (err) {
		if (env.IC_SCREENSHOT_DEBUG) {
			mkdirSync(env.IC_SCREENSHOT_DEBUG, { recursive: true });
			const dbg = join(env.IC_SCREENSHOT_DEBUG, 'screenshot-failed.png');
			await page.screenshot({ path: dbg }).catch(() => {});
			console.error(`screenshot: page at failure saved to ${dbg}`);
		}
		throw new Error(`${step}: ${err.message}`);
	} finally {
		await browser.close();
	}
}

main().catch((err) => {
	console.error(`screenshot: ${err.message}`);
	process.exit(1);
});
