import type { IDataObject, JsonObject } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { AxiosError, BASE_URL, NODE, createContext, requests, run } from './helpers';

/** What n8n's HTTP helper throws for an error answer: the client's error wrapped in a NodeApiError. */
function answered(status: number, data: unknown): NodeApiError {
	return new NodeApiError(
		NODE,
		new AxiosError(`Request failed with status code ${status}`, 'ERR_BAD_REQUEST', {
			status,
			data,
		}) as unknown as JsonObject,
	);
}

/** The sidecar's own 404 for a claim it does not have. */
const claimdNotFound = () =>
	answered(404, { error: { code: 'not_found', message: 'no such claim' } });

function record(extra: IDataObject = {}): IDataObject {
	return {
		claim_id: 'c1',
		idempotency_key: 'stripe:evt_1',
		source: 'stripe',
		event_id: 'evt_1',
		action: '',
		state: 'completed',
		attempt: 2,
		max_attempts: 5,
		lease_policy: 'review',
		result_ref: 'inv_9',
		conflict_count: 0,
		created_at: '2030-01-01T00:00:00Z',
		updated_at: '2030-01-01T00:01:00Z',
		deliveries: [{ at: '2030-01-01T00:00:00Z', outcome: 'won', attempt: 1 }],
		...extra,
	};
}

const byKey = {
	operation: 'lookup',
	lookupBy: 'eventKey',
	source: 'stripe',
	eventId: 'evt_1',
	actionName: '',
};

describe('Lookup of an event never claimed', () => {
	it('gives an item with found false by default, naming what was looked up', async () => {
		const items = [{ json: { note: 'from the operator' } }];
		const ctx = createContext({ items, params: byKey });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(claimdNotFound());

		const [[out]] = await run(ctx);

		expect(out.json.note).toBe('from the operator');
		expect(out.json.idempotency).toMatchObject({
			found: false,
			source: 'stripe',
			event_id: 'evt_1',
			action: '',
			claim_id: null,
			state: null,
			claim_token: null,
		});
		expect(out.pairedItem).toEqual({ item: 0 });
	});

	it('names the claim ID looked up by ID', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({
			items,
			params: { operation: 'lookup', lookupBy: 'claimId', claimId: 'c9' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(claimdNotFound());
		const [[out]] = await run(ctx);
		expect(out.json.idempotency).toMatchObject({ found: false, claim_id: 'c9', state: null });
	});

	it('fails the item with "Claim not found" when Return Not Found as Item is off', async () => {
		const items = [{ json: {} }, { json: {} }];
		const ctx = createContext({ items, params: { ...byKey, notFoundAsItem: false } });
		ctx.helpers.httpRequestWithAuthentication
			.mockResolvedValueOnce(record())
			.mockRejectedValueOnce(claimdNotFound());
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe('Claim not found [item 1]');
		expect(failure.context.itemIndex).toBe(1);
	});

	it('never takes the 404 of another server at the Base URL for a claim not found', async () => {
		for (const body of [
			'<html><body>404 Not Found</body></html>',
			{ code: 404, message: 'The requested webhook is not registered.' },
			'',
		]) {
			const items = [{ json: {} }];
			const ctx = createContext({ items, params: byKey });
			ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(answered(404, body));
			const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
			expect(failure).toBeInstanceOf(NodeApiError);
			expect(failure.message).toBe(
				'The Base URL does not point at an Idempotent Claim sidecar [item 0]',
			);
			expect(failure.description).toContain('GET /v1/claims answered HTTP 404');
			expect(failure.description).toContain('http://claimd:8080');
			expect(failure.description).toContain(BASE_URL);
		}
	});

	it('marks a claim found with found true, the whole record by default', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: byKey });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(record());
		const [[out]] = await run(ctx);
		expect(out.json.idempotency).toMatchObject({
			found: true,
			key: 'stripe:evt_1',
			state: 'completed',
			deliveries: [{ outcome: 'won' }],
		});
		expect(requests(ctx)[0]).toMatchObject({ method: 'GET', url: `${BASE_URL}/v1/claims` });
	});
});

describe('Lookup with Simplify', () => {
	const SHORT = [
		'claim_id',
		'source',
		'event_id',
		'action',
		'state',
		'result_ref',
		'attempt',
		'lease_until',
		'updated_at',
		'found',
	];

	it('keeps only the short set of fields, found included', async () => {
		const items = [{ json: { body: { id: 'evt_1' } } }];
		const ctx = createContext({ items, params: { ...byKey, simplify: true } });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(record());
		const [[out]] = await run(ctx);
		expect(Object.keys(out.json.idempotency as IDataObject).sort()).toEqual([...SHORT].sort());
		expect(out.json.idempotency).toEqual({
			claim_id: 'c1',
			source: 'stripe',
			event_id: 'evt_1',
			action: '',
			state: 'completed',
			result_ref: 'inv_9',
			attempt: 2,
			lease_until: null,
			updated_at: '2030-01-01T00:01:00Z',
			found: true,
		});
		expect(out.json.body).toEqual({ id: 'evt_1' });
	});

	it('simplifies a claim not found the same way', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: { ...byKey, simplify: true } });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(claimdNotFound());
		const [[out]] = await run(ctx);
		expect(Object.keys(out.json.idempotency as IDataObject).sort()).toEqual([...SHORT].sort());
		expect(out.json.idempotency).toMatchObject({ found: false, event_id: 'evt_1', state: null });
	});
});
