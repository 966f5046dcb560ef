/**
 * The settle hook's pure logic (hooks/lib/claims.js): which claims an
 * execution holds, what its end means for them, which process acts, and
 * the claimd requests that follow.
 */
import { describe, expect, it } from 'vitest';

import { PKG, claimNode, item, otherNode, task, trigger, won } from './hookFixtures';
import { claims as lib } from './hookModules';

const ids = (found: Array<{ claimId: string }>) => found.map((c) => c.claimId);

describe('findClaims', () => {
	it("finds the trigger's won items with their on_error", () => {
		const found = lib.findClaims({
			nodes: [trigger()],
			runData: {
				'Stripe Trigger': [
					task([
						item(won(1, { on_error: 'retryable', event_type: 'invoice.paid' })),
						item(won(2, { on_error: 'bogus' })),
						item(won(3)),
					]),
				],
			},
		});
		expect(found).toEqual([
			{ claimId: 'claim-1', token: 'token-1', onError: 'retryable', node: 'Stripe Trigger' },
			{ claimId: 'claim-2', token: 'token-2', onError: null, node: 'Stripe Trigger' },
			{ claimId: 'claim-3', token: 'token-3', onError: null, node: 'Stripe Trigger' },
		]);
	});

	it('skips a shadow copy: answered won, it holds no token (nothing to settle)', () => {
		const found = lib.findClaims({
			nodes: [trigger()],
			runData: {
				'Stripe Trigger': [
					task([
						item(won(1, { shadow: { would_be: 'won' } })),
						item(won(2, { claim_token: null, shadow: { would_be: 'duplicate', cause: 'provider_retry' } })),
					]),
				],
			},
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it("finds Claim's Won output (node version 2) and not its other outcomes", () => {
		const found = lib.findClaims({
			nodes: [otherNode('Webhook', 'n8n-nodes-base.webhook'), claimNode()],
			runData: {
				Webhook: [task([{ json: { body: {} }, pairedItem: { item: 0 } }])],
				'Idempotent Claim': [
					task(
						[item(won(1))],
						[item(won(2, { outcome: 'duplicate', claim_token: null, state: 'completed' }))],
						[item(won(3, { outcome: 'conflict', claim_token: null }))],
						[item(won(4, { outcome: 'in_progress', claim_token: null }))],
						[],
					),
				],
			},
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it('finds Claim node version 1 (the default operation) and ignores versions it does not know', () => {
		const nodes = [
			claimNode('Claim v1', 1, {}),
			claimNode('Claim v3', 3, {}),
			claimNode('Lookup', 2, { operation: 'lookup' }),
		];
		const found = lib.findClaims({
			nodes,
			runData: {
				'Claim v1': [task([item(won(1))], [])],
				'Claim v3': [task([item(won(3))])],
				// Lookup lays the record over the claim and keeps its token: not a new claim.
				Lookup: [task([item(won(4))])],
			},
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it('excludes claims the workflow completed, failed or resolved itself', () => {
		const nodes = [
			trigger(),
			claimNode('Complete', 2, { operation: 'complete' }),
			claimNode('Fail', 2, { operation: 'fail' }),
			claimNode('Resolve', 2, { operation: 'resolve' }),
			claimNode('Extend Lease', 2, { operation: 'extendLease' }),
		];
		const found = lib.findClaims({
			nodes,
			runData: {
				'Stripe Trigger': [task([1, 2, 3, 4, 5].map((n) => item(won(n))))],
				// Complete keeps the token and outcome of the claim it settled.
				Complete: [task([item(won(1, { state: 'completed' }))])],
				Fail: [task([item(won(2, { state: 'unknown' }))])],
				Resolve: [task([item(won(3, { state: 'retryable_failed' }))])],
				// Still processing: Extend Lease settles nothing.
				'Extend Lease': [task([item(won(4, { state: 'processing' }))])],
			},
		});
		expect(ids(found)).toEqual(['claim-4', 'claim-5']);
	});

	it('does not take a Complete that failed (no new state) as settled', () => {
		const found = lib.findClaims({
			nodes: [trigger(), claimNode('Complete', 2, { operation: 'complete' })],
			runData: {
				'Stripe Trigger': [task([item(won(1))])],
				Complete: [task([item(won(1), { error: 'lease lost' })])],
			},
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it("finds the trigger's items still on the execution stack (the trigger never ran)", () => {
		const node = trigger();
		const found = lib.findClaims({
			nodes: [node],
			runData: {},
			stack: [
				{
					node,
					data: { main: [[item(won(1)), item(won(2, { on_error: 'permanent' }))]] },
					source: null,
				},
			],
		});
		expect(found).toEqual([
			{ claimId: 'claim-1', token: 'token-1', onError: null, node: 'Stripe Trigger' },
			{ claimId: 'claim-2', token: 'token-2', onError: 'permanent', node: 'Stripe Trigger' },
		]);
	});

	it("ignores other nodes' stack entries, although their input carries the trigger's objects", () => {
		const found = lib.findClaims({
			nodes: [trigger(), otherNode('Send Invoice', 'n8n-nodes-base.httpRequest')],
			runData: { 'Stripe Trigger': [task([item(won(1))])] },
			stack: [
				{
					node: otherNode('Send Invoice', 'n8n-nodes-base.httpRequest'),
					data: { main: [[item(won(1)), item(won(9))]] },
					source: null,
				},
			],
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it('counts a claim once when it is in the run data and on the stack', () => {
		const node = trigger();
		const found = lib.findClaims({
			nodes: [node],
			runData: { 'Stripe Trigger': [task([item(won(1))]), task([item(won(1))])] },
			stack: [{ node, data: { main: [[item(won(1))]] }, source: null }],
		});
		expect(ids(found)).toEqual(['claim-1']);
	});

	it('recognises the nodes loaded as custom nodes (CUSTOM.*) and under an npm scope', () => {
		const found = lib.findClaims({
			nodes: [
				trigger('Custom Trigger', 'CUSTOM.idempotentClaimTrigger'),
				claimNode('Custom Claim', 2, {}, 'CUSTOM.idempotentClaim'),
				claimNode('Scoped Claim', 2, {}, `@acme/${PKG}.idempotentClaim`),
			],
			runData: {
				'Custom Trigger': [task([item(won(1))])],
				'Custom Claim': [task([item(won(2))])],
				'Scoped Claim': [task([item(won(3))])],
			},
		});
		expect(ids(found)).toEqual(['claim-1', 'claim-2', 'claim-3']);
	});

	it("ignores look-alike items of other nodes and of other packages' nodes", () => {
		const found = lib.findClaims({
			nodes: [
				otherNode('Code', 'n8n-nodes-base.code'),
				otherNode('Set', 'n8n-nodes-base.set'),
				otherNode('Other Claim', 'n8n-nodes-other.idempotentClaim'),
				otherNode('Suffix', `x${PKG}.idempotentClaimTrigger`),
			],
			runData: {
				Code: [task([item(won(1))])],
				Set: [task([item(won(2))])],
				'Other Claim': [task([item(won(3))])],
				Suffix: [task([item(won(4))])],
				// A node that is not in the workflow.
				Ghost: [task([item(won(5))])],
			},
		});
		expect(found).toEqual([]);
	});

	it('ignores test events (no token), outcomes other than won, and malformed data', () => {
		const found = lib.findClaims({
			nodes: [trigger()],
			runData: {
				'Stripe Trigger': [
					task([
						item(won(1, { outcome: 'test', claim_token: null, claim_id: null })),
						item(won(2, { claim_token: '' })),
						item(won(3, { claim_id: 7 })),
						{ json: { idempotency: 'won' }, pairedItem: { item: 0 } } as never,
						{ json: null } as never,
						null as never,
					]),
					null as never,
					{ data: null } as never,
					{ data: { main: null } } as never,
				],
			},
			stack: [null, { node: null }, { node: trigger(), data: null }],
		});
		expect(found).toEqual([]);
	});

	it('reads every run of a node and every main output', () => {
		const found = lib.findClaims({
			nodes: [claimNode('Idempotent Claim', 2, {})],
			runData: {
				'Idempotent Claim': [task([item(won(1))], null), task([item(won(2))])],
			},
		});
		expect(ids(found)).toEqual(['claim-1', 'claim-2']);
	});
});

describe('claimsOfRun', () => {
	const workflow = (extra: Record<string, unknown> = {}) => ({
		nodes: [trigger()],
		connections: {},
		...extra,
	});
	const run = (mode: string, pinData?: Record<string, unknown>) => ({
		mode,
		status: 'success',
		finished: true,
		data: {
			resultData: {
				runData: { 'Stripe Trigger': [task([item(won(1))])] },
				...(pinData ? { pinData } : {}),
			},
			executionData: { nodeExecutionStack: [] },
		},
	});

	it('reads the run data and the stack of a run', () => {
		expect(ids(lib.claimsOfRun(run('webhook'), workflow()))).toEqual(['claim-1']);
	});

	it('skips pinned nodes in manual runs (a copy of an earlier execution), not in production', () => {
		const pinned = { 'Stripe Trigger': [{ json: {} }] };
		expect(lib.claimsOfRun(run('manual', pinned), workflow())).toEqual([]);
		expect(lib.claimsOfRun(run('manual'), workflow({ pinData: pinned }))).toEqual([]);
		expect(ids(lib.claimsOfRun(run('webhook'), workflow({ pinData: pinned })))).toEqual([
			'claim-1',
		]);
	});

	it('copes with a run or workflow without data', () => {
		expect(lib.claimsOfRun(undefined, undefined)).toEqual([]);
		expect(lib.claimsOfRun({ data: {} }, { nodes: null })).toEqual([]);
	});
});

describe('actionFor: what the end of a run means for its claims', () => {
	const cases: Array<[string, Record<string, unknown>, string]> = [
		['success, finished', { status: 'success', finished: true }, 'complete'],
		['success, finished not given', { status: 'success' }, 'complete'],
		['success, not finished (stopped)', { status: 'success', finished: false }, 'fail'],
		['error', { status: 'error', finished: false }, 'fail'],
		['crashed', { status: 'crashed', finished: false }, 'fail'],
		['canceled', { status: 'canceled', finished: false }, 'fail'],
		['waiting (Wait node)', { status: 'waiting', finished: false }, 'none'],
		['waitTill set', { status: 'success', finished: true, waitTill: new Date() }, 'none'],
		['new', { status: 'new' }, 'none'],
		['running', { status: 'running' }, 'none'],
		['unknown', { status: 'unknown' }, 'none'],
		['no status, finished', { finished: true, data: { resultData: {} } }, 'complete'],
		['no status, an error', { finished: false, data: { resultData: { error: {} } } }, 'fail'],
		['no status, nothing known', { data: {} }, 'none'],
		['a status n8n does not have', { status: 'exploded', finished: true }, 'complete'],
	];
	it.each(cases)('%s', (_name, run, action) => {
		expect(lib.actionFor(run)).toBe(action);
	});

	it('does nothing without a run', () => {
		expect(lib.actionFor(undefined)).toBe('none');
		expect(lib.executionStatus(null)).toBe('unknown');
	});
});

describe('who acts', () => {
	it.each([
		[undefined, 'main', 'regular'],
		['regular', 'main', 'regular'],
		['regular', 'worker', 'regular'],
		['queue', 'worker', 'worker'],
		['queue', 'main', 'enqueuer'],
		['queue', 'webhook', 'enqueuer'],
	])('EXECUTIONS_MODE %s, %s process: %s', (mode, instanceType, role) => {
		expect(lib.processRole(mode, instanceType)).toBe(role);
	});

	const withRunData = {
		mode: 'webhook',
		status: 'error',
		data: { resultData: { runData: { 'Stripe Trigger': [] } } },
	};
	const emptyError = { mode: 'webhook', status: 'error', data: { resultData: { runData: {} } } };
	const emptySuccess = {
		mode: 'webhook',
		status: 'success',
		data: { resultData: { runData: {} } },
	};
	const emptyCrashed = { mode: 'trigger', status: 'crashed', data: { resultData: {} } };
	const manual = { ...withRunData, mode: 'manual', status: 'success' };

	it.each([
		['regular', withRunData, false, 'act'],
		['regular', emptyError, false, 'act'],
		['worker', withRunData, false, 'act'],
		['worker', emptyError, false, 'act'],
		// A queue-mode main or webhook process after a worker ended the execution.
		['enqueuer', withRunData, false, 'skip'],
		['enqueuer', { ...withRunData, status: 'success' }, false, 'skip'],
		['enqueuer', emptySuccess, false, 'skip'],
		// The job ended without its worker: n8n's queue failed it.
		['enqueuer', emptyError, false, 'crashed-worker'],
		['enqueuer', emptyCrashed, false, 'crashed-worker'],
		// Manual executions run in main unless offloaded to workers.
		['enqueuer', manual, false, 'act'],
		['enqueuer', manual, true, 'skip'],
	])('%s, run %#: %s', (role, run, offloadManual, who) => {
		expect(lib.whoActs({ role, run, offloadManual })).toBe(who);
	});
});

describe('settleRequests', () => {
	const claim = (n: number, onError: string | null = null) => ({
		claimId: `claim-${n}`,
		token: `token-${n}`,
		onError,
		node: 'Stripe Trigger',
	});

	it('completes with the execution as result_ref', () => {
		expect(
			lib.settleRequests({
				action: 'complete',
				claims: [claim(1), claim(2)],
				executionId: '42',
				status: 'success',
				defaultOnError: 'unknown',
			}),
		).toEqual([
			{
				path: '/v1/claims/complete/batch',
				body: {
					claims: [
						{ claim_id: 'claim-1', claim_token: 'token-1', result_ref: 'n8n-execution:42' },
						{ claim_id: 'claim-2', claim_token: 'token-2', result_ref: 'n8n-execution:42' },
					],
				},
				claimIds: ['claim-1', 'claim-2'],
			},
		]);
	});

	it("fails with each item's on_error, else the default, and says only the execution and its status", () => {
		const [request] = lib.settleRequests({
			action: 'fail',
			claims: [claim(1, 'retryable'), claim(2)],
			executionId: '42',
			status: 'error',
			defaultOnError: 'unknown',
		});
		expect(request.path).toBe('/v1/claims/fail/batch');
		expect(request.body).toEqual({
			claims: [
				{
					claim_id: 'claim-1',
					claim_token: 'token-1',
					retry: 'retryable',
					error: 'n8n execution 42 ended with status error',
				},
				{
					claim_id: 'claim-2',
					claim_token: 'token-2',
					retry: 'unknown',
					error: 'n8n execution 42 ended with status error',
				},
			],
		});
	});

	it(`sends at most ${lib.MAX_BATCH} claims per request`, () => {
		const many = Array.from({ length: 2 * lib.MAX_BATCH + 1 }, (_, i) => claim(i));
		const requests = lib.settleRequests({
			action: 'complete',
			claims: many,
			executionId: '1',
			status: 'success',
			defaultOnError: 'unknown',
		});
		expect(requests.map((r) => r.claimIds.length)).toEqual([lib.MAX_BATCH, lib.MAX_BATCH, 1]);
	});

	it('sends nothing for no claims or no action', () => {
		const base = { executionId: '1', status: 'success', defaultOnError: 'unknown' };
		expect(lib.settleRequests({ ...base, action: 'complete', claims: [] })).toEqual([]);
		expect(lib.settleRequests({ ...base, action: 'none', claims: [claim(1)] })).toEqual([]);
	});
});
