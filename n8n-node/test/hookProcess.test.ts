/**
 * The settle hook as n8n runs it (hooks/lib/hook.js): its settings, which
 * process settles what, the queue-mode crashed-worker path, and that it
 * never throws into n8n. n8n's services and claimd are stand-ins here;
 * hookSettler.test.ts sends to a real HTTP server.
 */
import { describe, expect, it } from 'vitest';

import { claimNode, item, otherNode, task, trigger, won } from './hookFixtures';
import {
	config as configLib,
	hook as lib,
	memoryLogger,
	type Hook,
	type N8nServices,
} from './hookModules';

type FetchFunction = (url: string | URL | Request, init?: RequestInit) => Promise<Response>;

const ENV = { IDEMPOTENT_CLAIM_URL: 'http://claimd:8080', IDEMPOTENT_CLAIM_API_KEY: 'ic_key' };

interface Call {
	url: string;
	body: Record<string, unknown>;
}

/** claimd as a fetch: every settle lands; fail/execution fails nothing more. */
function fakeClaimd() {
	const calls: Call[] = [];
	const fetch = async (url: string | URL | Request, init?: RequestInit) => {
		const body = JSON.parse(String(init?.body)) as Record<string, unknown>;
		calls.push({ url: String(url), body });
		if (String(url).endsWith('/v1/claims/fail/execution')) {
			return new Response(JSON.stringify({ claims: [] }), { status: 200 });
		}
		const results = (body.claims as Array<{ claim_id: string }>).map((c) => ({
			claim_id: c.claim_id,
			state: 'completed',
		}));
		return new Response(JSON.stringify({ results }), { status: 200 });
	};
	return { calls, fetch: fetch as FetchFunction };
}

function fakeN8n(
	mode: string,
	instanceType: string,
	stored: Record<string, unknown> = {},
): N8nServices & { stalled: Array<(event: { executionId: string }) => void>; reads: string[] } {
	const stalled: Array<(event: { executionId: string }) => void> = [];
	const reads: string[] = [];
	return {
		available: true,
		stalled,
		reads,
		executionsMode: () => mode,
		instanceType: () => instanceType,
		onJobStalled: (listener) => {
			stalled.push(listener);
		},
		readExecution: async (id: string) => {
			reads.push(id);
			return stored[id];
		},
	};
}

function build(n8n: N8nServices, env: Record<string, string> = {}) {
	const claimd = fakeClaimd();
	const logger = memoryLogger();
	const built = lib.createHook({
		env: { ...ENV, ...env },
		n8n,
		logger,
		fetch: claimd.fetch,
		settlerOptions: { baseDelayMs: 5, maxDelayMs: 10 },
	});
	return { ...built, claimd, logger };
}

async function end(h: Hook, run: unknown, workflow: unknown, executionId: string) {
	await h.hooks.workflow.postExecute[0](run, workflow, executionId);
	await h.idle?.();
}

const workflow = {
	id: 'wf',
	name: 'Stripe',
	nodes: [trigger(), otherNode('Send', 'n8n-nodes-base.httpRequest')],
	connections: {},
};

const run = (status: string, extra: Record<string, unknown> = {}) => ({
	mode: 'webhook',
	status,
	finished: status === 'success',
	startedAt: new Date(),
	data: {
		resultData: {
			runData: {
				'Stripe Trigger': [task([item(won(1, { on_error: 'retryable' })), item(won(2))])],
			},
		},
		executionData: { nodeExecutionStack: [] },
	},
	...extra,
});

/** What n8n's queue-mode main hands the hook when a job ended without its worker. */
const crashedRun = () => ({
	mode: 'webhook',
	status: 'error',
	finished: false,
	data: {
		resultData: { error: { message: 'job stalled more than maxStalledCount' }, runData: {} },
		executionData: { nodeExecutionStack: [] },
	},
});

/** The stored execution as a worker that died left it: the trigger's items on the stack. */
const storedExecution = (nodes: unknown[] = workflow.nodes) => ({
	id: '9',
	mode: 'webhook',
	status: 'running',
	workflowData: { ...workflow, nodes },
	data: {
		resultData: { runData: {} },
		executionData: {
			nodeExecutionStack: [
				{
					node: trigger(),
					data: { main: [[item(won(5, { on_error: 'permanent' })), item(won(6))]] },
					source: null,
				},
			],
		},
	},
});

describe('settings', () => {
	it('is inactive with one clear line when the URL or key is missing, and registers nothing', () => {
		for (const env of [
			{},
			{ IDEMPOTENT_CLAIM_URL: 'http://claimd:8080' },
			{ IDEMPOTENT_CLAIM_API_KEY: 'ic_key' },
		]) {
			const logger = memoryLogger();
			const built = lib.createHook({ env, n8n: fakeN8n('regular', 'main'), logger });
			expect(built.active).toBe(false);
			expect(built.hooks).toEqual({ workflow: { postExecute: [] }, n8n: { stop: [] } });
			expect(logger.lines).toHaveLength(1);
			expect(logger.lines[0].level).toBe('error');
			expect(logger.lines[0].message).toMatch(
				/^Idempotent Claim hook: inactive: .*IDEMPOTENT_CLAIM_/,
			);
		}
	});

	it('reads the key from IDEMPOTENT_CLAIM_API_KEY_FILE and never logs it', () => {
		const logger = memoryLogger();
		const built = lib.createHook({
			env: {
				IDEMPOTENT_CLAIM_URL: 'http://claimd:8080/',
				IDEMPOTENT_CLAIM_API_KEY_FILE: '/run/secrets/ic',
			},
			readFile: (path) => (path === '/run/secrets/ic' ? 'ic_from_file\n' : ''),
			n8n: fakeN8n('regular', 'main'),
			logger,
		});
		expect(built.active).toBe(true);
		expect(logger.lines.map((l) => l.message).join('\n')).not.toContain('ic_from_file');
		expect(logger.lines[0].message).toMatch(
			/active as regular-mode n8n; claimd http:\/\/claimd:8080;/,
		);
	});

	it.each([
		[{ IDEMPOTENT_CLAIM_URL: 'claimd:8080' }, /must start with http/],
		[{ IDEMPOTENT_CLAIM_URL: 'not a url' }, /not a URL/],
		[{ IDEMPOTENT_CLAIM_URL: 'http://u:p@claimd:8080' }, /user info/],
		[{ IDEMPOTENT_CLAIM_URL: 'http://claimd:8080/?x=1' }, /query/],
		[{ IDEMPOTENT_CLAIM_API_KEY_FILE: '/k' }, /both/],
		[{ IDEMPOTENT_CLAIM_API_KEY: 'two words' }, /whitespace/],
		[{ IDEMPOTENT_CLAIM_ON_ERROR: 'ignore' }, /IDEMPOTENT_CLAIM_ON_ERROR must be/],
		[{ IDEMPOTENT_CLAIM_SETTLE_RETRY_SECONDS: '0' }, /at least 1/],
		[{ IDEMPOTENT_CLAIM_SETTLE_RETRY_SECONDS: '1h' }, /whole number/],
		[{ IDEMPOTENT_CLAIM_MAX_PENDING: '-1' }, /whole number/],
		[{ IDEMPOTENT_CLAIM_SETTLE_WAIT_MS: '60000' }, /at most 30000/],
		[
			{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '10001' },
			/IDEMPOTENT_CLAIM_SETTLE_DELAY_MS must be at most 10000/,
		],
		[
			{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '-5' },
			/IDEMPOTENT_CLAIM_SETTLE_DELAY_MS must be a whole number/,
		],
		[
			{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '0.5' },
			/IDEMPOTENT_CLAIM_SETTLE_DELAY_MS must be a whole number/,
		],
		[
			{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '50ms' },
			/IDEMPOTENT_CLAIM_SETTLE_DELAY_MS must be a whole number/,
		],
	])('refuses %o', (env, problem) => {
		const read = configLib.readConfig({ ...ENV, ...env }, () => 'k');
		expect(read.ok).toBe(false);
		if (!read.ok) expect(read.problem).toMatch(problem);
	});

	it('has defaults: unknown, 3600 s, 10000 pending, no wait, 50 ms delay; keeps a path prefix', () => {
		const read = configLib.readConfig(
			{ ...ENV, IDEMPOTENT_CLAIM_URL: 'https://proxy.example/claimd/' },
			() => '',
		);
		expect(read).toEqual({
			ok: true,
			config: {
				url: 'https://proxy.example/claimd',
				apiKey: 'ic_key',
				onError: 'unknown',
				retrySeconds: 3600,
				maxPending: 10000,
				waitMs: 0,
				delayMs: 50,
			},
		});
		const noDelay = configLib.readConfig(
			{ ...ENV, IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: ' 0 ' },
			() => '',
		);
		expect(noDelay.ok && noDelay.config.delayMs).toBe(0);
		const missingFile = configLib.readConfig(
			{ IDEMPOTENT_CLAIM_URL: 'http://c', IDEMPOTENT_CLAIM_API_KEY_FILE: '/nope' },
			() => {
				throw Object.assign(new Error('ENOENT: /nope'), { code: 'ENOENT' });
			},
		);
		expect(missingFile).toEqual({
			ok: false,
			problem: 'IDEMPOTENT_CLAIM_API_KEY_FILE cannot be read (ENOENT)',
		});
	});

	it('falls back to EXECUTIONS_MODE and the command when n8n cannot say', () => {
		const broken: N8nServices = {
			...fakeN8n('regular', 'main'),
			executionsMode: () => {
				throw new Error('moved');
			},
			instanceType: () => {
				throw new Error('moved');
			},
		};
		const logger = memoryLogger();
		const built = lib.createHook({
			env: { ...ENV, EXECUTIONS_MODE: 'queue' },
			argv: ['node', 'n8n', 'worker'],
			n8n: broken,
			logger,
		});
		expect(built.role).toBe('worker');
	});
});

describe('regular mode: the one process settles', () => {
	it("completes the execution's claims after a success", async () => {
		const h = build(fakeN8n('regular', 'main'));
		await end(h, run('success'), workflow, '7');
		expect(h.claimd.calls).toEqual([
			{
				url: 'http://claimd:8080/v1/claims/complete/batch',
				body: {
					claims: [
						{ claim_id: 'claim-1', claim_token: 'token-1', result_ref: 'n8n-execution:7' },
						{ claim_id: 'claim-2', claim_token: 'token-2', result_ref: 'n8n-execution:7' },
					],
				},
			},
		]);
	});

	it.each(['error', 'crashed', 'canceled'])(
		"fails them after %s with the item's on_error, else IDEMPOTENT_CLAIM_ON_ERROR",
		async (status) => {
			const h = build(fakeN8n('regular', 'main'), { IDEMPOTENT_CLAIM_ON_ERROR: 'permanent' });
			await end(h, run(status), workflow, '7');
			expect(h.claimd.calls).toHaveLength(1);
			expect(h.claimd.calls[0].url).toBe('http://claimd:8080/v1/claims/fail/batch');
			expect(h.claimd.calls[0].body.claims).toEqual([
				{
					claim_id: 'claim-1',
					claim_token: 'token-1',
					retry: 'retryable',
					error: `n8n execution 7 ended with status ${status}`,
				},
				{
					claim_id: 'claim-2',
					claim_token: 'token-2',
					retry: 'permanent',
					error: `n8n execution 7 ended with status ${status}`,
				},
			]);
		},
	);

	it.each(['waiting', 'new', 'running'])(
		'does nothing while the execution is %s',
		async (status) => {
			const h = build(fakeN8n('regular', 'main'));
			await end(
				h,
				run(status, status === 'waiting' ? { waitTill: new Date() } : {}),
				workflow,
				'7',
			);
			expect(h.claimd.calls).toEqual([]);
		},
	);

	it('sends nothing for an execution without claims, or with only test events', async () => {
		const h = build(fakeN8n('regular', 'main'));
		const testRun = run('success');
		testRun.data.resultData.runData['Stripe Trigger'] = [
			task([item(won(1, { outcome: 'test', claim_token: null }))]),
		];
		await end(h, testRun, workflow, '7');
		await end(
			h,
			run('success'),
			{ nodes: [otherNode('Stripe Trigger', 'n8n-nodes-base.webhook')] },
			'8',
		);
		expect(h.claimd.calls).toEqual([]);
	});

	it("also fails a crashed execution's Claim-node claims by execution id (n8n's recovery drops their items)", async () => {
		const h = build(fakeN8n('regular', 'main'));
		const withClaimNode = { ...workflow, nodes: [...workflow.nodes, claimNode()] };
		await end(h, run('crashed'), withClaimNode, '7');
		expect(h.claimd.calls.map((c) => c.url)).toEqual([
			'http://claimd:8080/v1/claims/fail/batch',
			'http://claimd:8080/v1/claims/fail/execution',
		]);
		expect(h.claimd.calls[1].body).toEqual({
			execution_id: '7',
			retry: 'unknown',
			error: 'n8n execution 7 ended with status crashed',
		});
		// A plain error keeps its run data: no call by execution id.
		const plain = build(fakeN8n('regular', 'main'));
		await end(plain, run('error'), withClaimNode, '8');
		expect(plain.claimd.calls.map((c) => c.url)).toEqual([
			'http://claimd:8080/v1/claims/fail/batch',
		]);
	});
});

describe('queue mode', () => {
	it('a worker settles the executions it ran', async () => {
		const h = build(fakeN8n('queue', 'worker'));
		expect(h.role).toBe('worker');
		await end(h, run('success'), workflow, '7');
		await end(h, run('error'), workflow, '8');
		expect(h.claimd.calls.map((c) => c.url)).toEqual([
			'http://claimd:8080/v1/claims/complete/batch',
			'http://claimd:8080/v1/claims/fail/batch',
		]);
	});

	it.each(['main', 'webhook'])(
		'a %s process leaves an execution its worker ended alone',
		async (type) => {
			const n8n = fakeN8n('queue', type);
			const h = build(n8n);
			expect(h.role).toBe('enqueuer');
			await end(h, run('success'), workflow, '7');
			await end(h, run('error'), workflow, '8');
			expect(h.claimd.calls).toEqual([]);
			expect(n8n.reads).toEqual([]);
		},
	);

	it('a main process runs manual executions itself: it settles them unless they are offloaded', async () => {
		const manual = run('success', { mode: 'manual' });
		const h = build(fakeN8n('queue', 'main'));
		await end(h, manual, workflow, '7');
		expect(h.claimd.calls).toHaveLength(1);
		const offloaded = build(fakeN8n('queue', 'main'), {
			OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS: 'true',
		});
		await end(offloaded, manual, workflow, '7');
		expect(offloaded.claimd.calls).toEqual([]);
	});

	it("fails a crashed worker's claims from the stored execution read when n8n reported the job stalled", async () => {
		const n8n = fakeN8n('queue', 'main', { '9': storedExecution() });
		const h = build(n8n);
		expect(n8n.stalled).toHaveLength(1);
		// n8n: the job stalled (the worker stopped renewing its lock) …
		n8n.stalled[0]({ executionId: '9' });
		// … then, 30 s of rechecks later, the hook runs with no run data.
		await end(h, crashedRun(), workflow, '9');
		expect(n8n.reads).toEqual(['9']);
		expect(h.claimd.calls).toEqual([
			{
				url: 'http://claimd:8080/v1/claims/fail/batch',
				body: {
					claims: [
						{
							claim_id: 'claim-5',
							claim_token: 'token-5',
							retry: 'permanent',
							error:
								"n8n execution 9 ended with status error (its queue worker stopped; n8n's queue failed the job)",
						},
						{
							claim_id: 'claim-6',
							claim_token: 'token-6',
							retry: 'unknown',
							error:
								"n8n execution 9 ended with status error (its queue worker stopped; n8n's queue failed the job)",
						},
					],
				},
			},
		]);
	});

	it('also fails the Claim-node claims of a crashed worker by execution id (no stored data lists them)', async () => {
		const nodes = [...workflow.nodes, claimNode()];
		const n8n = fakeN8n('queue', 'webhook', { '9': storedExecution(nodes) });
		const h = build(n8n);
		n8n.stalled[0]({ executionId: '9' });
		await end(h, crashedRun(), { ...workflow, nodes }, '9');
		expect(h.claimd.calls.map((c) => c.url)).toEqual([
			'http://claimd:8080/v1/claims/fail/batch',
			'http://claimd:8080/v1/claims/fail/execution',
		]);
		expect(h.claimd.calls[1].body).toEqual({
			execution_id: '9',
			retry: 'unknown',
			error:
				"n8n execution 9 ended with status error (its queue worker stopped; n8n's queue failed the job)",
		});
	});

	it('without a stalled report, reads the stored execution when the hook runs, and says when it lists no claims', async () => {
		// n8n has already overwritten the data with the empty run.
		const overwritten = { ...storedExecution(), data: crashedRun().data };
		const n8n = fakeN8n('queue', 'main', { '9': overwritten, '10': storedExecution() });
		const h = build(n8n);
		await end(h, crashedRun(), workflow, '9');
		expect(h.claimd.calls).toEqual([]);
		expect(h.logger.lines.find((l) => l.level === 'warn')?.message).toMatch(
			/execution 9 ended without its queue worker .* left to their leases/,
		);
		await end(h, crashedRun(), workflow, '10');
		expect(
			h.claimd.calls.map((c) =>
				(c.body.claims as Array<{ claim_id: string }>).map((x) => x.claim_id),
			),
		).toEqual([['claim-5', 'claim-6']]);
	});

	it('says once at load when it cannot follow stalled jobs, and leaves crashed workers to the leases', async () => {
		const unavailable: N8nServices = {
			...fakeN8n('queue', 'main'),
			available: false,
			onJobStalled: () => {
				throw new Error('not n8n');
			},
			readExecution: async () => {
				throw new Error('not n8n');
			},
		};
		const h = build(unavailable, { EXECUTIONS_MODE: 'queue' });
		expect(h.logger.lines.filter((l) => l.level === 'warn').map((l) => l.message)).toEqual([
			expect.stringMatching(/cannot follow n8n's stalled jobs .* left to their leases/),
		]);
		await end(h, crashedRun(), workflow, '9');
		expect(h.claimd.calls).toEqual([]);
	});
});

describe('never in n8n’s way', () => {
	it('never throws into n8n, whatever the run, the workflow or n8n does', async () => {
		const n8n = fakeN8n('queue', 'main');
		n8n.readExecution = async () => {
			throw new Error('database gone');
		};
		const h = build(n8n);
		n8n.stalled[0]({ executionId: '9' });
		n8n.stalled[0](undefined as never);
		for (const [r, w] of [
			[undefined, undefined],
			[null, null],
			[{ status: 'success', data: null }, { nodes: 'x' }],
			[crashedRun(), workflow],
		] as Array<[unknown, unknown]>) {
			await expect(h.hooks.workflow.postExecute[0](r, w, '9')).resolves.toBeUndefined();
		}
		await h.idle?.();
		const throwingFetch = build(fakeN8n('regular', 'main'));
		throwingFetch.settler?.close();
		const h2 = lib.createHook({
			env: { ...ENV, IDEMPOTENT_CLAIM_SETTLE_WAIT_MS: '50' },
			n8n: fakeN8n('regular', 'main'),
			logger: memoryLogger(),
			fetch: (() => {
				throw new Error('boom');
			}) as unknown as typeof fetch,
			settlerOptions: { baseDelayMs: 5, maxDelayMs: 10 },
		});
		await expect(
			h2.hooks.workflow.postExecute[0](run('success'), workflow, '7'),
		).resolves.toBeUndefined();
		h2.settler?.close();
	});

	it('never logs a token, the API key or item data', async () => {
		const h = build(fakeN8n('regular', 'main'));
		const r = run('error');
		r.data.resultData.runData['Stripe Trigger'] = [
			task([item(won(1, { claim_token: 'tok-SECRET' }), { body: { email: 'a@b.example' } })]),
		];
		await end(h, r, workflow, '7');
		const text = h.logger.lines.map((l) => l.message).join('\n');
		expect(text).toContain('claim-1');
		expect(text).not.toMatch(/tok-SECRET|ic_key|a@b\.example/);
	});
});

describe('the end of an execution and n8n’s stop', () => {
	/** claimd as a fetch whose answers wait until release() (or fail while down). */
	function heldClaimd() {
		const calls: string[] = [];
		let down = false;
		let releases: Array<() => void> = [];
		let watchers: Array<() => void> = [];
		const changed = () => {
			const waiting = watchers;
			watchers = [];
			for (const wake of waiting) wake();
		};
		/** Resolves once fn() is true; checked again on every call claimd gets. */
		const when = async (fn: () => boolean) => {
			while (!fn()) await new Promise<void>((resolve) => watchers.push(resolve));
		};
		const fetch = async (url: string | URL | Request, init?: RequestInit) => {
			const body = JSON.parse(String(init?.body)) as { claims: Array<{ claim_id: string }> };
			calls.push(String(url));
			if (down) {
				changed();
				return new Response('{}', { status: 503 });
			}
			const answered = new Promise<void>((resolve) => releases.push(resolve));
			changed();
			await answered;
			const results = body.claims.map((c) => ({ claim_id: c.claim_id, state: 'completed' }));
			return new Response(JSON.stringify({ results }), { status: 200 });
		};
		return {
			calls,
			fetch: fetch as FetchFunction,
			setDown: (value: boolean) => {
				down = value;
			},
			release: () => {
				const waiting = releases;
				releases = [];
				for (const resolve of waiting) resolve();
			},
			/** Resolves once n requests wait for release(). */
			held: async (n: number) => await when(() => releases.length >= n),
			/** Resolves once claimd got n requests. */
			called: async (n: number) => await when(() => calls.length >= n),
		};
	}

	function buildHeld(env: Record<string, string> = {}, stopDrainMs?: number) {
		const claimd = heldClaimd();
		const logger = memoryLogger();
		const h = lib.createHook({
			env: { ...ENV, ...env },
			n8n: fakeN8n('regular', 'main'),
			logger,
			fetch: claimd.fetch,
			settlerOptions: { baseDelayMs: 60_000, maxDelayMs: 60_000 },
			stopDrainMs,
		});
		return { h, claimd, logger };
	}

	it('by default ends the execution at once and settles after it', async () => {
		const { h, claimd } = buildHeld();
		await h.hooks.workflow.postExecute[0](run('success'), workflow, '7');
		// n8n has its execution back before anything was sent.
		expect(claimd.calls).toEqual([]);
		await claimd.held(1);
		expect(claimd.calls).toEqual(['http://claimd:8080/v1/claims/complete/batch']);
		claimd.release();
		await h.idle?.();
		expect(h.settler?.pending()).toBe(0);
	});

	/** Timers the test fires itself: [callback, ms, fired]. */
	function manualTimers() {
		const armed: Array<{ fn: () => void; ms: number; live: boolean }> = [];
		return {
			armed,
			setTimer: (fn: () => void, ms: number) => {
				const timer = { fn, ms, live: true };
				armed.push(timer);
				return timer;
			},
			clearTimer: (timer: { live: boolean } | null) => {
				if (timer) timer.live = false;
			},
			/** Fires the live timers armed for ms. */
			fire: (ms: number) => {
				for (const timer of armed.filter((t) => t.live && t.ms === ms)) {
					timer.live = false;
					timer.fn();
				}
			},
		};
	}

	it.each([
		[{}, 50],
		[{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '200' }, 200],
		[{ IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: '0' }, 0],
	])(
		'with %o sends the settles of the executions that ended meanwhile %i ms after the first ended',
		async (env, delayMs) => {
			const claimd = heldClaimd();
			const timers = manualTimers();
			const h = lib.createHook({
				env: { ...ENV, ...env },
				n8n: fakeN8n('regular', 'main'),
				logger: memoryLogger(),
				fetch: claimd.fetch,
				setTimer: timers.setTimer,
				clearTimer: timers.clearTimer,
				settlerOptions: { baseDelayMs: 60_000, maxDelayMs: 60_000 },
			});
			await h.hooks.workflow.postExecute[0](run('success'), workflow, '7');
			await h.hooks.workflow.postExecute[0](run('success'), workflow, '8');
			// One timer for both, armed when the first ended; nothing sent yet.
			expect(timers.armed.map((t) => t.ms)).toEqual([delayMs]);
			expect(claimd.calls).toEqual([]);
			timers.fire(delayMs);
			await claimd.held(2);
			expect(claimd.calls).toHaveLength(2);
			claimd.release();
			await h.idle?.();
			expect(h.settler?.pending()).toBe(0);
			// The next execution to end arms a new timer.
			await h.hooks.workflow.postExecute[0](run('success'), workflow, '9');
			expect(timers.armed.filter((t) => t.live).map((t) => t.ms)).toEqual([delayMs]);
			// n8n's stop sends it at once, not when the timer fires.
			const stop = h.hooks.n8n.stop[0]();
			await claimd.held(1);
			expect(claimd.calls).toHaveLength(3);
			claimd.release();
			await stop;
			expect(h.settler?.pending()).toBe(0);
		},
	);

	it('with a wait, holds the execution until the first try landed', async () => {
		const { h, claimd } = buildHeld({ IDEMPOTENT_CLAIM_SETTLE_WAIT_MS: '30000' });
		let ended = false;
		const done = h.hooks.workflow.postExecute[0](run('success'), workflow, '7').then(() => {
			ended = true;
		});
		await claimd.held(1);
		expect(ended).toBe(false);
		claimd.release();
		await done;
		expect(h.settler?.pending()).toBe(0);
	});

	it('n8n’s stop sends the settles not yet sent and waits until claimd took them', async () => {
		const { h, claimd } = buildHeld();
		expect(h.hooks.n8n.stop).toHaveLength(1);
		await h.hooks.workflow.postExecute[0](run('success'), workflow, '7');
		await h.hooks.workflow.postExecute[0](run('success'), workflow, '8');
		let stopped = false;
		const stop = h.hooks.n8n.stop[0]().then(() => {
			stopped = true;
		});
		// Sent by the stop itself, not by the deferred timer.
		expect(claimd.calls).toHaveLength(2);
		await claimd.held(2);
		expect(stopped).toBe(false);
		claimd.release();
		await stop;
		expect(h.settler?.pending()).toBe(0);
	});

	it('n8n’s stop retries at once a settle waiting for its backoff', async () => {
		const { h, claimd } = buildHeld();
		claimd.setDown(true);
		await h.hooks.workflow.postExecute[0](run('success'), workflow, '7');
		await claimd.called(1);
		// The next try is a minute away (baseDelayMs); claimd is back.
		claimd.setDown(false);
		const stop = h.hooks.n8n.stop[0]();
		await claimd.held(1);
		claimd.release();
		await stop;
		expect(claimd.calls).toHaveLength(2);
		expect(h.settler?.pending()).toBe(0);
	});

	it('an execution that ends while n8n stops waits for its first try', async () => {
		const { h, claimd } = buildHeld();
		await h.hooks.n8n.stop[0]();
		let ended = false;
		const done = h.hooks.workflow.postExecute[0](run('success'), workflow, '9').then(() => {
			ended = true;
		});
		await claimd.held(1);
		expect(ended).toBe(false);
		claimd.release();
		await done;
		expect(h.settler?.pending()).toBe(0);
	});

	it('n8n’s stop waits at most its bound and says which claims it leaves to their leases', async () => {
		const { h, claimd, logger } = buildHeld({}, 50);
		claimd.setDown(true);
		await h.hooks.workflow.postExecute[0](run('success'), workflow, '7');
		await h.hooks.n8n.stop[0]();
		expect(h.settler?.pending()).toBe(2);
		expect(logger.lines.map((l) => `${l.level}: ${l.message}`).join('\n')).toMatch(
			/warn: .*n8n is stopping and claimd has not taken 2 claims' settles within 0\.05 s; their leases decide them/,
		);
		h.settler?.close();
	});
});
