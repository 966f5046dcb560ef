import type { IDataObject, INode, INodeExecutionData, INodeParameters } from 'n8n-workflow';
import { NodeApiError, NodeHelpers, NodeOperationError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { VERDICTS } from '../nodes/IdempotentClaim/actions/claim/reconcileAnswer.operation';
import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import {
	AxiosError,
	BASE_URL,
	NODE,
	claimParams,
	claimResult,
	createContext,
	deepFreeze,
	requests,
	run,
	webhookItems,
	type Context,
	type ParamValue,
} from './helpers';

const nodeType = new IdempotentClaim();

/** The Header Auth token of the reconcile webhook, as n8n's Webhook node puts it in the item. */
const WEBHOOK_HEADER_VALUE = 'reconcile-webhook-secret-value';
const CALL = '3f0c8a52-5d0e-4a57-9d5b-0a0e6c1f1c11';
/** A claim's idempotency key as claimd makes it: ik_ and 64 hex digits (claim.IdempotencyKey). */
const KEY = `ik_${'3f1c'.repeat(16)}`;

/** An item as n8n's Webhook node outputs claimd's reconcile request. */
function reconcileRequestItem(claimId = 'c1', token = CALL): INodeExecutionData {
	return {
		json: {
			headers: { 'x-reconcile-token': WEBHOOK_HEADER_VALUE, 'user-agent': 'claimd-reconcile' },
			params: {},
			query: {},
			body: {
				type: 'idempotent_claim.reconcile',
				claim_id: claimId,
				reconcile_token: token,
				tenant: 'acme',
				source: 'orders',
				event_id: 'evt_1',
				action: '',
				attempt: 1,
				last_error: 'timeout',
				payload_hash: 'ab'.repeat(32),
				idempotency_key: KEY,
				call: 1,
				max_calls: 6,
				answer_by: '2030-01-01T00:00:30Z',
				answer_path: `/v1/claims/${claimId}/reconcile`,
			},
			webhookUrl: 'http://n8n:5678/webhook/idempotent-claim-reconciler',
			executionMode: 'production',
		},
	};
}

/** The parameters n8n stores for a node: the ones shown, with their defaults, then `values`. */
function stored(values: INodeParameters): INodeParameters {
	const node: INode = { ...NODE, typeVersion: 2, parameters: values };
	return (
		NodeHelpers.getNodeParameters(
			nodeType.description.properties,
			values,
			true,
			false,
			node,
			nodeType.description,
		) ?? {}
	);
}

/**
 * A context whose node stores `values` with the defaults n8n adds, so the
 * node reads its parameters as in n8n: the default expressions
 * `={{ $json.body.claim_id }}` and `={{ $json.body.reconcile_token }}` from
 * each item (plain paths, read without n8n's expression engine), the rest
 * as stored.
 */
function storedContext(
	values: INodeParameters,
	items: INodeExecutionData[],
	options: { continueOnFail?: boolean } = {},
): Context {
	const parameters = stored({ operation: 'reconcileAnswer', ...values });
	const ctx = createContext({
		items,
		params: parameters as Record<string, ParamValue>,
		continueOnFail: options.continueOnFail,
	});
	ctx.getNode.mockReturnValue({ ...NODE, typeVersion: 2, parameters });
	return ctx;
}

/** The claim record claimd answers to a reconcile answer, with its reconcile state. */
function answered(claimId: string, extra: IDataObject = {}): IDataObject {
	return {
		claim_id: claimId,
		idempotency_key: KEY,
		source: 'orders',
		event_id: 'evt_1',
		action: '',
		state: 'completed',
		attempt: 1,
		result_ref: 'pay_1',
		key_expires_at: '2028-01-09T12:00:00Z',
		key_expiry: 'fixed',
		reconcile: {
			state: 'answered',
			reconciler: 'crm',
			calls: 1,
			max_calls: 6,
			verdict: 'done',
			last_error: null,
			next_call_at: null,
		},
		...extra,
	};
}

function sidecarError(status: number, code: string, message: string, field?: string): AxiosError {
	return new AxiosError(`Request failed with status code ${status}`, 'ERR_BAD_REQUEST', {
		status,
		data: { error: { code, message, ...(field ? { field } : {}) } },
	});
}

describe('Answer Reconcile: parameters', () => {
	const byName = (name: string) =>
		nodeType.description.properties.filter(
			(property) =>
				property.name === name &&
				(property.displayOptions?.show?.operation ?? []).includes('reconcileAnswer'),
		);

	it('reads Claim ID and Reconcile Token from the body of the Webhook item by default', () => {
		expect(byName('claimId')[0].default).toBe('={{ $json.body.claim_id }}');
		expect(byName('reconcileToken')[0].default).toBe('={{ $json.body.reconcile_token }}');
		expect(byName('reconcileToken')[0].typeOptions).toEqual({ password: true });
		expect(stored({ operation: 'reconcileAnswer' })).toMatchObject({
			claimId: '={{ $json.body.claim_id }}',
			reconcileToken: '={{ $json.body.reconcile_token }}',
			verdict: 'done',
			resultRef: '',
			note: '',
		});
	});

	it('offers the three verdicts claimd takes', () => {
		const verdict = byName('verdict')[0];
		expect((verdict.options ?? []).map((option) => (option as { value: string }).value)).toEqual([
			...VERDICTS,
		]);
		expect(VERDICTS).toEqual(['done', 'not_done', 'still_unknown']);
	});

	it('shows Result Reference for Done and for a verdict from an expression, not for the others', () => {
		expect(stored({ operation: 'reconcileAnswer', verdict: 'done' })).toHaveProperty('resultRef');
		expect(
			stored({ operation: 'reconcileAnswer', verdict: "={{ $json.found ? 'done' : 'not_done' }}" }),
		).toHaveProperty('resultRef');
		for (const verdict of ['not_done', 'still_unknown']) {
			expect(stored({ operation: 'reconcileAnswer', verdict })).not.toHaveProperty('resultRef');
		}
	});
});

describe('Answer Reconcile: request', () => {
	it("posts the token, verdict, result reference and note of claimd's call with the node's credential", async () => {
		const items = deepFreeze([reconcileRequestItem('c1')]);
		const ctx = storedContext({ verdict: 'done', resultRef: 'pay_1', note: 'found by key' }, items);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answered('c1'));

		await run(ctx);

		const calls = ctx.helpers.httpRequestWithAuthentication.mock.calls;
		expect(calls).toHaveLength(1);
		// The credential type the node declares: its Bearer API key selects the tenant.
		expect(calls[0][0]).toBe('idempotentClaimApi');
		expect(calls[0][2]).toMatchObject({
			credentialsDecrypted: { type: 'idempotentClaimApi', data: { apiKey: 'test-key' } },
		});
		expect(requests(ctx)[0]).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/claims/c1/reconcile`,
			json: true,
			body: { reconcile_token: CALL, verdict: 'done', result_ref: 'pay_1', note: 'found by key' },
		});
		expect(Object.keys(requests(ctx)[0].body as IDataObject).sort()).toEqual([
			'note',
			'reconcile_token',
			'result_ref',
			'verdict',
		]);
	});

	it('sends no result reference with Not Done or Still Unknown, and no empty note', async () => {
		for (const verdict of ['not_done', 'still_unknown']) {
			const items = [reconcileRequestItem('c1')];
			// A result reference carried over from Done is not sent.
			const ctx = storedContext({ verdict }, items);
			ctx.getNodeParameter.mockImplementation(((name: string) =>
				name === 'resultRef' ? 'pay_1' : undefined) as never);
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				answered('c1', { state: verdict === 'not_done' ? 'retryable_failed' : 'unknown' }),
			);
			await run(ctx);
			expect(requests(ctx)[0].body, verdict).toEqual({ reconcile_token: CALL, verdict });
		}
	});

	it('takes a verdict from an expression, with the result reference for done', async () => {
		const items = [reconcileRequestItem('c1'), reconcileRequestItem('c2', 'tok-2')];
		const ctx = storedContext(
			{ verdict: '={{ $json.found ? "done" : "not_done" }}', resultRef: '={{ $json.ref ?? "" }}' },
			items,
		);
		// n8n evaluates the expressions; here per item.
		ctx.getNodeParameter.mockImplementation(((name: string, itemIndex: number) => {
			if (name === 'verdict') return itemIndex === 0 ? 'done' : 'not_done';
			if (name === 'resultRef') return itemIndex === 0 ? 'pay_1' : 'ignored';
			throw new Error(`unexpected ${name}`);
		}) as never);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answered('c1'));
		await run(ctx);
		expect(requests(ctx).map((request) => [request.url, request.body])).toEqual([
			[
				`${BASE_URL}/v1/claims/c1/reconcile`,
				{ reconcile_token: CALL, verdict: 'done', result_ref: 'pay_1' },
			],
			[`${BASE_URL}/v1/claims/c2/reconcile`, { reconcile_token: 'tok-2', verdict: 'not_done' }],
		]);
	});

	it('encodes the claim ID as one path segment', async () => {
		const ctx = storedContext({ claimId: 'a/../b?c', reconcileToken: 't' }, [
			reconcileRequestItem(),
		]);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answered('x'));
		await run(ctx);
		expect(requests(ctx)[0].url).toBe(`${BASE_URL}/v1/claims/a%2F..%2Fb%3Fc/reconcile`);
	});

	it('sends the answer again after a 5xx or a broken connection (the same answer is applied once)', async () => {
		const ctx = storedContext({ verdict: 'done', sidecarWaitBetweenTries: 0 }, [
			reconcileRequestItem('c1'),
		]);
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(sidecarError(503, 'unavailable', 'database unavailable'))
			.mockRejectedValueOnce(new AxiosError('socket hang up', 'ECONNRESET'))
			.mockResolvedValue(answered('c1'));
		const [[out]] = await run(ctx);
		expect(requests(ctx)).toHaveLength(3);
		expect(new Set(requests(ctx).map((request) => JSON.stringify(request.body))).size).toBe(1);
		expect(out.json.verdict).toBe('done');
	});
});

describe('Answer Reconcile: output', () => {
	it('is the answer: verdict, result reference, note, the reconcile state and the claim record; never the webhook item', async () => {
		const items = deepFreeze([reconcileRequestItem('c1')]);
		const ctx = storedContext({ verdict: 'done', resultRef: 'pay_1' }, items);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answered('c1'));

		const outputs = await run(ctx);

		expect(outputs).toHaveLength(1);
		expect(outputs[0]).toHaveLength(1);
		const [out] = outputs[0];
		expect(out.pairedItem).toEqual({ item: 0 });
		expect(out.json).toEqual({
			verdict: 'done',
			result_ref: 'pay_1',
			note: null,
			claim_id: 'c1',
			reconcile: {
				state: 'answered',
				reconciler: 'crm',
				calls: 1,
				max_calls: 6,
				verdict: 'done',
				last_error: null,
				next_call_at: null,
			},
			idempotency: {
				key: KEY,
				source: 'orders',
				event_id: 'evt_1',
				action: '',
				claim_id: 'c1',
				claim_token: null,
				attempt: 1,
				outcome: null,
				state: 'completed',
				result_ref: 'pay_1',
				retry_after_seconds: null,
				next_attempt_at: null,
				lease_until: null,
				key_expires_at: '2028-01-09T12:00:00Z',
				key_expiry: 'fixed',
			},
		});
		// As a "When Last Node Finishes" answer claimd reads the verdict from it;
		// the webhook's Header Auth token never goes back.
		expect(JSON.stringify(out.json)).not.toContain(WEBHOOK_HEADER_VALUE);
		expect(out.json).not.toHaveProperty('headers');
		expect(out.json).not.toHaveProperty('body');
	});

	it('has reconcile null when claimd answers the record without it', async () => {
		const ctx = storedContext({ verdict: 'still_unknown', note: 'search failed' }, [
			reconcileRequestItem('c1'),
		]);
		const record = answered('c1', { state: 'unknown', result_ref: null });
		delete record.reconcile;
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(record);
		const [[out]] = await run(ctx);
		expect(out.json).toMatchObject({
			verdict: 'still_unknown',
			result_ref: null,
			note: 'search failed',
			reconcile: null,
		});
		expect((out.json.idempotency as IDataObject).state).toBe('unknown');
	});

	it('reads an answer that holds the record and the reconcile state side by side', async () => {
		const ctx = storedContext({ verdict: 'not_done' }, [reconcileRequestItem('c1')]);
		const { reconcile, ...record } = answered('c1', { state: 'retryable_failed' });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ record, reconcile });
		const [[out]] = await run(ctx);
		expect(out.json.reconcile).toEqual(reconcile);
		expect(out.json.idempotency).toMatchObject({ claim_id: 'c1', state: 'retryable_failed' });
		expect(out.json.idempotency).not.toHaveProperty('record');
	});
});

describe('Answer Reconcile: errors', () => {
	it('names an empty Claim ID or Reconcile Token and sends nothing', async () => {
		const noBody: INodeExecutionData = { json: { headers: {}, body: {} } };
		let ctx = storedContext({}, [noBody]);
		let failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;
		expect(failure).toBeInstanceOf(NodeOperationError);
		expect(failure.message).toBe('Claim ID is empty [item 0]');
		expect(failure.description).toContain('$json.body');
		expect(requests(ctx)).toHaveLength(0);

		ctx = storedContext({}, [{ json: { body: { claim_id: 'c1', reconcile_token: '  ' } } }]);
		failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;
		expect(failure.message).toBe('Reconcile Token is empty [item 0]');
		expect(requests(ctx)).toHaveLength(0);
	});

	it('refuses a verdict claimd does not take, naming the parameter, never the value', async () => {
		const value = 'maybe-secret-7f3a';
		const ctx = storedContext({ verdict: value }, [reconcileRequestItem()]);
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;
		expect(failure.message).toBe('Verdict must be one of done, not_done, still_unknown [item 0]');
		expect(`${failure.message} ${failure.description ?? ''}`).not.toContain(value);
		expect(requests(ctx)).toHaveLength(0);
	});

	it("reports claimd's 409 reconcile_token_stale as a stale token, sent once", async () => {
		const ctx = storedContext({ verdict: 'done' }, [reconcileRequestItem('c1')]);
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			sidecarError(409, 'reconcile_token_stale', 'this reconcile token is not the call in flight'),
		);
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe(
			'Reconcile token stale: this reconcile call is no longer the one claimd waits for [item 0]',
		);
		expect(failure.httpCode).toBe('409');
		expect(failure.description).toContain('answer_by');
		expect(failure.description).toContain('reconcile token is not the call in flight. ');
		expect(failure.description).toContain('not applied');
		expect(`${failure.message} ${failure.description ?? ''}`).not.toContain(CALL);
		expect(failure.context.sidecar).toMatchObject({ code: 'reconcile_token_stale' });
		expect(requests(ctx)).toHaveLength(1);
	});

	it("reports claimd's 409 invalid_state as a claim settled already", async () => {
		const ctx = storedContext({ verdict: 'not_done' }, [reconcileRequestItem('c1')]);
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			sidecarError(409, 'invalid_state', 'the claim is settled already'),
		);
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toBe(
			'The reconcile answer was not applied: the claim was settled already [item 0]',
		);
		expect(failure.httpCode).toBe('409');
		expect(failure.description).toContain('the claim is settled already. ');
		expect(failure.description).toContain('Nothing was written');
		expect(requests(ctx)).toHaveLength(1);
	});

	it('names the parameter of a field claimd refuses', async () => {
		const ctx = storedContext({ verdict: 'done', resultRef: 'x' }, [reconcileRequestItem('c1')]);
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			sidecarError(422, 'invalid', 'must be at most 512 bytes', 'result_ref'),
		);
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toBe(
			'Invalid Result Reference (result_ref): must be at most 512 bytes [item 0]',
		);
		for (const [field, label] of [
			['verdict', 'Verdict'],
			['reconcile_token', 'Reconcile Token'],
		]) {
			ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
				sidecarError(400, 'invalid', 'is not valid', field),
			);
			const error = (await run(ctx).catch((e: unknown) => e)) as NodeApiError;
			expect(error.message).toBe(`Invalid ${label} (${field}): is not valid [item 0]`);
		}
	});

	it('with continue on fail, a failed answer is its item on the output and the next item is answered', async () => {
		const items = [reconcileRequestItem('c1'), reconcileRequestItem('c2', 'tok-2')];
		const ctx = storedContext({ verdict: 'done' }, items, { continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(sidecarError(409, 'reconcile_token_stale', 'stale'))
			.mockResolvedValueOnce(answered('c2'));
		const [output] = await run(ctx);
		expect(output).toHaveLength(2);
		expect(output[0].json.error).toMatch(/^Reconcile token stale/);
		expect(output[1].json).toMatchObject({ verdict: 'done', claim_id: 'c2' });
	});
});

describe('Claim: Reconciler option', () => {
	it('sends the named reconciler with the claim, trimmed', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { options: { reconciler: ' crm ' } }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await run(ctx);
		const [claim] = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claim.reconciler).toBe('crm');
	});

	it("sends none when empty: the source's reconciler applies", async () => {
		for (const options of [{}, { reconciler: '' }, { reconciler: '  ' }]) {
			const items = webhookItems(['evt_1']);
			const ctx = createContext({ items, params: claimParams(items, { options }) });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
				results: [claimResult('evt_1', 'won')],
			});
			await run(ctx);
			const [claim] = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
			expect(claim, JSON.stringify(options)).not.toHaveProperty('reconciler');
		}
	});

	it('names the option when claimd refuses the name, without repeating it', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { options: { reconciler: 'no-such-reconciler' } }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				{
					error: {
						code: 'invalid',
						message: 'must name a configured reconciler',
						field: 'claims[0].reconciler',
					},
				},
			],
		});
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure.message).toBe(
			'Invalid Reconciler (reconciler): must name a configured reconciler [item 0]',
		);
		expect(`${failure.message} ${failure.description ?? ''}`).not.toContain('no-such-reconciler');
	});

	it('is an option of Claim, documented as a name from the sources file, never a URL', () => {
		const options = nodeType.description.properties.find(
			(property) =>
				property.name === 'options' &&
				(property.displayOptions?.show?.operation ?? []).includes('claim'),
		);
		const reconciler = (options?.options ?? []).find(
			(option) => (option as { name: string }).name === 'reconciler',
		) as { type: string; default: unknown; description: string } | undefined;
		expect(reconciler).toMatchObject({ type: 'string', default: '' });
		expect(reconciler?.description).toContain('sources file');
		expect(reconciler?.description).toContain('never a URL');
	});
});
