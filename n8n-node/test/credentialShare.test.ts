import type {
	ICredentialsDecrypted,
	IDataObject,
	IExecutionContext,
	INodeExecutionData,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import {
	SHARED_CREDENTIAL_MAX_AGE_MS,
	SHARED_CREDENTIAL_MAX_ENTRIES,
	sharedCredentialCount,
} from '../nodes/IdempotentClaim/transport';
import {
	AxiosError,
	BASE_URL,
	NODE,
	claimParams,
	claimResult,
	createContext,
	run,
	webhookItems,
	type Context,
} from './helpers';

vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return {
		...actual,
		sleep: vi.fn(async (ms: number) => {
			vi.setSystemTime(Date.now() + ms);
		}),
	};
});

const START = Date.parse('2030-01-01T00:00:00Z');

beforeEach(() => {
	vi.mocked(sleep).mockClear();
	vi.useFakeTimers({ toFake: ['Date'] });
	vi.setSystemTime(START);
});

afterEach(() => {
	vi.useRealTimers();
});

let executions = 0;
/** An execution ID no other test uses. */
function newExecution(): string {
	executions++;
	return `exec-share-${executions}`;
}

const CREDENTIAL = { idempotentClaimApi: { id: 'cred-1', name: 'Sidecar' } };

interface RunOptions {
	executionId: string;
	credentialId?: string | null;
	/** What getCredentials answers (a new object each call). */
	data?: IDataObject;
	executionContext?: IExecutionContext;
}

/** The node as Claim, for one item, in an execution. */
function claimContext(options: RunOptions): Context {
	const items = webhookItems(['evt_1']);
	const ctx = createContext({
		items,
		params: claimParams(items),
		executionId: options.executionId,
	});
	setUp(ctx, options);
	ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
		results: [claimResult('evt_1', 'won')],
	});
	return ctx;
}

/** The node as Complete, for one claimed item, in an execution. */
function completeContext(options: RunOptions): Context {
	const items: INodeExecutionData[] = [
		{
			json: {
				idempotency: {
					claim_id: 'claim-evt_1',
					claim_token: 'token-evt_1',
					lease_until: new Date(START + 60_000).toISOString(),
				},
			},
		},
	];
	const ctx = createContext({
		items,
		params: {
			operation: 'complete',
			claimId: 'claim-evt_1',
			claimToken: 'token-evt_1',
			resultRef: '',
			leaseUntil: new Date(START + 60_000).toISOString(),
		},
		executionId: options.executionId,
	});
	setUp(ctx, options);
	ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
		results: [{ claim_id: 'claim-evt_1', state: 'completed' }],
	});
	return ctx;
}

function setUp(ctx: Context, options: RunOptions): void {
	const credentialId = options.credentialId === undefined ? 'cred-1' : options.credentialId;
	ctx.getNode.mockReturnValue({
		...NODE,
		credentials:
			credentialId === null
				? undefined
				: { idempotentClaimApi: { ...CREDENTIAL.idempotentClaimApi, id: credentialId } },
	});
	const data = options.data ?? { baseUrl: BASE_URL, apiKey: 'key-1' };
	ctx.getCredentials.mockImplementation(async () => ({ ...data }));
	ctx.getExecutionContext.mockReturnValue(options.executionContext);
}

/** The credential each sidecar request of a context was sent with. */
function sentWith(ctx: Context): Array<ICredentialsDecrypted | undefined> {
	return ctx.helpers.httpRequestWithAuthentication.mock.calls.map(
		(call) => (call[2] as { credentialsDecrypted?: ICredentialsDecrypted }).credentialsDecrypted,
	);
}

/** What httpRequestWithAuthentication throws for an answer with this status. */
function answered(status: number): NodeApiError {
	return new NodeApiError(
		NODE,
		new AxiosError(`Request failed with status code ${status}`, 'ERR_BAD_REQUEST', {
			status,
			data: { error: { code: 'unauthorized', message: 'unknown api key' } },
		}) as unknown as JsonObject,
	);
}

const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');

describe('the credential of one execution', () => {
	it('is read once for Claim and Complete, and Complete sends what Claim read', async () => {
		const executionId = newExecution();
		const claim = claimContext({ executionId });
		const complete = completeContext({ executionId });

		await run(claim);
		await run(complete);

		expect(claim.getCredentials).toHaveBeenCalledTimes(1);
		expect(complete.getCredentials).not.toHaveBeenCalled();
		expect(sentWith(complete)).toEqual([
			{
				id: 'cred-1',
				name: 'Sidecar',
				type: 'idempotentClaimApi',
				data: { baseUrl: BASE_URL, apiKey: 'key-1' },
			},
		]);
		expect(sentWith(complete)[0]).toEqual(sentWith(claim)[0]);
	});

	it('is not shared with another execution, another credential, or without an execution ID or credential ID', async () => {
		const executionId = newExecution();
		await run(claimContext({ executionId }));
		for (const other of [
			{ executionId: newExecution() },
			{ executionId, credentialId: 'cred-2' },
			{ executionId: '', credentialId: 'cred-1' },
			{ executionId, credentialId: '' },
			{ executionId, credentialId: null },
		]) {
			const complete = completeContext(other);
			await run(complete);
			expect(complete.getCredentials, JSON.stringify(other)).toHaveBeenCalledTimes(1);
		}
	});

	it('is not shared when the execution resolves credentials per user (dynamic credentials)', async () => {
		const executionId = newExecution();
		const executionContext = { credentials: 'encrypted' } as unknown as IExecutionContext;
		const claim = claimContext({ executionId, executionContext });
		const complete = completeContext({ executionId, executionContext });
		await run(claim);
		await run(complete);
		expect(claim.getCredentials).toHaveBeenCalledTimes(1);
		expect(complete.getCredentials).toHaveBeenCalledTimes(1);
	});

	it(`is read again once ${SHARED_CREDENTIAL_MAX_AGE_MS / 1000} s have passed since it was read`, async () => {
		const executionId = newExecution();
		await run(claimContext({ executionId }));

		vi.setSystemTime(START + SHARED_CREDENTIAL_MAX_AGE_MS - 1);
		const early = completeContext({ executionId });
		await run(early);
		expect(early.getCredentials).not.toHaveBeenCalled();

		vi.setSystemTime(START + SHARED_CREDENTIAL_MAX_AGE_MS);
		const late = completeContext({ executionId, data: { baseUrl: BASE_URL, apiKey: 'key-2' } });
		await run(late);
		expect(late.getCredentials).toHaveBeenCalledTimes(1);
		expect(sentWith(late)[0]?.data).toEqual({ baseUrl: BASE_URL, apiKey: 'key-2' });
	});

	it(`is kept for at most ${SHARED_CREDENTIAL_MAX_ENTRIES} executions, the oldest dropped first`, async () => {
		const ids = Array.from({ length: SHARED_CREDENTIAL_MAX_ENTRIES + 5 }, () => newExecution());
		for (const executionId of ids) await run(claimContext({ executionId }));
		expect(sharedCredentialCount()).toBeLessThanOrEqual(SHARED_CREDENTIAL_MAX_ENTRIES);

		const oldest = completeContext({ executionId: ids[0] });
		await run(oldest);
		expect(oldest.getCredentials).toHaveBeenCalledTimes(1);
		const newest = completeContext({ executionId: ids[ids.length - 1] });
		await run(newest);
		expect(newest.getCredentials).not.toHaveBeenCalled();
	});

	it('expired executions leave the share when another is added', async () => {
		await run(claimContext({ executionId: newExecution() }));
		expect(sharedCredentialCount()).toBeGreaterThan(0);
		vi.setSystemTime(START + SHARED_CREDENTIAL_MAX_AGE_MS + 1);
		await run(claimContext({ executionId: newExecution() }));
		expect(sharedCredentialCount()).toBe(1);
	});
});

describe('a credential edited while the execution runs', () => {
	it('a key refused (401) is read again and the request sent again at once with the new key, not as a retry', async () => {
		const executionId = newExecution();
		const claim = claimContext({ executionId, data: { baseUrl: BASE_URL, apiKey: 'old' } });
		await run(claim);

		const complete = completeContext({ executionId, data: { baseUrl: BASE_URL, apiKey: 'new' } });
		complete.helpers.httpRequestWithAuthentication.mockRejectedValueOnce(answered(401));
		const outputs = await run(complete);

		expect(outputs[0][0].json.idempotency).toMatchObject({ state: 'completed' });
		expect(complete.getCredentials).toHaveBeenCalledTimes(1);
		expect(sentWith(complete).map((credential) => credential?.data?.apiKey)).toEqual([
			'old',
			'new',
		]);
		expect(sleep).not.toHaveBeenCalled();

		// The next node run of the execution takes the new key.
		const again = completeContext({ executionId, data: { baseUrl: BASE_URL, apiKey: 'newer' } });
		await run(again);
		expect(again.getCredentials).not.toHaveBeenCalled();
		expect(sentWith(again)[0]?.data?.apiKey).toBe('new');
	});

	it('a key refused again after reading it is the error, as without the share', async () => {
		const executionId = newExecution();
		await run(claimContext({ executionId }));
		const complete = completeContext({ executionId });
		complete.helpers.httpRequestWithAuthentication.mockRejectedValue(answered(401));
		await expect(run(complete)).rejects.toThrow(/API key/);
		expect(complete.getCredentials).toHaveBeenCalledTimes(1);
		expect(complete.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(2);
	});

	it('a key refused to the node run that read it is not read again', async () => {
		const claim = claimContext({ executionId: newExecution() });
		claim.helpers.httpRequestWithAuthentication.mockRejectedValue(answered(401));
		await expect(run(claim)).rejects.toThrow(/API key/);
		expect(claim.getCredentials).toHaveBeenCalledTimes(1);
		expect(claim.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
	});

	it('a Base URL that cannot be reached is read again for the next try of the retry settings', async () => {
		const executionId = newExecution();
		await run(claimContext({ executionId, data: { baseUrl: BASE_URL, apiKey: 'k' } }));

		const moved = 'http://claimd-2:8080';
		const complete = completeContext({ executionId, data: { baseUrl: moved, apiKey: 'k' } });
		complete.helpers.httpRequestWithAuthentication.mockRejectedValueOnce(refused());
		const outputs = await run(complete);

		expect(outputs[0][0].json.idempotency).toMatchObject({ state: 'completed' });
		expect(complete.getCredentials).toHaveBeenCalledTimes(1);
		const urls = complete.helpers.httpRequestWithAuthentication.mock.calls.map(
			(call) => call[1].url,
		);
		expect(urls).toEqual([
			`${BASE_URL}/v1/claims/complete/batch`,
			`${moved}/v1/claims/complete/batch`,
		]);
		expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([1000]);
	});

	it('a 5xx answer, which came from the Base URL, keeps the shared credential', async () => {
		const executionId = newExecution();
		await run(claimContext({ executionId }));
		const complete = completeContext({ executionId });
		complete.helpers.httpRequestWithAuthentication.mockRejectedValueOnce(answered(503));
		const outputs = await run(complete);
		expect(outputs[0][0].json.idempotency).toMatchObject({ state: 'completed' });
		expect(complete.getCredentials).not.toHaveBeenCalled();
		expect(complete.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(2);
	});
});
