import type { IDataObject } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { runsAsTool } from '../nodes/IdempotentClaim/actions/router';
import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { NODE, claimParams, claimResult, createContext, run, webhookItems } from './helpers';

/** The node as n8n offers it to an AI agent: its type with "Tool" appended. */
const TOOL_NODE = {
	...NODE,
	type: 'n8n-nodes-idempotent-claim.idempotentClaimTool',
	typeVersion: 2,
};

describe('run as an AI agent tool', () => {
	it('is offered as a tool', () => {
		expect(new IdempotentClaim().description.usableAsTool).toBe(true);
	});

	it('knows the tool variant of its type, whatever the package prefix', () => {
		expect(runsAsTool(TOOL_NODE)).toBe(true);
		expect(runsAsTool({ ...NODE, type: 'CUSTOM.idempotentClaimTool' })).toBe(true);
		expect(runsAsTool({ ...NODE, typeVersion: 2 })).toBe(false);
		expect(runsAsTool({ ...NODE, type: 'n8n-nodes-other.myIdempotentClaimTool' })).toBe(false);
	});

	it('puts every claim outcome on the first output, which n8n hands the agent', async () => {
		const items = webhookItems(['evt_won', 'evt_dup', 'evt_conflict', 'evt_busy']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getNode.mockReturnValue(TOOL_NODE);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_won', 'won'),
				claimResult('evt_dup', 'duplicate', { result_ref: 'inv_1' }),
				claimResult('evt_conflict', 'conflict'),
				claimResult('evt_busy', 'in_progress', { retry_after_seconds: 30 }),
			],
		});

		const outputs = await run(ctx);

		expect(outputs).toHaveLength(1);
		expect(outputs[0].map((item) => (item.json.idempotency as IDataObject).outcome)).toEqual([
			'won',
			'duplicate',
			'conflict',
			'in_progress',
		]);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([
			{ item: 0 },
			{ item: 1 },
			{ item: 2 },
			{ item: 3 },
		]);
	});

	it('as a regular node still routes the outcomes to their own outputs', async () => {
		const items = webhookItems(['evt_won', 'evt_dup']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getNode.mockReturnValue({ ...NODE, typeVersion: 2 });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_won', 'won'), claimResult('evt_dup', 'duplicate')],
		});
		const outputs = await run(ctx);
		expect(outputs.map((output) => output.length)).toEqual([1, 1, 0, 0, 0]);
	});

	it('a failed claim stops the tool run with its error, for n8n to hand the agent', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getNode.mockReturnValue(TOOL_NODE);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				{ error: { code: 'invalid', message: 'unknown source', field: 'claims[0].source' } },
			],
		});
		await expect(run(ctx)).rejects.toThrow('Invalid Source (source): unknown source [item 0]');
	});
});
