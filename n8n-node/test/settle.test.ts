import type { IDataObject, INodeExecutionData, JsonObject } from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import {
	AxiosError,
	BASE_URL,
	NODE,
	createContext,
	requests,
	run,
	type ParamValue,
} from './helpers';

// n8n's sleep moves the mocked clock instead of waiting: the tests see
// every wait, and Date.now() advances as it would.
vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return {
		...actual,
		sleep: vi.fn(async (ms: number) => {
			vi.setSystemTime(Date.now() + ms);
		}),
	};
});

const START = Date.parse('2030-01-01T00:00:00Z');
const at = (seconds: number) => new Date(START + seconds * 1000).toISOString();

beforeEach(() => {
	vi.useFakeTimers({ toFake: ['Date'] });
	vi.setSystemTime(START);
	vi.mocked(sleep).mockClear();
});

afterEach(() => {
	vi.useRealTimers();
});

const waits = () => vi.mocked(sleep).mock.calls.map((call) => call[0]);
const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
const reset = () =>
	new NodeApiError(NODE, new AxiosError('socket hang up', 'ECONNRESET') as unknown as JsonObject);
const status = (code: number, errorCode: string) =>
	new AxiosError(`Request failed with status code ${code}`, 'ERR_BAD_RESPONSE', {
		status: code,
		data: { error: { code: errorCode, message: 'detail' } },
	});

/** Items as the Won output of a Claim hands them on, leases ending at the given seconds. */
function wonItems(leaseEnds: number[]): INodeExecutionData[] {
	return leaseEnds.map((seconds, index) => ({
		json: {
			idempotency: {
				claim_id: `c${index + 1}`,
				claim_token: `t${index + 1}`,
				outcome: 'won',
				state: 'processing',
				lease_until: at(seconds),
			},
		},
	}));
}

function record(claimId: string, state = 'completed'): IDataObject {
	return { claim_id: claimId, idempotency_key: `stripe:evt_${claimId}`, state, attempt: 1 };
}

/** Complete or Fail parameters reading claim, token and lease end from the items. */
function params(
	operation: 'complete' | 'fail',
	items: INodeExecutionData[],
	extra: Record<string, ParamValue> = {},
): Record<string, ParamValue> {
	const sidecar = (i: number) => items[i].json.idempotency as IDataObject;
	return {
		operation,
		claimId: (i: number) => sidecar(i).claim_id,
		claimToken: (i: number) => sidecar(i).claim_token,
		leaseUntil: (i: number) => sidecar(i).lease_until,
		keepTryingUntil: 'leaseEnd',
		...(operation === 'complete'
			? { resultRef: 'inv_1' }
			: { errorMessage: 'smtp 451', retryKind: 'retryable' }),
		...extra,
	};
}

describe('Complete and Fail keep trying until the lease end', () => {
	for (const operation of ['complete', 'fail'] as const) {
		it(`${operation}: sends the same batch again, 1 s doubling up to 5 s, until it lands`, async () => {
			const items = wonItems([60, 60]);
			const ctx = createContext({ items, params: params(operation, items) });
			ctx.helpers.httpRequestWithAuthentication
				.mockRejectedValueOnce(refused())
				.mockRejectedValueOnce(status(503, 'unavailable'))
				.mockRejectedValueOnce(reset())
				.mockRejectedValueOnce(status(502, 'internal'))
				.mockRejectedValueOnce(refused())
				.mockResolvedValueOnce({ results: [record('c1'), record('c2')] });

			const outputs = await run(ctx);

			expect(waits()).toEqual([1000, 2000, 4000, 5000, 5000]);
			const sent = requests(ctx);
			expect(sent).toHaveLength(6);
			for (const options of sent) {
				expect(options.url).toBe(`${BASE_URL}/v1/claims/${operation}/batch`);
				expect(options.body).toEqual(sent[0].body);
			}
			expect(outputs[0].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		});
	}

	it('gives up at the lease end: the last try starts at it, and every item says its outcome is unknown', async () => {
		const items = wonItems([10, 8]);
		const ctx = createContext({ items, params: params('complete', items), continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());

		const outputs = await run(ctx);

		// 1 + 2 + 4 s, then the 5 s wait is cut to the 3 s left: the last try
		// is at the latest lease end of the batch (10 s), and none after it.
		expect(waits()).toEqual([1000, 2000, 4000, 3000]);
		expect(requests(ctx)).toHaveLength(5);
		expect(Date.now()).toBe(START + 10_000);
		expect(outputs[0]).toHaveLength(2);
		const [first, second] = outputs[0].map((item) => item.error as NodeApiError);
		expect(first.message).toBe(
			'The effect ran but its outcome could not be recorded (claim c1): the outcome is now unknown [item 0]',
		);
		expect(second.message).toContain('(claim c2)');
		expect(first.context.itemIndex).toBe(0);
		expect(second.context.itemIndex).toBe(1);
		const description = first.description ?? '';
		expect(description).toContain(
			'Last failure: Cannot reach the Idempotent Claim sidecar at http://127.0.0.1:8080',
		);
		expect(description).toContain(`Kept trying for 10 s, until ${at(10)} (the lease end)`);
		expect(description).toContain('marked for review (lease policy review), it becomes unknown');
		expect(description).toContain(
			'(lease policy reclaim), the next delivery of the event wins it and runs the effect again',
		);
		expect(description).toContain('Lookup, Claim ID c1');
		expect(description).toContain('run Complete again with the same claim token');
		expect(description).toContain('Resolve it as completed');
		expect(description).toContain('2 items of this execution are in the same state');
	});

	it('fails the execution at the first item when the node does not continue on fail', async () => {
		const items = wonItems([3]);
		const ctx = createContext({ items, params: params('fail', items) });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(status(503, 'unavailable'));

		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;

		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe(
			'The effect failed but the failure could not be recorded (claim c1): the outcome is now unknown [item 0]',
		);
		expect(failure.description).toContain('run Fail again with the same claim token');
		expect(failure.description).toContain(
			'Resolve it: retry to let the next delivery run the effect, or completed',
		);
		expect(waits()).toEqual([1000, 2000]);
	});

	it('sends once when the lease has already ended', async () => {
		const items = wonItems([-5]);
		const ctx = createContext({ items, params: params('complete', items) });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
		await expect(run(ctx)).rejects.toThrow('the outcome is now unknown');
		expect(requests(ctx)).toHaveLength(1);
		expect(sleep).not.toHaveBeenCalled();
	});

	it('keeps trying for Time Limit seconds when so set', async () => {
		const items = wonItems([600]);
		const ctx = createContext({
			items,
			params: params('complete', items, { keepTryingUntil: 'timeLimit', keepTryingSeconds: 3 }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(waits()).toEqual([1000, 2000]);
		expect(failure.description).toContain(`until ${at(3)} (the time limit)`);
	});

	it('keeps trying for 300 s when Lease Until is empty or not a time', async () => {
		for (const leaseUntil of ['', null, 'soon']) {
			vi.setSystemTime(START);
			const items = wonItems([10]);
			const ctx = createContext({ items, params: params('complete', items, { leaseUntil }) });
			ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
			const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
			expect(Date.now(), String(leaseUntil)).toBe(START + 300_000);
			expect(failure.description).toContain('(300 s, as Time Limit Ends At was empty)');
		}
	});

	it('sends once when Retry Sidecar Calls is off, and still says the outcome is unknown', async () => {
		const items = wonItems([60]);
		const ctx = createContext({
			items,
			params: params('complete', items, { retrySidecarCalls: false }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(reset());
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(requests(ctx)).toHaveLength(1);
		expect(failure.message).toContain('the outcome is now unknown');
		expect(failure.description).toContain('Sent once (Retry Sidecar Calls is off)');
	});

	it('does not retry what the sidecar refused: a 4xx for the batch, a per-item lease lost', async () => {
		const items = wonItems([60, 60]);
		const refusedBatch = createContext({ items, params: params('complete', items) });
		refusedBatch.helpers.httpRequestWithAuthentication.mockRejectedValue(status(422, 'invalid'));
		const failure = (await run(refusedBatch).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toContain('Invalid request');
		expect(requests(refusedBatch)).toHaveLength(1);

		const lost = createContext({ items, params: params('complete', items), continueOnFail: true });
		lost.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1'), { error: { code: 'lease_lost', message: 'superseded' } }],
		});
		const outputs = await run(lost);
		expect(requests(lost)).toHaveLength(1);
		expect(outputs[0][0].json.idempotency).toMatchObject({ claim_id: 'c1', state: 'completed' });
		expect(outputs[0][1].json).toEqual({
			error: 'Lease lost: this claim token is no longer current [item 1]',
		});
		expect(sleep).not.toHaveBeenCalled();
	});

	it('reports an answer that does not match the batch', async () => {
		const items = wonItems([60, 60]);
		const ctx = createContext({ items, params: params('complete', items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ results: [record('c1')] });
		await expect(run(ctx)).rejects.toThrow('Unexpected answer from the Idempotent Claim sidecar');
	});
});
