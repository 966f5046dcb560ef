import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import {
	BASE_URL,
	claimParams,
	claimResult,
	createContext,
	deepFreeze,
	requests,
	run,
	webhookItems,
} from './helpers';

const OUTCOMES = [
	'won',
	'duplicate',
	'in_progress',
	'retry_later',
	'conflict',
	'stale',
	'dead_lettered',
	'unknown',
];

function claimsOf(ctx: ReturnType<typeof createContext>): IDataObject[] {
	const body = requests(ctx)[0].body as { claims: IDataObject[] };
	return body.claims;
}

function eventIds(output: INodeExecutionData[]): string[] {
	return output.map((item) => (item.json.idempotency as IDataObject).event_id as string);
}

describe('Claim request shape', () => {
	it('sends all items of the execution in one batch call, in order', async () => {
		const items = webhookItems(['evt_1', 'evt_2', 'evt_3']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: ['evt_1', 'evt_2', 'evt_3'].map((id) => claimResult(id, 'won')),
		});

		await run(ctx);

		expect(ctx.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
		const [credentialType, options] = ctx.helpers.httpRequestWithAuthentication.mock.calls[0];
		expect(credentialType).toBe('idempotentClaimApi');
		expect(options).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/claims/batch`,
			json: true,
		});
		expect(options.headers).not.toHaveProperty('Authorization');
		expect(claimsOf(ctx)).toEqual(
			items.map((item, index) => ({
				source: 'stripe',
				event_id: (item.json.body as IDataObject).id,
				payload: { body: item.json.body },
				lease_seconds: 300,
				execution_id: 'exec-42',
				request_id: `exec-42:Idempotent Claim:0:${index}`,
			})),
		);
	});

	it("sends the execution's mode, so a retried execution's copy reads as an operator replay", async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getMode.mockReturnValue('retry');
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'duplicate')],
		});
		await run(ctx);
		expect(claimsOf(ctx)[0]).toMatchObject({ execution_id: 'exec-42', execution_mode: 'retry' });
	});

	it("sends the workflow's ID on every claim, and no version (n8n gives a node none)", async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getWorkflow.mockReturnValue({ id: 'wf-7Yq2', name: 'Orders', active: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won'), claimResult('evt_2', 'duplicate')],
		});
		await run(ctx);
		for (const claim of claimsOf(ctx)) {
			expect(claim.workflow_id).toBe('wf-7Yq2');
			expect(claim).not.toHaveProperty('workflow_version');
		}
	});

	it('sends no workflow ID when n8n gives none (an unsaved workflow)', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getWorkflow.mockReturnValue({ name: 'Unsaved', active: false });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await run(ctx);
		expect(claimsOf(ctx)[0]).not.toHaveProperty('workflow_id');
	});

	it('joins the base URL without a double slash', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items), baseUrl: `${BASE_URL}/` });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await run(ctx);
		expect(requests(ctx)[0].url).toBe(`${BASE_URL}/v1/claims/batch`);
	});

	it('makes no call for an empty input', async () => {
		const ctx = createContext({ items: [], params: claimParams([]) });
		expect(await run(ctx)).toEqual([[], []]);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('sends key_parts for "Composite of Fields", numbers as text', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				keyMode: 'composite',
				keyParts: { parts: [{ value: 'invoice.paid' }, { value: 'in_1' }, { value: 7 }] },
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('x', 'won')],
		});
		await run(ctx);
		const [claim] = claimsOf(ctx);
		expect(claim.key_parts).toEqual(['invoice.paid', 'in_1', '7']);
		expect(claim).not.toHaveProperty('event_id');
		expect(claim).not.toHaveProperty('key_fields');
	});

	it('sends key_fields built from the chosen item fields for "Hash of Selected Fields"', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				keyMode: 'hash',
				keyFields: ' body.type, body.data.object.id ,body.type',
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('sha256:00', 'won')],
		});
		await run(ctx);
		const [claim] = claimsOf(ctx);
		expect(claim.key_fields).toEqual({
			'body.type': 'invoice.paid',
			'body.data.object.id': 'in_evt_1',
		});
		expect(claim).not.toHaveProperty('event_id');
		expect(claim).not.toHaveProperty('key_parts');
	});

	it('sends the whole item except an earlier idempotency field for "Whole Item JSON"', async () => {
		const items: INodeExecutionData[] = [
			{ json: { order: 17, status: 'paid', idempotency: { claim_token: 'earlier', attempt: 3 } } },
		];
		const ctx = createContext({
			items,
			params: claimParams(items, {
				eventId: 'order-17',
				payloadMode: 'item',
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('order-17', 'won')],
		});
		await run(ctx);
		expect(claimsOf(ctx)[0].payload).toEqual({ order: 17, status: 'paid' });
	});

	it('sends selected payload fields keyed by path, and no payload for "None"', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				payloadMode: (index: number) => (index === 0 ? 'fields' : 'none'),
				payloadFields: 'body.type, body.data.object.amount',
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won'), claimResult('evt_2', 'won')],
		});
		await run(ctx);
		const [first, second] = claimsOf(ctx);
		expect(first.payload).toEqual({ 'body.type': 'invoice.paid', 'body.data.object.amount': 100 });
		expect(second).not.toHaveProperty('payload');
	});

	it('sends the optional fields only when they are set', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				eventType: (index: number) => (index === 0 ? 'invoice.paid' : ''),
				actionName: (index: number) => (index === 0 ? 'create-invoice' : ''),
				leaseSeconds: 60,
				options: (index: number) => (index === 0 ? { objectId: 'in_1', objectVersion: 12 } : {}),
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won'), claimResult('evt_2', 'won')],
		});
		await run(ctx);
		const [first, second] = claimsOf(ctx);
		expect(first).toMatchObject({
			event_type: 'invoice.paid',
			action: 'create-invoice',
			object_id: 'in_1',
			object_version: 12,
			lease_seconds: 60,
		});
		for (const field of ['event_type', 'action', 'object_id', 'object_version']) {
			expect(second).not.toHaveProperty(field);
		}
	});
});

describe('Claim output routing', () => {
	const ids = OUTCOMES.map((outcome) => `evt_${outcome}`);

	async function routeAll(separate: boolean) {
		const items = deepFreeze(webhookItems(ids));
		const ctx = createContext({
			items,
			params: claimParams(items, { separateConflictOutputs: separate }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: OUTCOMES.map((outcome, index) =>
				claimResult(
					ids[index],
					outcome,
					outcome === 'in_progress' || outcome === 'retry_later'
						? { retry_after_seconds: 30, next_attempt_at: '2030-01-01T00:00:30Z' }
						: {},
				),
			),
		});
		return { items, outputs: await run(ctx) };
	}

	it('routes won to Won and every other outcome to Duplicate when the toggle is off', async () => {
		const { outputs } = await routeAll(false);
		expect(outputs).toHaveLength(2);
		expect(eventIds(outputs[0])).toEqual(['evt_won']);
		expect(eventIds(outputs[1])).toEqual(ids.filter((id) => id !== 'evt_won'));
	});

	it('routes conflict and in-progress outcomes to their own outputs when the toggle is on', async () => {
		const { outputs } = await routeAll(true);
		expect(outputs).toHaveLength(4);
		expect(eventIds(outputs[0])).toEqual(['evt_won']);
		expect(eventIds(outputs[1])).toEqual([
			'evt_duplicate',
			'evt_stale',
			'evt_dead_lettered',
			'evt_unknown',
		]);
		expect(eventIds(outputs[2])).toEqual(['evt_conflict']);
		expect(eventIds(outputs[3])).toEqual(['evt_in_progress', 'evt_retry_later']);
	});

	it('never sends an outcome it does not know to Won', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { separateConflictOutputs: true }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'something_new')],
		});
		const outputs = await run(ctx);
		expect(outputs[1]).toHaveLength(1);
		expect(outputs[0]).toHaveLength(0);
	});

	it("keeps each item's JSON and binary, adds the idempotency sidecar, pairs it, and leaves the input untouched", async () => {
		const items = webhookItems(['evt_won', 'evt_in_progress']);
		items[0].binary = { file: { data: 'aGVsbG8=', mimeType: 'text/plain' } };
		const before = structuredClone(items);
		deepFreeze(items);
		const ctx = createContext({
			items,
			params: claimParams(items, { separateConflictOutputs: true }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_won', 'won'),
				claimResult('evt_in_progress', 'in_progress', {
					retry_after_seconds: 30,
					next_attempt_at: '2030-01-01T00:00:30Z',
				}),
			],
		});
		const outputs = await run(ctx);

		expect(items).toEqual(before);
		const won = outputs[0][0];
		expect(won.pairedItem).toEqual({ item: 0 });
		expect(won.binary).toBe(items[0].binary);
		expect(won.json.body).toEqual(items[0].json.body);
		expect(won.json.headers).toEqual(items[0].json.headers);
		expect(won.json.idempotency).toEqual({
			key: 'stripe:evt_won',
			source: 'stripe',
			event_id: 'evt_won',
			action: '',
			claim_id: 'claim-evt_won',
			claim_token: 'token-evt_won',
			attempt: 1,
			outcome: 'won',
			state: 'processing',
			result_ref: null,
			retry_after_seconds: null,
			next_attempt_at: null,
			lease_until: '2030-01-01T00:00:00Z',
			key_expires_at: '2028-01-10T12:00:00Z',
			key_expiry: 'not_before',
		});
		const waiting = outputs[3][0];
		expect(waiting.pairedItem).toEqual({ item: 1 });
		expect(waiting.json.idempotency).toMatchObject({
			outcome: 'in_progress',
			claim_token: null,
			retry_after_seconds: 30,
			next_attempt_at: '2030-01-01T00:00:30Z',
		});
	});
});

describe('Claim failures', () => {
	it('fails before any call when an item cannot be claimed, naming the item', async () => {
		const items = webhookItems(['evt_1', '', 'evt_3']);
		const ctx = createContext({ items, params: claimParams(items) });
		const failure = await run(ctx).catch((error: unknown) => error);
		expect(failure).toBeInstanceOf(NodeOperationError);
		expect((failure as NodeOperationError).message).toBe('Event ID is empty ("") [item 1]');
		expect((failure as NodeOperationError).context.itemIndex).toBe(1);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('names a missing hashed field instead of hashing nothing', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { keyMode: 'hash', keyFields: 'body.data.object.customer' }),
		});
		await expect(run(ctx)).rejects.toThrow(
			'Fields to Hash: field "body.data.object.customer" is missing from the item',
		);
	});

	it('rejects an empty key part', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				keyMode: 'composite',
				keyParts: { parts: [{ value: 'a' }, { value: '' }] },
			}),
		});
		await expect(run(ctx)).rejects.toThrow('Key part 2 is empty');
	});

	it('with continue on fail, claims the good items and sends the bad one to Duplicate with its error', async () => {
		const items = webhookItems(['evt_1', '', 'evt_3']);
		const ctx = createContext({ items, params: claimParams(items), continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won'), claimResult('evt_3', 'duplicate')],
		});
		const outputs = await run(ctx);

		expect(claimsOf(ctx).map((claim) => claim.event_id)).toEqual(['evt_1', 'evt_3']);
		expect(eventIds(outputs[0])).toEqual(['evt_1']);
		expect(outputs[0][0].pairedItem).toEqual({ item: 0 });
		const [failed, duplicate] = outputs[1];
		expect(failed.pairedItem).toEqual({ item: 1 });
		expect(failed.json).toEqual({ error: 'Event ID is empty ("") [item 1]' });
		expect(failed.error).toBeInstanceOf(NodeOperationError);
		expect(duplicate.pairedItem).toEqual({ item: 2 });
	});

	it('with continue on fail and separate outputs, failed items go to In Progress, never to Won', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({
			items,
			params: claimParams(items, { separateConflictOutputs: true, sidecarWaitBetweenTries: 0 }),
			continueOnFail: true,
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8080'), { code: 'ECONNREFUSED' }),
		);
		const outputs = await run(ctx);
		expect(outputs[0]).toHaveLength(0);
		expect(outputs[3].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(outputs[3][0].error).toBeInstanceOf(NodeApiError);
		expect(outputs[3][0].json.error).toBe(
			`Cannot reach the Idempotent Claim sidecar at ${BASE_URL}`,
		);
	});

	it('fails the node when the batch call fails and the node does not continue on fail', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { sidecarWaitBetweenTries: 0 }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8080'), { code: 'ECONNREFUSED' }),
		);
		await expect(run(ctx)).rejects.toThrow(NodeApiError);
	});

	it('maps an error entry of the batch answer to that item only', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items), continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				{ error: { code: 'invalid', message: 'must be at most 255 bytes', field: 'event_id' } },
				claimResult('evt_2', 'won'),
			],
		});
		const outputs = await run(ctx);
		expect(eventIds(outputs[0])).toEqual(['evt_2']);
		expect(outputs[0][0].pairedItem).toEqual({ item: 1 });
		expect(outputs[1]).toHaveLength(1);
		expect(outputs[1][0].pairedItem).toEqual({ item: 0 });
		expect(outputs[1][0].json.error).toBe(
			'Invalid Event ID (event_id): must be at most 255 bytes [item 0]',
		);
	});

	it('throws the error entry with its item index when the node does not continue on fail', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_1', 'won'),
				{ error: { code: 'invalid', message: 'unknown source', field: 'claims[1].source' } },
			],
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe('Invalid Source (source): unknown source [item 1]');
		expect(failure.httpCode).toBe('422');
		expect(failure.context.itemIndex).toBe(1);
	});

	it('rejects an answer whose result count does not match the request', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await expect(run(ctx)).rejects.toThrow('Unexpected answer from the Idempotent Claim sidecar');
	});
});
