import type { IDataObject, INodeProperties } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { claimParams, claimResult, createContext, requests, run, webhookItems } from './helpers';

const { properties } = new IdempotentClaim().description;

function sentClaims(ctx: ReturnType<typeof createContext>): IDataObject[] {
	return (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
}

describe('When the Time Limit Passes Without Complete (lease policy)', () => {
	it("sends review or reclaim, and nothing for the source's setting", async () => {
		const items = webhookItems(['evt_1', 'evt_2', 'evt_3', 'evt_4']);
		const policies = [undefined, 'source', 'review', 'reclaim'];
		const ctx = createContext({
			items,
			params: claimParams(items, {
				options: (i: number) => (policies[i] === undefined ? {} : { leasePolicy: policies[i] }),
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: ['evt_1', 'evt_2', 'evt_3', 'evt_4'].map((id) => claimResult(id, 'won')),
		});
		await run(ctx);
		expect(sentClaims(ctx).map((claim) => claim.lease_policy)).toEqual([
			undefined,
			undefined,
			'review',
			'reclaim',
		]);
		expect(sentClaims(ctx).every((claim) => !('lease_policy' in claim) || claim.lease_policy)).toBe(
			true,
		);
	});

	it('refuses an unknown policy for its item before claiming anything', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { options: { leasePolicy: 'forever' } }),
		});
		await expect(run(ctx)).rejects.toThrow(
			'Unknown When the Time Limit Passes Without Complete "forever" [item 0]',
		);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('offers the three choices in plain words, the default first', () => {
		const options = properties.find(
			(p) => p.name === 'options' && p.displayOptions?.show?.operation?.includes('claim'),
		);
		const policy = (options?.options as INodeProperties[]).find((o) => o.name === 'leasePolicy');
		expect(policy?.displayName).toBe('When the Time Limit Passes Without Complete');
		expect(policy?.default).toBe('source');
		expect(
			(policy?.options as Array<{ name: string; value: string }>).map((o) => [o.value, o.name]),
		).toEqual([
			['source', "Use the Source's Setting (Default: Mark for Review)"],
			['review', 'Mark for Review (Never Run Again Automatically)'],
			['reclaim', 'Let the Next Delivery Run It Again'],
		]);
	});
});

describe('Time Limit for the Side Effect (leaseSeconds)', () => {
	it('keeps its parameter name for saved workflows and says what it does', () => {
		const named = properties.filter((p) => p.name === 'leaseSeconds');
		expect(named.map((p) => [p.displayOptions?.show?.operation, p.displayName])).toEqual([
			[['claim'], 'Time Limit for the Side Effect (Seconds)'],
			[['extendLease'], 'New Time Limit From Now (Seconds)'],
		]);
		expect(named[0].description).toContain(
			'How long this execution may take to run the protected node and Complete',
		);
		for (const p of named) expect(p.default).toBe(300);
	});

	it('names the field in its error', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items, { leaseSeconds: 0 }) });
		await expect(run(ctx)).rejects.toThrow(
			'Time Limit for the Side Effect must be a whole number of seconds, at least 1 [item 0]',
		);
	});
});

describe('plain language', () => {
	/** Every text the editor shows for the node's parameters and options. */
	function shownTexts(list: unknown[], out: string[] = []): string[] {
		for (const entry of list) {
			const p = entry as {
				displayName?: string;
				name?: string;
				description?: string;
				options?: unknown[];
				values?: unknown[];
				action?: string;
			};
			for (const text of [p.displayName, p.description, p.action]) if (text) out.push(text);
			if (p.displayName === undefined && p.name) out.push(p.name);
			if (Array.isArray(p.options)) shownTexts(p.options, out);
			if (Array.isArray(p.values)) shownTexts(p.values, out);
		}
		return out;
	}

	it('never explains by "fencing" or "lease" alone: such words come with plain ones', () => {
		const texts = shownTexts(properties);
		expect(texts.filter((text) => /fencing/i.test(text))).toEqual([]);
		// "lease" may name a thing in parentheses or the Extend Lease operation,
		// next to plain words such as time limit.
		const leaseOnly = texts.filter(
			(text) =>
				/\blease/i.test(text) && !/time limit|more time|\(.*lease.*\)|extend lease/i.test(text),
		);
		expect(leaseOnly).toEqual([]);
	});
});

describe('item errors', () => {
	it('name the item as n8n does, once', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({
			items,
			continueOnFail: true,
			params: claimParams(items, { source: (i: number) => (i === 1 ? '' : 'stripe') }),
		});
		ctx.getNode.mockReturnValue({ ...(ctx.getNode() as object), typeVersion: 2 } as never);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		const outputs = await run(ctx);
		const failed = outputs[4][0];
		expect(failed.json).toEqual({ error: 'Source is empty [item 1]' });
		expect((failed.error as Error).message).toBe('Source is empty [item 1]');
	});

	it('leave a failure of the whole request without an item', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue('<html>welcome to nginx</html>');
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toBe('The Base URL does not point at an Idempotent Claim sidecar');
		expect(failure.description).toContain(
			'POST /v1/claims/batch answered with something other than a JSON object',
		);
		// Not the sidecar: not worth sending again.
		expect(requests(ctx)).toHaveLength(1);
	});
});
