import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { isShadowCopy } from '../nodes/IdempotentClaim/helpers/idempotency';
import {
	BASE_URL,
	claimParams,
	claimResult,
	createContext,
	requests,
	run,
	webhookItems,
} from './helpers';
import { event, reply, runTrigger, sentBody, triggerContext } from './triggerHelpers';

// Shadow mode (observe only): claimd answers every shadow claim won, with
// shadow.would_be what it decided; only a claim that would have won holds a
// token. The node sends the option, routes every item to Won, keeps the
// decision on the item, and Complete and Fail pass a copy (no token) through.

const shadowCopy = (eventId: string, wouldBe: string, cause?: string): IDataObject => {
	const won = claimResult(eventId, 'won', { shadow: { would_be: wouldBe, ...(cause ? { cause } : {}) } });
	delete won.claim_token;
	return { ...won, state: 'completed' };
};

describe('Claim in shadow mode', () => {
	it('sends shadow with every claim and routes every item to Won with the decision on it', async () => {
		const items = webhookItems(['evt_1', 'evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items, { options: { shadow: true } }) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_1', 'won', { shadow: { would_be: 'won' } }),
				shadowCopy('evt_1', 'in_progress', 'upstream_repeat'),
				shadowCopy('evt_2', 'duplicate', 'provider_retry'),
			],
		});

		const outputs = await run(ctx);

		const body = requests(ctx)[0].body as { claims: IDataObject[] };
		expect(body.claims.map((c) => c.shadow)).toEqual([true, true, true]);
		expect(outputs[0]).toHaveLength(3);
		for (const output of outputs.slice(1)) expect(output).toHaveLength(0);
		const sidecars = outputs[0].map((item) => item.json.idempotency as IDataObject);
		expect(sidecars.map((s) => s.outcome)).toEqual(['won', 'won', 'won']);
		expect(sidecars.map((s) => (s.shadow as IDataObject).would_be)).toEqual([
			'won',
			'in_progress',
			'duplicate',
		]);
		expect((sidecars[2].shadow as IDataObject).cause).toBe('provider_retry');
		expect(sidecars[0].claim_token).toBe('token-evt_1');
		expect(sidecars[1].claim_token).toBeNull();
		expect(isShadowCopy(sidecars[0])).toBe(false);
		expect(isShadowCopy(sidecars[1])).toBe(true);
	});

	it('sends no shadow without the option, and an item without shadow has no shadow key', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		const outputs = await run(ctx);
		const body = requests(ctx)[0].body as { claims: IDataObject[] };
		expect(body.claims[0]).not.toHaveProperty('shadow');
		expect(outputs[0][0].json.idempotency).not.toHaveProperty('shadow');
	});
});

describe('Complete and Fail skip a shadow copy', () => {
	const items: INodeExecutionData[] = [
		{ json: { idempotency: { claim_id: 'c1', claim_token: 't1', outcome: 'won', shadow: { would_be: 'won' } } } },
		{ json: { idempotency: { claim_id: 'c1', claim_token: null, outcome: 'won', shadow: { would_be: 'duplicate' } } } },
	];
	const sidecar = (i: number) => items[i].json.idempotency as IDataObject;

	for (const operation of ['complete', 'fail'] as const) {
		it(`${operation}: sends only the claim that holds a token; the copy passes through unchanged`, async () => {
			const ctx = createContext({
				items,
				params: {
					operation,
					claimId: (i: number) => sidecar(i).claim_id,
					claimToken: (i: number) => sidecar(i).claim_token,
					keepTryingUntil: 'off',
					...(operation === 'complete'
						? { resultRef: '' }
						: { errorMessage: 'boom', retryKind: 'retryable' }),
				},
			});
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
				results: [{ claim_id: 'c1', idempotency_key: 'stripe:evt_1', state: 'completed', attempt: 1 }],
			});

			const outputs = await run(ctx);

			const sent = requests(ctx);
			expect(sent).toHaveLength(1);
			expect(sent[0].url).toBe(`${BASE_URL}/v1/claims/${operation}/batch`);
			expect((sent[0].body as { claims: IDataObject[] }).claims).toHaveLength(1);
			expect((sent[0].body as { claims: IDataObject[] }).claims[0].claim_token).toBe('t1');
			expect(outputs[0]).toHaveLength(2);
			expect(outputs[0][1].json).toEqual(items[1].json);
			expect((outputs[0][0].json.idempotency as IDataObject).shadow).toEqual({ would_be: 'won' });
		});
	}

	it('still refuses an item without a token that is no shadow copy', async () => {
		const plain: INodeExecutionData[] = [{ json: { idempotency: { claim_id: 'c9', claim_token: null, outcome: 'duplicate' } } }];
		const ctx = createContext({
			items: plain,
			params: {
				operation: 'complete',
				claimId: 'c9',
				claimToken: '',
				resultRef: '',
				keepTryingUntil: 'off',
			},
			continueOnFail: true,
		});
		const outputs = await run(ctx);
		expect(requests(ctx)).toHaveLength(0);
		expect(outputs[0][0].error?.message).toContain('Claim Token');
	});
});

describe('the trigger in shadow mode', () => {
	it('asks claimd for shadow and starts an execution for a copy, its item saying what it would have been', async () => {
		const { ctx } = triggerContext({ params: { options: { shadow: true } } });
		const copy = event('evt_1', 'won', { shadow: { would_be: 'duplicate', cause: 'provider_retry' } });
		delete copy.claim_token;
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(reply('won', [copy]));

		const result = await runTrigger(ctx);

		expect(sentBody(ctx).shadow).toBe(true);
		expect(result.workflowData).toHaveLength(1);
		const idempotency = result.workflowData?.[0][0].json.idempotency as IDataObject;
		expect(idempotency.outcome).toBe('won');
		expect(idempotency.claim_token).toBeNull();
		expect(idempotency.shadow).toEqual({ would_be: 'duplicate', cause: 'provider_retry' });
		expect(isShadowCopy(idempotency)).toBe(true);
	});

	it('sends no shadow without the option', async () => {
		const { ctx } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(reply('won', [event('evt_1', 'won')]));
		await runTrigger(ctx);
		expect(sentBody(ctx)).not.toHaveProperty('shadow');
	});
});
