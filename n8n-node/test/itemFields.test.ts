import type {
	IDataObject,
	IHttpRequestOptions,
	INodeExecutionData,
	INodeParameters,
	NodeApiError,
} from 'n8n-workflow';
import { sleep } from 'n8n-workflow';
import { afterAll, beforeEach, describe, expect, it, vi } from 'vitest';

import {
	CLAIM_ID_DEFAULT,
	CLAIM_TOKEN_DEFAULT,
	EXECUTION_ERROR_DEFAULT,
	EXECUTION_ID_DEFAULT,
	LEASE_UNTIL_DEFAULT,
	itemFieldDefault,
	itemFieldParameter,
	readItemField,
	type ItemFieldDefault,
} from '../nodes/IdempotentClaim/helpers/itemFields';
import { AxiosError, BASE_URL, requests, run, type Context } from './helpers';
import { ENGINES, n8nContext, stopEngines } from './n8nParameters';

vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return {
		...actual,
		sleep: vi.fn(async (ms: number) => {
			vi.setSystemTime(Date.now() + ms);
		}),
	};
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

afterAll(async () => {
	await stopEngines();
});

/** Runs fn, for its value or its error's message and description. */
function outcome(fn: () => unknown): { value?: unknown; error?: string } {
	try {
		return { value: fn() };
	} catch (error) {
		const { message, description } = error as { message: string; description?: string };
		return { error: `${message} | ${description ?? ''}` };
	}
}

describe('itemFieldDefault', () => {
	it("spells the parameters' defaults as n8n stores them", () => {
		expect(CLAIM_ID_DEFAULT.expression).toBe('={{ $json.idempotency.claim_id }}');
		expect(CLAIM_TOKEN_DEFAULT.expression).toBe('={{ $json.idempotency.claim_token }}');
		expect(LEASE_UNTIL_DEFAULT.expression).toBe('={{ $json.idempotency.lease_until }}');
		expect(EXECUTION_ID_DEFAULT.expression).toBe('={{ $json.execution.id }}');
		expect(EXECUTION_ERROR_DEFAULT.expression).toBe('={{ $json.execution.error.message }}');
		expect(itemFieldDefault('a', 'b')).toEqual({
			expression: '={{ $json.a.b }}',
			path: ['a', 'b'],
		});
	});
});

describe('readItemField', () => {
	const path = ['idempotency', 'claim_id'];
	it('gives the text of a string field', () => {
		expect(readItemField({ idempotency: { claim_id: 'c1' } }, path)).toEqual({
			kind: 'text',
			value: 'c1',
		});
		expect(readItemField({ idempotency: { claim_id: '' } }, path)).toEqual({
			kind: 'text',
			value: '',
		});
	});

	it('says absent for a missing, null or non-object step and a null or missing field', () => {
		for (const json of [
			{},
			{ idempotency: null },
			{ idempotency: undefined },
			{ idempotency: 'text' },
			{ idempotency: 5 },
			{ idempotency: true },
			{ idempotency: [1, 2] },
			{ idempotency: {} },
			{ idempotency: { claim_id: null } },
			{ idempotency: { claim_id: undefined } },
		]) {
			expect(readItemField(json, path), JSON.stringify(json)).toEqual({ kind: 'absent' });
		}
	});

	it('leaves every other value to n8n', () => {
		for (const json of [
			{ idempotency: { claim_id: 5 } },
			{ idempotency: { claim_id: true } },
			{ idempotency: { claim_id: { id: 'c1' } } },
			{ idempotency: { claim_id: ['c1'] } },
			{ idempotency: { claim_id: new Date(0) } },
			// Inherited, not the item's own: n8n decides.
			{ idempotency: Object.create({ claim_id: 'c1' }) as IDataObject },
		]) {
			expect(readItemField(json, path), JSON.stringify(json)).toEqual({ kind: 'other' });
		}
		// A prototype field of a string is not absent.
		expect(readItemField({ s: 'text' }, ['s', 'length'])).toEqual({ kind: 'other' });
	});
});

/** Item JSON of every shape the defaults may meet, one item each. */
const SHAPES: Array<[string, IDataObject]> = [
	[
		'text',
		{
			idempotency: { claim_id: 'c-1', claim_token: 't-1', lease_until: '2030-01-01T00:05:00Z' },
			execution: { id: '231', error: { message: 'boom' } },
		},
	],
	[
		'empty text',
		{
			idempotency: { claim_id: '', claim_token: '', lease_until: '' },
			execution: { id: '', error: { message: '' } },
		},
	],
	['spaces', { idempotency: { claim_id: '  c-2 ' }, execution: { id: ' 9 ' } }],
	['no parent', {}],
	['null parent', { idempotency: null, execution: null }],
	['text parent', { idempotency: 'x', execution: 'x' }],
	['number parent', { idempotency: 3, execution: 3 }],
	['array parent', { idempotency: ['c'], execution: ['c'] }],
	['no field', { idempotency: {}, execution: { error: {} } }],
	['no middle step', { execution: {} }],
	[
		'null field',
		{
			idempotency: { claim_id: null, claim_token: null, lease_until: null },
			execution: { id: null, error: { message: null } },
		},
	],
	[
		'number field',
		{
			idempotency: { claim_id: 7, claim_token: 7, lease_until: 7 },
			execution: { id: 231, error: { message: 7 } },
		},
	],
	[
		'boolean field',
		{
			idempotency: { claim_id: false, claim_token: true, lease_until: true },
			execution: { id: true, error: { message: false } },
		},
	],
	[
		'object field',
		{
			idempotency: { claim_id: { a: 1 }, claim_token: ['t'], lease_until: { a: 1 } },
			execution: { id: { a: 1 }, error: { message: ['m'] } },
		},
	],
];

interface DefaultCase {
	name: string;
	field: ItemFieldDefault;
	stored: INodeParameters;
	fallback?: unknown;
	absentIsUndefined?: boolean;
}

const DEFAULT_CASES: DefaultCase[] = [
	{ name: 'claimId', field: CLAIM_ID_DEFAULT, stored: { operation: 'complete' } },
	{ name: 'claimToken', field: CLAIM_TOKEN_DEFAULT, stored: { operation: 'complete' } },
	{
		name: 'leaseUntil',
		field: LEASE_UNTIL_DEFAULT,
		stored: { operation: 'fail' },
		fallback: '',
		absentIsUndefined: true,
	},
	{ name: 'claimId', field: CLAIM_ID_DEFAULT, stored: { operation: 'lookup' } },
	{
		name: 'executionId',
		field: EXECUTION_ID_DEFAULT,
		stored: { operation: 'fail', claimsToFail: 'execution' },
	},
	{
		name: 'executionId',
		field: EXECUTION_ID_DEFAULT,
		stored: { operation: 'getMany', getManyBy: 'execution' },
	},
	{
		name: 'errorMessage',
		field: EXECUTION_ERROR_DEFAULT,
		stored: { operation: 'fail', claimsToFail: 'execution' },
	},
];

describe.each(ENGINES)("a parameter left at its default, on n8n's %s engine", (engine) => {
	const items: INodeExecutionData[] = SHAPES.map(([, json]) => ({ json }));

	for (const c of DEFAULT_CASES) {
		it(`${c.name} (${String(c.stored.operation)}): the value n8n's evaluation gives, evaluated only when the field is not text`, async () => {
			const n8n = await n8nContext(c.stored, items, engine);
			try {
				// n8n stores the default as the node's parameter value.
				expect(n8n.node.parameters[c.name]).toBe(c.field.expression);
				SHAPES.forEach(([shape], itemIndex) => {
					const expected = outcome(() => n8n.evaluate(c.name, itemIndex, c.fallback));
					n8n.reads.length = 0;
					const actual = outcome(() =>
						itemFieldParameter.call(n8n.ctx, c.name, itemIndex, items[itemIndex], c.field, {
							fallback: c.fallback,
							absentIsUndefined: c.absentIsUndefined,
						}),
					);
					const found = readItemField(items[itemIndex].json, c.field.path);
					if (c.absentIsUndefined === true && found.kind === 'absent') {
						// Lease Until treats both alike: n8n gave undefined or null.
						expect(expected.error, shape).toBeUndefined();
						expect(expected.value ?? undefined, shape).toBeUndefined();
						expect(actual, shape).toStrictEqual({ value: undefined });
						expect(n8n.evaluated(), shape).toEqual([]);
						return;
					}
					expect(actual, shape).toStrictEqual(expected);
					expect(n8n.evaluated(), shape).toEqual(found.kind === 'text' ? [] : [c.name]);
					if (found.kind === 'text') expect(actual.value, shape).toBe(found.value);
				});
			} finally {
				await n8n.release();
			}
		});
	}

	it('evaluates any other value: another expression, the default spelled otherwise, a fixed value', async () => {
		for (const value of [
			'={{$json.idempotency.claim_id}}',
			"={{ $json.idempotency['claim_id'] }}",
			'={{ $json.idempotency.claim_id.toUpperCase() }}',
			'={{ $json.idempotency.claim_token }}',
			'c-fixed',
		]) {
			const one = [{ json: { idempotency: { claim_id: 'c-1', claim_token: 't-1' } } }];
			const n8n = await n8nContext({ operation: 'complete', claimId: value }, one, engine);
			try {
				const expected = n8n.evaluate('claimId', 0);
				n8n.reads.length = 0;
				const actual = itemFieldParameter.call(n8n.ctx, 'claimId', 0, one[0], CLAIM_ID_DEFAULT);
				expect(actual, value).toBe(expected);
				expect(n8n.evaluated(), value).toEqual(['claimId']);
			} finally {
				await n8n.release();
			}
		}
	});

	it('keeps n8n’s own error for a parameter that is missing', async () => {
		const one = [{ json: { idempotency: { claim_id: 'c-1' } } }];
		const n8n = await n8nContext({ operation: 'complete' }, one, engine);
		try {
			delete n8n.node.parameters.claimId;
			expect(() =>
				itemFieldParameter.call(n8n.ctx, 'claimId', 0, one[0], CLAIM_ID_DEFAULT),
			).toThrow('Could not get parameter "claimId"');
			expect(
				itemFieldParameter.call(n8n.ctx, 'claimId', 0, one[0], CLAIM_ID_DEFAULT, { fallback: 'f' }),
			).toBe('f');
		} finally {
			await n8n.release();
		}
	});
});

/** Answers every sidecar request of the operations with a plausible success. */
function answer(ctx: Context): void {
	ctx.helpers.httpRequestWithAuthentication.mockImplementation(async (_type, options) => {
		const path = String((options as IHttpRequestOptions).url).slice(BASE_URL.length);
		const body = (options as IHttpRequestOptions).body as IDataObject | undefined;
		if (path.endsWith('/batch')) {
			const claims = (body?.claims ?? []) as IDataObject[];
			return {
				results: claims.map((claim) => ({
					claim_id: claim.claim_id,
					idempotency_key: `stripe:${String(claim.claim_id)}`,
					state: path.includes('complete') ? 'completed' : 'retryable_failed',
				})),
			};
		}
		if (path === '/v1/claims/fail/execution') {
			return { claims: [{ claim_id: 'c-9', state: 'unknown' }], more: false };
		}
		if (path === '/v1/claims/list') return { claims: [{ claim_id: 'c-9', state: 'processing' }] };
		return { claim_id: decodeURIComponent(path.split('/')[3]), state: 'completed' };
	});
}

/** What one node run did: its outputs or its error, and its requests. */
async function runOnce(ctx: Context) {
	answer(ctx);
	let result: { outputs?: unknown; error?: string };
	try {
		result = { outputs: (await run(ctx)).map((output) => output.map((item) => item.json)) };
	} catch (error) {
		const { message, description } = error as NodeApiError;
		result = { error: `${message} | ${description ?? ''}` };
	}
	const sent = requests(ctx).map((options) => ({
		url: options.url,
		body: options.body,
		qs: options.qs,
	}));
	return { ...result, sent };
}

const OPERATIONS: Array<[string, INodeParameters]> = [
	['complete', { operation: 'complete' }],
	['fail', { operation: 'fail', errorMessage: 'smtp 451' }],
	['extendLease', { operation: 'extendLease' }],
	['lookup', { operation: 'lookup' }],
	['resolve', { operation: 'resolve', resolveOutcome: 'completed', note: 'checked' }],
	['reconcileAnswer', { operation: 'reconcileAnswer', verdict: 'not_done' }],
	['fail all claims of an execution', { operation: 'fail', claimsToFail: 'execution' }],
	['getMany by execution', { operation: 'getMany', getManyBy: 'execution' }],
];

describe.each(ENGINES)("the node with its defaults, on n8n's %s engine", (engine) => {
	for (const [label, stored] of OPERATIONS) {
		for (const [shape, json] of SHAPES) {
			it(`${label}, item ${shape}: the same requests, outputs and errors as when n8n evaluates every default`, async () => {
				const items = () => [{ json: structuredClone(json) }];
				const fast = await n8nContext(stored, items(), engine);
				const reference = await n8nContext(stored, items(), engine, { evaluateAll: true });
				try {
					const got = await runOnce(fast.ctx);
					const want = await runOnce(reference.ctx);
					expect(got).toStrictEqual(want);
				} finally {
					await fast.release();
					await reference.release();
				}
			});
		}
	}

	it('Complete evaluates none of its defaults for items that carry them (Lease Until not even read)', async () => {
		const items = [
			{
				json: {
					idempotency: { claim_id: 'c-1', claim_token: 't-1', lease_until: '2030-01-01T00:05:00Z' },
				},
			},
			{
				json: {
					idempotency: { claim_id: 'c-2', claim_token: 't-2', lease_until: '2030-01-01T00:05:00Z' },
				},
			},
		];
		const n8n = await n8nContext({ operation: 'complete' }, items, engine);
		try {
			const got = await runOnce(n8n.ctx);
			expect(got.sent).toEqual([
				{
					url: `${BASE_URL}/v1/claims/complete/batch`,
					body: {
						claims: [
							{ claim_id: 'c-1', claim_token: 't-1' },
							{ claim_id: 'c-2', claim_token: 't-2' },
						],
					},
					qs: undefined,
				},
			]);
			expect(n8n.evaluated()).not.toContain('claimId');
			expect(n8n.evaluated()).not.toContain('claimToken');
			expect(n8n.reads.map((read) => read.name)).not.toContain('leaseUntil');
		} finally {
			await n8n.release();
		}
	});
});

describe("Complete and Fail read Lease Until only when a send fails (n8n's vm engine)", () => {
	const START = Date.parse('2030-01-01T00:00:00Z');
	const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
	const items = () => [
		{
			json: {
				idempotency: { claim_id: 'c-1', claim_token: 't-1', lease_until: '2030-01-01T00:00:03Z' },
			},
		},
		{
			json: {
				idempotency: { claim_id: 'c-2', claim_token: 't-2', lease_until: '2030-01-01T00:00:02Z' },
			},
		},
	];
	// Not the default (no spaces), but a plain path: read from the item too.
	const mapped = '={{$json.idempotency.lease_until}}';
	// Not a plain path: n8n evaluates it.
	const evaluated = '={{ $json.idempotency.lease_until || "" }}';

	beforeEach(() => {
		vi.useFakeTimers({ toFake: ['Date'] });
		vi.setSystemTime(START);
	});

	afterAll(() => {
		vi.useRealTimers();
	});

	it('a report that lands at once does not evaluate a mapped Lease Until', async () => {
		const n8n = await n8nContext({ operation: 'complete', leaseUntil: evaluated }, items(), 'vm');
		try {
			await runOnce(n8n.ctx);
			expect(n8n.reads.map((read) => read.name)).not.toContain('leaseUntil');
		} finally {
			await n8n.release();
		}
	});

	for (const leaseUntil of [evaluated, mapped, LEASE_UNTIL_DEFAULT.expression]) {
		it(`a failing report reads it once per item and keeps trying until the latest lease end (${leaseUntil})`, async () => {
			const n8n = await n8nContext(
				{ operation: 'fail', errorMessage: 'x', leaseUntil },
				items(),
				'vm',
				{
					continueOnFail: true,
				},
			);
			try {
				n8n.ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
				const outputs = await run(n8n.ctx);
				expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([1000, 2000]);
				expect(Date.now()).toBe(START + 3000);
				// A plain path is read from each item without asking n8n; any
				// other expression n8n evaluates once per item.
				const reads = n8n.reads.filter((read) => read.name === 'leaseUntil');
				expect(reads.map((read) => read.itemIndex)).toEqual(leaseUntil === evaluated ? [0, 1] : []);
				expect(n8n.evaluated().filter((name) => name === 'leaseUntil')).toHaveLength(
					leaseUntil === evaluated ? 2 : 0,
				);
				const error = outputs[0][0].error as NodeApiError;
				expect(error.description).toContain('until 2030-01-01T00:00:03.000Z (the lease end)');
			} finally {
				await n8n.release();
			}
		});
	}
});
