import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { claimParams, claimResult, createContext, run, webhookItems } from './helpers';
import { event, reply, runTrigger, triggerContext } from './triggerHelpers';

// Per-key expiry: claimd says in every claim answer until when it keeps the
// key (key_expires_at, RFC 3339 UTC) and how exact that is (key_expiry:
// fixed | not_before). The Claim node's and the trigger's items carry both
// under `idempotency` as claimd sends them, null when there is no record (a
// claim error, a test event).

const OPEN = { key_expires_at: '2028-01-10T12:00:00.123456Z', key_expiry: 'not_before' };
const FIXED = { key_expires_at: '2028-01-09T12:00:00Z', key_expiry: 'fixed' };

function sidecar(item: INodeExecutionData): IDataObject {
	return item.json.idempotency as IDataObject;
}

describe('Claim items carry the key expiry', () => {
	it('as claimd sends it per outcome, and null for an item claimd answered with an error', async () => {
		const items = webhookItems(['evt_won', 'evt_dup', 'evt_conflict', 'evt_err']);
		const ctx = createContext({
			items,
			params: claimParams(items, { separateConflictOutputs: true }),
			continueOnFail: true,
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_won', 'won', OPEN),
				claimResult('evt_dup', 'duplicate', FIXED),
				claimResult('evt_conflict', 'conflict', FIXED),
				{ error: { code: 'invalid', message: 'unknown source', field: 'claims[3].source' } },
			],
		});
		const outputs = await run(ctx);

		expect(sidecar(outputs[0][0])).toMatchObject({ outcome: 'won', ...OPEN });
		expect(sidecar(outputs[1][0])).toMatchObject({ outcome: 'duplicate', ...FIXED });
		expect(sidecar(outputs[2][0])).toMatchObject({ outcome: 'conflict', ...FIXED });
		const failed = outputs
			.flat()
			.find((item) => (item.pairedItem as IDataObject | undefined)?.item === 3);
		expect(failed?.json.error).toBeTruthy();
		expect(failed?.json.idempotency).toBeUndefined();
	});

	it('has both keys, null, when claimd did not send them (an older claimd)', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		const old = claimResult('evt_1', 'won');
		delete old.key_expires_at;
		delete old.key_expiry;
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ results: [old] });
		const outputs = await run(ctx);
		expect(sidecar(outputs[0][0])).toMatchObject({ key_expires_at: null, key_expiry: null });
	});

	it('Lookup lays the record with its key expiry over the item', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({
			items,
			params: { operation: 'lookup', lookupBy: 'claimId', claimId: 'c1' },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			claim_id: 'c1',
			idempotency_key: 'stripe:evt_1',
			source: 'stripe',
			event_id: 'evt_1',
			action: '',
			state: 'completed',
			attempt: 1,
			...FIXED,
		});
		const [[out]] = await run(ctx);
		expect(sidecar(out)).toMatchObject({ found: true, ...FIXED });
	});
});

describe('Trigger items carry the key expiry', () => {
	it('of each won event as claimd sends it', async () => {
		const { ctx } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won', OPEN)]),
		);
		const result = await runTrigger(ctx);
		const [item] = result.workflowData?.[0] ?? [];
		expect(sidecar(item)).toMatchObject({ outcome: 'won', claim_token: 'token-evt_1', ...OPEN });
	});

	it('not on a test item: nothing was claimed', async () => {
		const { ctx } = triggerContext({ mode: 'manual' });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('test', [event('evt_1', 'won', OPEN)]),
		);
		const result = await runTrigger(ctx);
		const [item] = result.workflowData?.[0] ?? [];
		expect(sidecar(item)).toMatchObject({
			outcome: 'test',
			claim_token: null,
			key_expires_at: null,
			key_expiry: null,
		});
	});
});
