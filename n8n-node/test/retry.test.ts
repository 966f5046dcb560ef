import type { IDataObject, IHttpRequestOptions, JsonObject } from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { isRetryable } from '../nodes/IdempotentClaim/transport/errors';
import {
	AxiosError,
	NODE,
	claimParams,
	claimResult,
	createContext,
	requests,
	run,
	webhookItems,
} from './helpers';

// The waits between tries go through n8n's sleep; here they return at once
// and are recorded.
vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return { ...actual, sleep: vi.fn(async () => undefined) };
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

function requestIds(options: IHttpRequestOptions): unknown[] {
	return (options.body as { claims: IDataObject[] }).claims.map((claim) => claim.request_id);
}

const reset = () =>
	new NodeApiError(NODE, new AxiosError('aborted', 'ECONNRESET') as unknown as JsonObject);
const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
const timedOut = () => new AxiosError('timeout of 30000ms exceeded', 'ECONNABORTED');
const status = (code: number, errorCode: string) =>
	new AxiosError(`Request failed with status code ${code}`, 'ERR_BAD_RESPONSE', {
		status: code,
		data: { error: { code: errorCode, message: 'detail' } },
	});

describe('Claim request IDs', () => {
	it('give two items with one key different request IDs (both claimed, one wins)', async () => {
		const items = webhookItems(['evt_1', 'evt_1']);
		const ctx = createContext({ items, params: claimParams(items), executionId: '4711' });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won'), claimResult('evt_1', 'in_progress')],
		});
		await run(ctx);
		const ids = requestIds(requests(ctx)[0]);
		expect(ids).toEqual(['4711:Idempotent Claim:0:0', '4711:Idempotent Claim:0:1']);
		expect(new Set(ids).size).toBe(2);
	});

	it("stay the same when n8n's Retry On Fail runs the node again, and differ per run", async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const sent: unknown[][] = [];
		for (const runIndex of [0, 0, 3]) {
			const ctx = createContext({ items, params: claimParams(items), executionId: '9', runIndex });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
				results: [claimResult('evt_1', 'won'), claimResult('evt_2', 'won')],
			});
			await run(ctx);
			sent.push(requestIds(requests(ctx)[0]));
		}
		expect(sent[1]).toEqual(sent[0]);
		expect(sent[2]).toEqual(['9:Idempotent Claim:3:0', '9:Idempotent Claim:3:1']);
	});

	it('use the node ID when the name is too long, and are left out without execution ID or run index', async () => {
		const items = webhookItems(['evt_1']);
		const answer = { results: [claimResult('evt_1', 'won')] };

		const long = createContext({ items, params: claimParams(items), executionId: '7' });
		long.getNode.mockReturnValue({ ...NODE, name: 'Ü'.repeat(120) });
		long.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);
		await run(long);
		expect(requestIds(requests(long)[0])).toEqual([`7:${NODE.id}:0:0`]);

		const noExecution = createContext({ items, params: claimParams(items), executionId: '' });
		noExecution.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);
		await run(noExecution);
		expect(requestIds(requests(noExecution)[0])).toEqual([undefined]);

		const noRun = createContext({ items, params: claimParams(items) });
		noRun.getWorkflowDataProxy.mockReturnValue({} as ReturnType<typeof noRun.getWorkflowDataProxy>);
		noRun.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);
		await run(noRun);
		expect(requestIds(requests(noRun)[0])).toEqual([undefined]);
	});
});

describe('Claim retries', () => {
	it('sends the batch again with the same request IDs after a broken connection', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValueOnce(reset()).mockResolvedValueOnce({
			results: [claimResult('evt_1', 'won'), claimResult('evt_2', 'won')],
		});
		const outputs = await run(ctx);
		const [first, second] = requests(ctx);
		expect(requests(ctx)).toHaveLength(2);
		expect(second.body).toEqual(first.body);
		expect(requestIds(second)).toEqual([
			'exec-42:Idempotent Claim:0:0',
			'exec-42:Idempotent Claim:0:1',
		]);
		expect(outputs[0]).toHaveLength(2);
		expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([500]);
	});

	it('retries a 503 and a timeout with the same request IDs, waiting longer each time', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(status(503, 'unavailable'))
			.mockRejectedValueOnce(timedOut())
			.mockResolvedValueOnce({ results: [claimResult('evt_1', 'won')] });
		const outputs = await run(ctx);
		expect(requests(ctx).map(requestIds)).toEqual([
			['exec-42:Idempotent Claim:0:0'],
			['exec-42:Idempotent Claim:0:0'],
			['exec-42:Idempotent Claim:0:0'],
		]);
		expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([500, 1000]);
		expect((outputs[0][0].json.idempotency as IDataObject).claim_token).toBe('token-evt_1');
	});

	it('does not retry a 4xx', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(status(422, 'invalid'));
		await expect(run(ctx)).rejects.toThrow(NodeApiError);
		expect(requests(ctx)).toHaveLength(1);
		expect(sleep).not.toHaveBeenCalled();
	});

	it('gives up after Max Tries and says how often it sent', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, { sidecarMaxTries: 4, sidecarWaitBetweenTries: 100 }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(reset());
		const failure = (await run(ctx).catch((error: unknown) => error)) as NodeApiError;
		expect(failure).toBeInstanceOf(NodeApiError);
		expect(failure.message).toContain('Lost the connection');
		expect(failure.description).toContain('sent 4 times');
		expect(requests(ctx)).toHaveLength(4);
		expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([100, 200, 400]);
	});

	it('sends once when Retry Sidecar Calls is off', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = createContext({ items, params: claimParams(items, { retrySidecarCalls: false }) });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
		await expect(run(ctx)).rejects.toThrow('Cannot reach the Idempotent Claim sidecar');
		expect(requests(ctx)).toHaveLength(1);
	});
});

describe('retry settings', () => {
	it('are shown with Claim, Complete, Fail and Answer Reconcile, on by default; Complete and Fail keep trying until the lease end', () => {
		const { properties } = new IdempotentClaim().description;
		const named = (name: string) => properties.filter((property) => property.name === name);
		const shownFor = (name: string) =>
			named(name).map((property) => [
				...(property.displayOptions?.show?.operation ?? []),
				...(property.displayOptions?.show?.claimsToFail ?? []),
			]);
		// Fail keeps trying until the lease end for one claim; for all claims
		// of an execution it retries like Claim.
		expect(shownFor('retrySidecarCalls')).toEqual([
			['claim'],
			['complete'],
			['fail', 'token'],
			['fail', 'execution'],
			['reconcileAnswer'],
		]);
		for (const property of named('retrySidecarCalls')) {
			expect(property).toMatchObject({ type: 'boolean', default: true });
		}
		expect(shownFor('sidecarMaxTries')).toEqual([
			['claim'],
			['fail', 'execution'],
			['reconcileAnswer'],
		]);
		expect(named('sidecarMaxTries')[0].default).toBe(3);
		expect(named('sidecarWaitBetweenTries')[0].default).toBe(500);
		expect(shownFor('keepTryingUntil')).toEqual([['complete'], ['fail', 'token']]);
		for (const property of named('keepTryingUntil')) expect(property.default).toBe('leaseEnd');
		for (const property of named('leaseUntil')) {
			expect(property.default).toBe('={{ $json.idempotency.lease_until }}');
		}
		for (const property of named('keepTryingSeconds')) expect(property.default).toBe(300);
	});

	it('retry only what is safe to send again', () => {
		for (const error of [reset(), refused(), timedOut(), new AxiosError('x', 'ETIMEDOUT')]) {
			expect(isRetryable(error), error.message).toBe(true);
		}
		for (const code of [500, 502, 503, 504]) expect(isRetryable(status(code, 'x'))).toBe(true);
		for (const code of [400, 401, 404, 409, 413, 422]) {
			expect(isRetryable(status(code, 'x'))).toBe(false);
		}
		expect(isRetryable(new Error('something else'))).toBe(false);
	});
});
