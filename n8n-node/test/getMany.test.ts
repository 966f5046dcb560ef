import type { IDataObject, JsonObject } from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { MAX_PAGE_SIZE, MAX_PAGES } from '../nodes/IdempotentClaim/actions/claim/getMany.operation';
import { AxiosError, BASE_URL, NODE, createContext, requests, run } from './helpers';

vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return { ...actual, sleep: vi.fn(async () => undefined) };
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

function record(n: number, extra: IDataObject = {}): IDataObject {
	return {
		claim_id: `c${n}`,
		idempotency_key: `stripe:evt_${n}`,
		source: 'stripe',
		event_id: `evt_${n}`,
		action: '',
		state: 'unknown',
		attempt: 1,
		max_attempts: 5,
		lease_policy: 'review',
		last_error: 'lease expired',
		conflict_count: 0,
		created_at: '2030-01-01T00:00:00Z',
		updated_at: `2030-01-01T00:00:0${n % 10}Z`,
		...extra,
	};
}

const records = (from: number, count: number) =>
	Array.from({ length: count }, (_, i) => record(from + i));

const byState = {
	operation: 'getMany',
	getManyBy: 'state',
	state: 'unknown',
	returnAll: false,
	limit: 50,
	filters: {},
	simplify: true,
};

describe('Get Many', () => {
	it('lists claims in a state, one item per record, simplified under idempotency', async () => {
		const items = [{ json: { trigger: 'schedule' } }];
		const ctx = createContext({ items, params: { ...byState, filters: { source: ' stripe ' } } });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ claims: records(1, 2) });

		const outputs = await run(ctx);

		expect(requests(ctx)).toEqual([
			expect.objectContaining({
				method: 'GET',
				url: `${BASE_URL}/v1/claims/list`,
				qs: { state: 'unknown', source: 'stripe', limit: 50 },
			}),
		]);
		expect(outputs).toHaveLength(1);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 0 }]);
		expect(outputs[0][0].json).toEqual({
			idempotency: {
				claim_id: 'c1',
				source: 'stripe',
				event_id: 'evt_1',
				action: '',
				state: 'unknown',
				result_ref: null,
				attempt: 1,
				lease_until: null,
				updated_at: '2030-01-01T00:00:01Z',
			},
		});
	});

	it('returns the whole record without Simplify, the key named as in Claim', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: { ...byState, simplify: false } });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ claims: records(1, 1) });
		const [[out]] = await run(ctx);
		expect(out.json.idempotency).toMatchObject({
			key: 'stripe:evt_1',
			last_error: 'lease expired',
			lease_policy: 'review',
			claim_token: null,
		});
		expect(out.json.idempotency).not.toHaveProperty('idempotency_key');
	});

	it('lists the claims an n8n execution won, with its state and source filters', async () => {
		const items = [{ json: { execution: { id: '231' } } }];
		const ctx = createContext({
			items,
			params: {
				...byState,
				getManyBy: 'execution',
				executionId: (i: number) => (items[i].json.execution as IDataObject).id,
				filters: { state: 'processing', source: 'stripe' },
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ claims: [] });
		const outputs = await run(ctx);
		expect(requests(ctx)[0].qs).toEqual({
			execution_id: '231',
			state: 'processing',
			source: 'stripe',
			limit: 50,
		});
		expect(outputs).toEqual([[]]);
	});

	it('stops at Limit, asking no more than it still needs', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: { ...byState, limit: 3 } });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			claims: records(1, 3),
			next_cursor: 'more',
		});
		const outputs = await run(ctx);
		expect(outputs[0]).toHaveLength(3);
		expect(requests(ctx)).toHaveLength(1);
		expect(requests(ctx)[0].qs).toMatchObject({ limit: 3 });
	});

	it('with Return All, pages over next_cursor in pages of the largest size, each record once', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: { ...byState, returnAll: true } });
		ctx.helpers.httpRequestWithAuthentication
			.mockResolvedValueOnce({ claims: records(1, 2), next_cursor: 'p2' })
			// c2 changed while the list was read and shows again at its end.
			.mockResolvedValueOnce({ claims: [record(2), record(3)], next_cursor: 'p3' })
			.mockResolvedValueOnce({ claims: [record(4)] });
		const outputs = await run(ctx);
		expect(outputs[0].map((item) => (item.json.idempotency as IDataObject).claim_id)).toEqual([
			'c1',
			'c2',
			'c3',
			'c4',
		]);
		expect(requests(ctx).map((r) => r.qs)).toEqual([
			{ state: 'unknown', limit: MAX_PAGE_SIZE },
			{ state: 'unknown', limit: MAX_PAGE_SIZE, cursor: 'p2' },
			{ state: 'unknown', limit: MAX_PAGE_SIZE, cursor: 'p3' },
		]);
	});

	it('is bounded: a cursor that repeats ends the list, and Return All stops with an error past its page cap', async () => {
		const items = [{ json: {} }];
		const repeating = createContext({ items, params: { ...byState, returnAll: true } });
		repeating.helpers.httpRequestWithAuthentication.mockResolvedValue({
			claims: records(1, 1),
			next_cursor: 'same',
		});
		const outputs = await run(repeating);
		expect(outputs[0]).toHaveLength(1);
		expect(requests(repeating)).toHaveLength(2);

		const endless = createContext({ items, params: { ...byState, returnAll: true } });
		let page = 0;
		endless.helpers.httpRequestWithAuthentication.mockImplementation(async () => {
			page++;
			return { claims: [record(page)], next_cursor: `p${page}` };
		});
		const failure = (await run(endless).catch((error: unknown) => error)) as Error;
		expect(failure.message).toBe(
			`More than ${MAX_PAGES * MAX_PAGE_SIZE} claims match: Return All stops there [item 0]`,
		);
		expect(requests(endless)).toHaveLength(MAX_PAGES);
	});

	it('retries a read the sidecar could not answer, and names an old sidecar without the route', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: byState });
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED'))
			.mockResolvedValueOnce({ claims: records(1, 1) });
		expect((await run(ctx))[0]).toHaveLength(1);
		expect(requests(ctx)).toHaveLength(2);

		const old = createContext({ items, params: byState });
		old.helpers.httpRequestWithAuthentication.mockRejectedValue(
			new NodeApiError(
				NODE,
				new AxiosError('Request failed with status code 404', 'ERR_BAD_REQUEST', {
					status: 404,
					data: { error: { code: 'not_found', message: 'Cannot GET /v1/claims/list' } },
				}) as unknown as JsonObject,
			),
		);
		const failure = (await run(old).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toBe('This Idempotent Claim sidecar cannot list claims [item 0]');
	});

	it('refuses an empty execution ID and a Limit below 1 before calling the sidecar', async () => {
		const items = [{ json: {} }];
		const noId = createContext({
			items,
			params: { ...byState, getManyBy: 'execution', executionId: '' },
		});
		await expect(run(noId)).rejects.toThrow('Execution ID is empty [item 0]');
		const noLimit = createContext({ items, params: { ...byState, limit: 0 } });
		await expect(run(noLimit)).rejects.toThrow('Limit must be a whole number, at least 1');
		expect(noId.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
		expect(noLimit.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('with continue on fail, an item whose list fails gives its error and the others their records', async () => {
		const items = [{ json: {} }, { json: {} }];
		const ctx = createContext({
			items,
			continueOnFail: true,
			params: { ...byState, state: (i: number) => (i === 0 ? '' : 'unknown') },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ claims: records(1, 2) });
		const [out] = await run(ctx);
		expect(out.map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 1 }, { item: 1 }]);
		expect(out[0].json).toEqual({ error: 'State is empty [item 0]' });
	});
});
