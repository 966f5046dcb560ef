import type { IDataObject, INodeParameters } from 'n8n-workflow';
import { NodeHelpers, sleep } from 'n8n-workflow';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { MAX_FAIL_ROUNDS } from '../nodes/IdempotentClaim/actions/claim/fail.operation';
import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { AxiosError, BASE_URL, NODE, createContext, requests, run } from './helpers';

vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return { ...actual, sleep: vi.fn(async () => undefined) };
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

const nodeType = new IdempotentClaim();

/** Parameters n8n keeps for a node: the visible ones, with their defaults. */
function resolved(values: INodeParameters): INodeParameters {
	const node = { ...NODE, typeVersion: 2, parameters: values };
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

/** An item as n8n's Error Trigger hands it on. */
const errorTriggerItem = {
	json: {
		execution: {
			id: '231',
			url: 'http://localhost:5678/workflow/1/executions/231',
			error: { message: 'Worker crashed', stack: '...' },
			lastNodeExecuted: 'Call Protected API',
			mode: 'webhook',
		},
		workflow: { id: '1', name: 'Inline claim' },
	},
};

function failed(n: number): IDataObject {
	return {
		claim_id: `c${n}`,
		idempotency_key: `stripe:evt_${n}`,
		source: 'stripe',
		event_id: `evt_${n}`,
		action: '',
		state: 'unknown',
		attempt: 1,
		last_error: 'Worker crashed',
	};
}

/** Parameters of Fail for all claims of the Error Trigger's execution, as n8n resolves them. */
function executionParams(overrides: INodeParameters = {}): Record<string, unknown> {
	const params: Record<string, unknown> = resolved({
		operation: 'fail',
		claimsToFail: 'execution',
		...overrides,
	});
	// Stand-ins for the default expressions that read the Error Trigger's item.
	if (params.executionId === '={{ $json.execution.id }}') params.executionId = '231';
	if (params.errorMessage === '={{ $json.execution.error.message }}') {
		params.errorMessage = 'Worker crashed';
	}
	return params;
}

describe('Fail: All Claims of an Execution', () => {
	it("defaults to the Error Trigger's execution and error, as unknown outcomes, retried like Claim", () => {
		const params = resolved({ operation: 'fail', claimsToFail: 'execution' });
		expect(params).toMatchObject({
			executionId: '={{ $json.execution.id }}',
			errorMessage: '={{ $json.execution.error.message }}',
			retryKind: 'unknown',
			retrySidecarCalls: true,
			sidecarMaxTries: 3,
		});
		expect(params).not.toHaveProperty('claimToken');
		expect(params).not.toHaveProperty('keepTryingUntil');
		// One claim by token keeps its own defaults.
		expect(resolved({ operation: 'fail' })).toMatchObject({
			claimsToFail: 'token',
			claimToken: '={{ $json.idempotency.claim_token }}',
			errorMessage: '',
			retryKind: 'retryable',
			keepTryingUntil: 'leaseEnd',
		});
	});

	it('posts the execution ID and gives one item per failed claim, paired with the trigger item', async () => {
		const items = [errorTriggerItem];
		const ctx = createContext({ items, params: executionParams() });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			claims: [failed(1), failed(2)],
			more: false,
		});

		const outputs = await run(ctx);

		expect(requests(ctx)).toEqual([
			expect.objectContaining({
				method: 'POST',
				url: `${BASE_URL}/v1/claims/fail/execution`,
				body: { execution_id: '231', retry: 'unknown', error: 'Worker crashed' },
			}),
		]);
		expect(outputs).toHaveLength(1);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 0 }]);
		expect(outputs[0][1].json.idempotency).toMatchObject({
			claim_id: 'c2',
			key: 'stripe:evt_2',
			state: 'unknown',
		});
	});

	it('sends the source filter, and asks again while the sidecar says more are left', async () => {
		const items = [errorTriggerItem];
		const ctx = createContext({
			items,
			params: executionParams({ filters: { source: 'stripe' }, retryKind: 'retryable' }),
		});
		ctx.helpers.httpRequestWithAuthentication
			.mockResolvedValueOnce({ claims: [failed(1)], more: true })
			.mockResolvedValueOnce({ claims: [failed(2)], more: false });
		const outputs = await run(ctx);
		expect(outputs[0]).toHaveLength(2);
		expect(requests(ctx).map((r) => r.body)).toEqual([
			{ execution_id: '231', retry: 'retryable', error: 'Worker crashed', source: 'stripe' },
			{ execution_id: '231', retry: 'retryable', error: 'Worker crashed', source: 'stripe' },
		]);
	});

	it('gives no item when the execution holds no claim, and stops after its round cap', async () => {
		const items = [errorTriggerItem];
		const none = createContext({ items, params: executionParams() });
		none.helpers.httpRequestWithAuthentication.mockResolvedValue({ claims: [], more: false });
		expect(await run(none)).toEqual([[]]);

		const endless = createContext({ items, params: executionParams() });
		endless.helpers.httpRequestWithAuthentication.mockResolvedValue({
			claims: [failed(1)],
			more: true,
		});
		await expect(run(endless)).rejects.toThrow(
			`in ${MAX_FAIL_ROUNDS} requests, and the sidecar says more are left [item 0]`,
		);
		expect(requests(endless)).toHaveLength(MAX_FAIL_ROUNDS);
	});

	it('retries while the sidecar cannot be reached, up to Max Tries', async () => {
		const items = [errorTriggerItem];
		const ctx = createContext({ items, params: executionParams() });
		const refused = new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(refused)
			.mockResolvedValueOnce({ claims: [failed(1)], more: false });
		expect((await run(ctx))[0]).toHaveLength(1);
		expect(requests(ctx)).toHaveLength(2);

		const down = createContext({ items, params: executionParams() });
		down.helpers.httpRequestWithAuthentication.mockRejectedValue(refused);
		await expect(run(down)).rejects.toThrow('Cannot reach the Idempotent Claim sidecar');
		expect(requests(down)).toHaveLength(3);
	});

	it('refuses an item without an execution ID, naming the item', async () => {
		const items = [{ json: {} }];
		const ctx = createContext({ items, params: { ...executionParams(), executionId: '' } });
		await expect(run(ctx)).rejects.toThrow('Execution ID is empty [item 0]');
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('says that execution IDs are per n8n instance and that it is for an Error Trigger workflow', () => {
		const shown = nodeType.description.properties.filter(
			(p) => p.displayOptions?.show?.claimsToFail?.includes('execution') ?? false,
		);
		const executionId = shown.find((p) => p.name === 'executionId');
		expect(executionId?.description).toContain('Error Trigger');
		expect(executionId?.description).toContain('own API key');
		const mode = nodeType.description.properties.find((p) => p.name === 'claimsToFail');
		expect(JSON.stringify(mode?.options)).toContain('Error Trigger');
	});
});
