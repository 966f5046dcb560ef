import type { IDataObject, INodeExecutionData, JsonObject } from 'n8n-workflow';
import { NodeApiError, NodeOperationError, sleep } from 'n8n-workflow';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { mapSidecarError } from '../nodes/IdempotentClaim/transport/errors';
import {
	AxiosError,
	BASE_URL,
	NODE,
	claimParams,
	claimResult,
	createContext,
	requests,
	run,
	webhookItems,
} from './helpers';

vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return { ...actual, sleep: vi.fn(async () => undefined) };
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

/** What pg-pool throws when no connection of n8n's own database pool frees up in time. */
const poolExhausted = () => new Error('timeout exceeded when trying to connect');
const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');

function wonItem(claimId: string): INodeExecutionData {
	return { json: { idempotency: { claim_id: claimId, claim_token: `t-${claimId}` } } };
}

describe('credential', () => {
	it('is read once per node run and handed to every request, retries included', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getNode.mockReturnValue({
			...NODE,
			credentials: { idempotentClaimApi: { id: 'cred-1', name: 'Sidecar' } },
		});
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(refused())
			.mockResolvedValueOnce({ results: [claimResult('evt_1', 'won')] });

		await run(ctx);

		expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
		const calls = ctx.helpers.httpRequestWithAuthentication.mock.calls;
		expect(calls).toHaveLength(2);
		for (const [type, options, extra] of calls) {
			expect(type).toBe('idempotentClaimApi');
			expect(options.url).toBe(`${BASE_URL}/v1/claims/batch`);
			// The credential type's authenticate sets the header: none by hand.
			expect(options.headers).toEqual({ Accept: 'application/json' });
			expect(extra).toEqual({
				credentialsDecrypted: {
					id: 'cred-1',
					name: 'Sidecar',
					type: 'idempotentClaimApi',
					data: { baseUrl: BASE_URL, apiKey: 'test-key' },
				},
			});
		}
	});

	it('is read once for an operation that makes one request per item', async () => {
		const items = [wonItem('c1'), wonItem('c2'), wonItem('c3')];
		const ctx = createContext({
			items,
			params: { operation: 'lookup', lookupBy: 'claimId', claimId: (i: number) => `c${i + 1}` },
		});
		ctx.helpers.httpRequestWithAuthentication.mockImplementation(async (_type, options) => ({
			claim_id: String(options.url).split('/').pop(),
			state: 'completed',
		}));
		await run(ctx);
		expect(requests(ctx)).toHaveLength(3);
		expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
	});

	it("failing in n8n's own database names that database, not the sidecar, and is retried", async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getCredentials.mockRejectedValue(poolExhausted());

		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeOperationError;

		expect(failure).toBeInstanceOf(NodeOperationError);
		expect(failure.message).toBe(
			'n8n could not read the Idempotent Claim API credential from its own database',
		);
		expect(failure.description).toContain('timeout exceeded when trying to connect');
		expect(failure.description).toContain("This is n8n's own database");
		expect(failure.description).toContain(
			'not the Idempotent Claim sidecar: the sidecar was not called (tried 3 times)',
		);
		expect(failure.description).toContain('DB_POSTGRESDB_POOL_SIZE');
		expect(failure.message).not.toMatch(/sidecar (is unavailable|failed|error)/i);
		expect(ctx.getCredentials).toHaveBeenCalledTimes(3);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it("recovers when n8n's database serves again, within the retries", async () => {
		const items = [wonItem('c1')];
		const ctx = createContext({
			items,
			params: {
				operation: 'complete',
				claimId: 'c1',
				claimToken: 't-c1',
				resultRef: '',
				leaseUntil: new Date(Date.now() + 60_000).toISOString(),
			},
		});
		ctx.getCredentials
			.mockRejectedValueOnce(poolExhausted())
			.mockResolvedValue({ baseUrl: BASE_URL, apiKey: 'test-key' });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [{ claim_id: 'c1', state: 'completed' }],
		});
		const outputs = await run(ctx);
		expect(outputs[0][0].json.idempotency).toMatchObject({ state: 'completed' });
		expect(ctx.getCredentials).toHaveBeenCalledTimes(2);
		expect(requests(ctx)).toHaveLength(1);
	});

	it("keeps n8n's own errors about the credential (none selected) as they are, without retrying", async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.getCredentials.mockRejectedValue(
			new NodeOperationError(NODE, 'Node does not have any credentials set'),
		);
		await expect(run(ctx)).rejects.toThrow('Node does not have any credentials set');
		expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
	});
});

describe("n8n's database failure inside a request", () => {
	it("is mapped to an error naming n8n's database", () => {
		const wrapped = new NodeApiError(NODE, poolExhausted() as unknown as JsonObject);
		const mapped = mapSidecarError(NODE, wrapped, { baseUrl: BASE_URL });
		expect(mapped.message).toBe(
			'n8n could not read the Idempotent Claim API credential from its own database',
		);
		expect(mapped.description).toContain('DB_POSTGRESDB_POOL_SIZE');
		expect((mapped.context.sidecar as IDataObject).code).toBe('n8n_database');
	});
});
