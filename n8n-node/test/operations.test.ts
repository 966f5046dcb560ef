import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { BASE_URL, createContext, deepFreeze, requests, run } from './helpers';

/** An item as the Won output of a Claim hands it on. */
function wonItem(claimId: string, token: string): INodeExecutionData {
	return {
		json: {
			body: { id: `evt_${claimId}` },
			idempotency: {
				key: `stripe:evt_${claimId}`,
				claim_id: claimId,
				claim_token: token,
				outcome: 'won',
				attempt: 1,
				state: 'processing',
				lease_until: '2030-01-01T00:05:00Z',
			},
		},
	};
}

function record(claimId: string, extra: IDataObject = {}): IDataObject {
	return {
		claim_id: claimId,
		idempotency_key: `stripe:evt_${claimId}`,
		source: 'stripe',
		event_id: `evt_${claimId}`,
		action: '',
		event_type: 'invoice.paid',
		state: 'completed',
		attempt: 1,
		result_ref: null,
		key_expires_at: '2028-01-09T12:00:00Z',
		key_expiry: 'fixed',
		...extra,
	};
}

/** Claim ID and token read from the item, as the parameter defaults do. */
function fromItem(items: INodeExecutionData[]) {
	return {
		claimId: (index: number) => (items[index].json.idempotency as IDataObject).claim_id,
		claimToken: (index: number) => (items[index].json.idempotency as IDataObject).claim_token,
	};
}

describe('Complete', () => {
	it('posts every item in one batch, token and result reference, answers paired by position', async () => {
		const items = deepFreeze([wonItem('c1', 't1'), wonItem('c2', 't2')]);
		const ctx = createContext({
			items,
			params: {
				operation: 'complete',
				...fromItem(items),
				resultRef: (i: number) => (i === 0 ? 'inv_9' : ''),
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1', { result_ref: 'inv_9' }), record('c2')],
		});

		const outputs = await run(ctx);

		expect(requests(ctx)).toEqual([
			expect.objectContaining({
				method: 'POST',
				url: `${BASE_URL}/v1/claims/complete/batch`,
				body: {
					claims: [
						{ claim_id: 'c1', claim_token: 't1', result_ref: 'inv_9' },
						{ claim_id: 'c2', claim_token: 't2' },
					],
				},
			}),
		]);
		expect(outputs).toHaveLength(1);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(outputs[0].map((item) => (item.json.idempotency as IDataObject).claim_id)).toEqual([
			'c1',
			'c2',
		]);
	});

	it("lays the record over the item's idempotency of the same claim, keeping token and outcome", async () => {
		const items = deepFreeze([wonItem('c1', 't1')]);
		const ctx = createContext({
			items,
			params: { operation: 'complete', ...fromItem(items), resultRef: '' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1', { result_ref: 'inv_9' })],
		});

		const [[out]] = await run(ctx);

		expect(out.json.body).toEqual({ id: 'evt_c1' });
		expect(out.json.idempotency).toEqual({
			key: 'stripe:evt_c1',
			source: 'stripe',
			event_id: 'evt_c1',
			action: '',
			claim_id: 'c1',
			claim_token: 't1',
			attempt: 1,
			outcome: 'won',
			state: 'completed',
			result_ref: 'inv_9',
			retry_after_seconds: null,
			next_attempt_at: null,
			lease_until: null,
			key_expires_at: '2028-01-09T12:00:00Z',
			key_expiry: 'fixed',
			event_type: 'invoice.paid',
		});
		expect((items[0].json.idempotency as IDataObject).state).toBe('processing');
	});

	it('refuses an empty claim token before calling the sidecar', async () => {
		const items = [{ json: { body: {} } }];
		const ctx = createContext({
			items,
			params: { operation: 'complete', claimId: 'c1', claimToken: '', resultRef: '' },
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;
		expect(failure).toBeInstanceOf(NodeOperationError);
		expect(failure.message).toBe('Claim Token is empty [item 0]');
		expect(failure.context.itemIndex).toBe(0);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('reports a superseded token as lease lost, for its item', async () => {
		const items = [wonItem('c1', 't1'), wonItem('c2', 'old')];
		const ctx = createContext({
			items,
			params: { operation: 'complete', ...fromItem(items), resultRef: '' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1'), { error: { code: 'lease_lost', message: 'claim token superseded' } }],
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe('Lease lost: this claim token is no longer current [item 1]');
		expect(failure.httpCode).toBe('409');
		expect(failure.context.itemIndex).toBe(1);
		expect(requests(ctx)).toHaveLength(1);
	});
});

describe('Fail, Extend Lease, Lookup, Resolve', () => {
	it('Fail posts the error message and retry kind', async () => {
		const items = [wonItem('c1', 't1')];
		const ctx = createContext({
			items,
			params: {
				operation: 'fail',
				...fromItem(items),
				errorMessage: 'SMTP 451',
				retryKind: 'retryable',
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1', { state: 'retryable_failed', last_error: 'SMTP 451' })],
		});
		const [[out]] = await run(ctx);
		expect(requests(ctx)[0]).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/claims/fail/batch`,
			body: {
				claims: [{ claim_id: 'c1', claim_token: 't1', error: 'SMTP 451', retry: 'retryable' }],
			},
		});
		expect(out.json.idempotency).toMatchObject({ state: 'retryable_failed', claim_token: 't1' });
	});

	it('Extend Lease posts the token and lease seconds', async () => {
		const items = [wonItem('c1', 't1')];
		const ctx = createContext({
			items,
			params: { operation: 'extendLease', ...fromItem(items), leaseSeconds: 900 },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			record('c1', { state: 'processing', lease_until: '2030-01-01T00:15:00Z' }),
		);
		const [[out]] = await run(ctx);
		expect(requests(ctx)[0]).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/claims/c1/extend`,
			body: { claim_token: 't1', lease_seconds: 900 },
		});
		expect(out.json.idempotency).toMatchObject({
			claim_token: 't1',
			lease_until: '2030-01-01T00:15:00Z',
		});
	});

	it('Lookup by claim ID gets the record, keeping the ID one path segment', async () => {
		const items = [{ json: { note: 'reconcile' } }];
		const ctx = createContext({
			items,
			params: { operation: 'lookup', lookupBy: 'claimId', claimId: 'a/b c' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			record('a/b c', { deliveries: [{ at: '2030-01-01T00:00:00Z', outcome: 'won', attempt: 1 }] }),
		);
		const [[out]] = await run(ctx);
		expect(requests(ctx)[0]).toMatchObject({
			method: 'GET',
			url: `${BASE_URL}/v1/claims/a%2Fb%20c`,
		});
		expect(requests(ctx)[0]).not.toHaveProperty('body');
		expect(out.json.note).toBe('reconcile');
		expect(out.json.idempotency).toMatchObject({
			key: 'stripe:evt_a/b c',
			deliveries: [{ outcome: 'won' }],
		});
		expect(out.json.idempotency).not.toHaveProperty('idempotency_key');
	});

	it('Lookup by source and event ID queries /v1/claims, with the action when set', async () => {
		const items = [{ json: {} }, { json: {} }];
		const ctx = createContext({
			items,
			params: {
				operation: 'lookup',
				lookupBy: 'eventKey',
				source: ' stripe ',
				eventId: 'evt_1',
				actionName: (i: number) => (i === 0 ? 'send-email' : ''),
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(record('c1'));
		await run(ctx);
		expect(requests(ctx).map((r) => [r.method, r.url, r.qs])).toEqual([
			[
				'GET',
				`${BASE_URL}/v1/claims`,
				{ source: 'stripe', event_id: 'evt_1', action: 'send-email' },
			],
			['GET', `${BASE_URL}/v1/claims`, { source: 'stripe', event_id: 'evt_1' }],
		]);
	});

	it('Lookup replaces the idempotency of a different claim instead of merging it', async () => {
		const items = [wonItem('c1', 't1')];
		const ctx = createContext({
			items,
			params: { operation: 'lookup', lookupBy: 'claimId', claimId: 'c2' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(record('c2'));
		const [[out]] = await run(ctx);
		expect(out.json.idempotency).toMatchObject({
			claim_id: 'c2',
			claim_token: null,
			outcome: null,
		});
	});

	it('Resolve posts outcome, note and result reference', async () => {
		const items = [{ json: { idempotency: { claim_id: 'c1', state: 'unknown' } } }];
		const ctx = createContext({
			items,
			params: {
				operation: 'resolve',
				claimId: 'c1',
				resolveOutcome: 'completed',
				resultRef: 'inv_9',
				note: 'invoice exists in billing',
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			record('c1', { state: 'completed' }),
		);
		await run(ctx);
		expect(requests(ctx)[0]).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/claims/c1/resolve`,
			body: { outcome: 'completed', note: 'invoice exists in billing', result_ref: 'inv_9' },
		});
	});
});

describe('Single-output operations and failures', () => {
	it('reports every item, then stops at the first failing one when the node does not continue on fail', async () => {
		const items = [wonItem('c1', 't1'), wonItem('c2', 't2'), wonItem('c3', 't3')];
		const ctx = createContext({
			items,
			params: { operation: 'complete', ...fromItem(items), resultRef: '' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				record('c1'),
				{ error: { code: 'not_found', message: 'no such claim' } },
				record('c3'),
			],
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toBe('Claim not found [item 1]');
		expect(failure.context.itemIndex).toBe(1);
		// The effects have run: c3 is reported although c2 failed before it.
		expect(requests(ctx)).toHaveLength(1);
		expect((requests(ctx)[0].body as { claims: unknown[] }).claims).toHaveLength(3);
	});

	it('still reports the other items when one cannot be sent, then stops at it', async () => {
		const items: INodeExecutionData[] = [
			wonItem('c1', 't1'),
			{ json: { body: {} } },
			wonItem('c3', 't3'),
		];
		const ctx = createContext({
			items,
			params: {
				operation: 'complete',
				claimId: (i: number) => (items[i].json.idempotency as IDataObject | undefined)?.claim_id,
				claimToken: (i: number) =>
					(items[i].json.idempotency as IDataObject | undefined)?.claim_token,
				resultRef: '',
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1'), record('c3')],
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;
		expect(failure.message).toBe('Claim ID is empty [item 1]');
		expect(failure.context.itemIndex).toBe(1);
		expect(requests(ctx)[0].body).toEqual({
			claims: [
				{ claim_id: 'c1', claim_token: 't1' },
				{ claim_id: 'c3', claim_token: 't3' },
			],
		});
	});

	it('with continue on fail, keeps going and outputs the failed item with its error', async () => {
		const items: INodeExecutionData[] = deepFreeze([
			wonItem('c1', 't1'),
			{ json: { body: { id: 'evt_x' } } },
			wonItem('c3', 't3'),
		]);
		const ctx = createContext({
			items,
			continueOnFail: true,
			params: {
				operation: 'complete',
				claimId: (i: number) => (items[i].json.idempotency as IDataObject | undefined)?.claim_id,
				claimToken: (i: number) =>
					(items[i].json.idempotency as IDataObject | undefined)?.claim_token,
				resultRef: '',
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [record('c1'), record('c3')],
		});
		const outputs = await run(ctx);
		expect(outputs).toHaveLength(1);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([
			{ item: 0 },
			{ item: 1 },
			{ item: 2 },
		]);
		const failed = outputs[0][1];
		expect(failed.json).toEqual({ error: 'Claim ID is empty [item 1]' });
		expect(failed.error).toBeInstanceOf(NodeOperationError);
		expect(outputs[0][2].json.idempotency).toMatchObject({ claim_id: 'c3', state: 'completed' });
		expect(ctx.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
	});
});
