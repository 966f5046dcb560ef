/**
 * The settle hook tells claimd which workflow version each execution that
 * claimed ran (POST /v1/executions/workflow): n8n gives a node no version
 * id, its workflow.postExecute hook sees the workflow data's versionId.
 * The duplicate execution's report is the one that matters, so every
 * claim outcome counts, not only won claims.
 */
import { describe, expect, it } from 'vitest';

import { claimNode, item, otherNode, task, trigger, won } from './hookFixtures';
import {
	claims as lib,
	hook as hookLib,
	memoryLogger,
	type N8nServices,
} from './hookModules';

type FetchFunction = (url: string | URL | Request, init?: RequestInit) => Promise<Response>;

const duplicate = (n: number) =>
	won(n, { outcome: 'duplicate', claim_token: null, state: 'completed', cause: 'n8n_twice' });

const workflow = (extra: Record<string, unknown> = {}) => ({
	id: 'wf-1',
	name: 'Orders',
	versionId: '3f1c0d6e-2b4a-4c36-9d7e-5a8b9c0d1e2f',
	activeVersionId: 'published-not-this-one',
	nodes: [
		otherNode('Webhook', 'n8n-nodes-base.webhook'),
		claimNode(),
		otherNode('Send', 'n8n-nodes-base.httpRequest'),
	],
	connections: {},
	...extra,
});

const run = (idempotency: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => ({
	mode: 'webhook',
	status: 'success',
	finished: true,
	data: {
		resultData: {
			runData: {
				Webhook: [task([{ json: { body: {} } }])],
				...(idempotency ? { 'Idempotent Claim': [task([], [item(idempotency)])] } : {}),
			},
		},
		executionData: { nodeExecutionStack: [] },
	},
	...extra,
});

describe('workflowReport', () => {
	const report = (execution_id: string) => ({
		execution_id,
		workflow_id: 'wf-1',
		workflow_version: '3f1c0d6e-2b4a-4c36-9d7e-5a8b9c0d1e2f',
	});

	it('names the execution, the workflow id and versionId (not activeVersionId) for every claim outcome', () => {
		for (const outcome of ['won', 'duplicate', 'in_progress', 'conflict']) {
			expect(lib.workflowReport(run(won(1, { outcome })), workflow(), '41')).toEqual(report('41'));
		}
		expect(lib.workflowReport(run(duplicate(2)), workflow(), 42)).toEqual(report('42'));
	});

	it('reads the trigger’s items too, in its run data and on the stack', () => {
		const wf = workflow({ nodes: [trigger()] });
		const fromRunData = {
			...run(null),
			data: {
				resultData: { runData: { 'Stripe Trigger': [task([item(won(1))])] } },
				executionData: { nodeExecutionStack: [] },
			},
		};
		expect(lib.workflowReport(fromRunData, wf, '7')).toEqual(report('7'));
		const fromStack = {
			...run(null),
			data: {
				resultData: { runData: {} },
				executionData: {
					nodeExecutionStack: [{ node: trigger(), data: { main: [[item(won(1))]] }, source: null }],
				},
			},
		};
		expect(lib.workflowReport(fromStack, wf, '8')).toEqual(report('8'));
	});

	it('sends nothing for an execution that claimed nothing', () => {
		expect(lib.workflowReport(run(null), workflow(), '1')).toBeNull();
		// A copy of an idempotency object on another node's item is no claim.
		const copied = {
			...run(null),
			data: {
				resultData: { runData: { Send: [task([item(won(1))])] } },
				executionData: { nodeExecutionStack: [] },
			},
		};
		expect(lib.workflowReport(copied, workflow(), '1')).toBeNull();
		// Settling operations' items are not claims either.
		const completeNode = claimNode('Complete', 2, { operation: 'complete' });
		const settled = {
			...run(null),
			data: {
				resultData: { runData: { Complete: [task([item(won(1, { state: 'completed' }))])] } },
				executionData: { nodeExecutionStack: [] },
			},
		};
		expect(lib.workflowReport(settled, workflow({ nodes: [completeNode] }), '1')).toBeNull();
	});

	it('skips pinned output of a manual run (an earlier execution’s claims)', () => {
		const manual = run(won(1), { mode: 'manual' });
		expect(
			lib.workflowReport(manual, workflow({ pinData: { 'Idempotent Claim': [{ json: {} }] } }), '1'),
		).toBeNull();
		expect(lib.workflowReport(manual, workflow(), '1')).toEqual(report('1'));
	});

	it('sends nothing claimd would refuse: no id or version, too long, not printable, no execution id', () => {
		for (const extra of [
			{ versionId: undefined },
			{ versionId: null },
			{ versionId: '' },
			{ versionId: 'v'.repeat(129) },
			{ versionId: 'with space' },
			{ versionId: 'é' },
			{ id: undefined },
			{ id: 12 },
		]) {
			expect(lib.workflowReport(run(won(1)), workflow(extra), '1')).toBeNull();
		}
		expect(lib.workflowReport(run(won(1)), workflow({ versionId: 'v'.repeat(128) }), '1')).not.toBeNull();
		expect(lib.workflowReport(run(won(1)), workflow(), undefined)).toBeNull();
		expect(lib.workflowReport(run(won(1)), workflow(), '9'.repeat(201))).toBeNull();
		expect(lib.workflowReport(run(won(1)), undefined, '1')).toBeNull();
		expect(lib.workflowReport(undefined, workflow(), '1')).toBeNull();
	});

	it('batches at most MAX_REPORTS executions per request', () => {
		const reports = Array.from({ length: lib.MAX_REPORTS + 1 }, (_, i) => report(String(i)));
		const requests = lib.reportRequests(reports);
		expect(requests.map((r) => (r.body.executions as unknown[]).length)).toEqual([lib.MAX_REPORTS, 1]);
		expect(requests[0].path).toBe(lib.PATH_EXECUTION_WORKFLOW);
		expect(requests[0].path).toBe('/v1/executions/workflow');
	});
});

interface Call {
	url: string;
	body: Record<string, unknown>;
}

/** claimd as a fetch: settles land; the report route answers as claimd, or 404 like an older claimd. */
function fakeClaimd(reports: 'ok' | 'missing' = 'ok') {
	const calls: Call[] = [];
	const fetch = async (url: string | URL | Request, init?: RequestInit) => {
		const body = JSON.parse(String(init?.body)) as Record<string, unknown>;
		calls.push({ url: String(url), body });
		if (String(url).endsWith('/v1/executions/workflow')) {
			if (reports === 'missing') {
				return new Response(JSON.stringify({ error: { code: 'not_found', message: 'no route' } }), {
					status: 404,
				});
			}
			const results = (body.executions as Array<{ execution_id: string }>).map((e, i) => ({
				execution_id: e.execution_id,
				entries: 1,
				revised: i,
			}));
			return new Response(JSON.stringify({ results }), { status: 200 });
		}
		const results = (body.claims as Array<{ claim_id: string }>).map((c) => ({
			claim_id: c.claim_id,
			state: 'completed',
		}));
		return new Response(JSON.stringify({ results }), { status: 200 });
	};
	return { calls, fetch: fetch as FetchFunction };
}

const n8n = (mode = 'regular', instanceType = 'main'): N8nServices => ({
	available: true,
	executionsMode: () => mode,
	instanceType: () => instanceType,
	onJobStalled: () => {},
	readExecution: async () => undefined,
});

function build(reports: 'ok' | 'missing' = 'ok', env: Record<string, string> = {}, services = n8n()) {
	const claimd = fakeClaimd(reports);
	const logger = memoryLogger();
	const built = hookLib.createHook({
		env: { IDEMPOTENT_CLAIM_URL: 'http://claimd:8080', IDEMPOTENT_CLAIM_API_KEY: 'ic_key', ...env },
		n8n: services,
		logger,
		fetch: claimd.fetch,
		settlerOptions: { baseDelayMs: 5, maxDelayMs: 10 },
	});
	return { ...built, claimd, logger };
}

const reportsSent = (calls: Call[]) =>
	calls.filter((c) => c.url === 'http://claimd:8080/v1/executions/workflow').map((c) => c.body.executions);

describe('the hook sends the versions', () => {
	it('for the executions that ended together, in one request next to their settles', async () => {
		const h = build();
		const post = h.hooks.workflow.postExecute[0];
		// The winner (its claim settled by the hook), the duplicate
		// execution (nothing to settle), and one that claimed nothing.
		await post(run(won(1)), workflow(), '101');
		await post(run(duplicate(1)), workflow({ versionId: 'other-version' }), '102');
		await post(run(null), workflow(), '103');
		// Queued for the settle delay; idle() sends what is queued at once.
		expect(h.claimd.calls).toEqual([]);
		await h.idle?.();
		expect(reportsSent(h.claimd.calls)).toEqual([
			[
				{ execution_id: '101', workflow_id: 'wf-1', workflow_version: '3f1c0d6e-2b4a-4c36-9d7e-5a8b9c0d1e2f' },
				{ execution_id: '102', workflow_id: 'wf-1', workflow_version: 'other-version' },
			],
		]);
		expect(h.claimd.calls.map((c) => c.url)).toContain('http://claimd:8080/v1/claims/complete/batch');
		const revised = h.logger.lines.filter((l) => l.level === 'info' && l.message.includes('two workflow versions'));
		expect(revised.map((l) => l.message)).toEqual([
			'Idempotent Claim hook: execution 102 ran workflow wf-1 version other-version: 1 delivery-log entry took it, 1 duplicate now explained by two workflow versions',
		]);
		// Never a token or an API key in the log.
		expect(JSON.stringify(h.logger.lines)).not.toContain('token-');
		expect(JSON.stringify(h.logger.lines)).not.toContain('ic_key');
	});

	it('with a settle wait, at the execution’s end', async () => {
		const h = build('ok', { IDEMPOTENT_CLAIM_SETTLE_WAIT_MS: '1000' });
		await h.hooks.workflow.postExecute[0](run(duplicate(3)), workflow(), '201');
		await h.idle?.();
		expect(reportsSent(h.claimd.calls)).toEqual([
			[{ execution_id: '201', workflow_id: 'wf-1', workflow_version: '3f1c0d6e-2b4a-4c36-9d7e-5a8b9c0d1e2f' }],
		]);
	});

	it('only from the process that ran the execution', async () => {
		const h = build('ok', {}, n8n('queue', 'main'));
		await h.hooks.workflow.postExecute[0](run(duplicate(4)), workflow(), '301');
		await h.idle?.();
		expect(reportsSent(h.claimd.calls)).toEqual([]);
		const worker = build('ok', {}, n8n('queue', 'worker'));
		await worker.hooks.workflow.postExecute[0](run(duplicate(4)), workflow(), '301');
		await worker.idle?.();
		expect(reportsSent(worker.claimd.calls)).toHaveLength(1);
	});

	it('stops after an older claimd answers 404, and settles go on', async () => {
		const h = build('missing');
		const post = h.hooks.workflow.postExecute[0];
		await post(run(won(5)), workflow(), '401');
		await h.idle?.();
		await post(run(won(6)), workflow(), '402');
		await h.idle?.();
		expect(reportsSent(h.claimd.calls)).toHaveLength(1);
		expect(h.claimd.calls.filter((c) => c.url.endsWith('/v1/claims/complete/batch'))).toHaveLength(2);
		const warns = h.logger.lines.filter((l) => l.level === 'warn' || l.level === 'error');
		expect(warns.map((l) => l.message)).toEqual([
			'Idempotent Claim hook: claimd does not take executions’ workflow versions (HTTP 404); the hook stops sending them, so duplicate causes name no version (upgrade claimd)'.replace(
				'’',
				"'",
			),
		]);
	});
});
