import type { IDataObject, IHookFunctions, INodeExecutionData } from 'n8n-workflow';
import { NodeApiError, sleep } from 'n8n-workflow';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { mockDeep } from 'vitest-mock-extended';

import { claimSidecar } from '../nodes/IdempotentClaim/helpers/idempotency';
import type { ClaimResult } from '../nodes/IdempotentClaim/transport/types';
import { IdempotentClaimTrigger } from '../nodes/IdempotentClaimTrigger/IdempotentClaimTrigger.node';
import { redactQuery } from '../nodes/IdempotentClaimTrigger/webhook';
import {
	MAX_TRIES,
	REQUEST_TIMEOUT_MS,
	RETRY_WINDOW_MS,
	TRIGGER_CREDENTIAL_MAX_AGE_MS,
	TRIGGER_CREDENTIAL_MAX_ENTRIES,
	cachedTriggerCredentialCount,
	clearTriggerCredentialCache,
} from '../nodes/IdempotentClaimTrigger/transport';
import { AxiosError, BASE_URL } from './helpers';
import {
	API_KEY,
	TRIGGER_NODE,
	delivery,
	event,
	reply,
	runTrigger,
	sentBody,
	triggerCalls,
	triggerContext,
} from './triggerHelpers';

// The waits between tries go through n8n's sleep; here they return at once
// and are recorded.
vi.mock('n8n-workflow', async (importOriginal) => {
	const actual = await importOriginal<typeof import('n8n-workflow')>();
	return { ...actual, sleep: vi.fn(async () => undefined) };
});

beforeEach(() => {
	vi.mocked(sleep).mockClear();
});

const refused = () => new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
const status = (code: number, errorCode: string) =>
	new AxiosError(`Request failed with status code ${code}`, 'ERR_BAD_RESPONSE', {
		status: code,
		data: { error: { code: errorCode, message: 'detail' } },
	});

/** The items of the execution the trigger starts. */
function items(result: { workflowData?: INodeExecutionData[][] }): INodeExecutionData[] {
	expect(result.workflowData).toHaveLength(1);
	return result.workflowData?.[0] ?? [];
}

/** Everything the trigger logged, as one text. */
function logged(ctx: ReturnType<typeof triggerContext>['ctx']): string {
	return JSON.stringify([
		ctx.logger.error.mock.calls,
		ctx.logger.warn.mock.calls,
		ctx.logger.info.mock.calls,
		ctx.logger.debug.mock.calls,
	]);
}

describe('the call to claimd', () => {
	it('sends the request as received: raw header lines in order with repeats, the raw query, the body bytes in base64', async () => {
		// A BOM, a byte that is not UTF-8 (0xff) and a NUL: all must reach
		// claimd exactly, since the signature covers the bytes.
		const body = Buffer.concat([
			Buffer.from([0xef, 0xbb, 0xbf]),
			Buffer.from('{"id":"evt_1","note":"caf'),
			Buffer.from([0xe9, 0xff, 0x00]),
			Buffer.from('"}'),
		]);
		const request = delivery({
			body,
			url: '/webhook/stripe-events?b=2&a=1&a=%2F+x',
			headers: [
				['Host', 'n8n.example'],
				['Content-Type', 'application/json; charset=latin1'],
				['X-Dup', 'one'],
				['stripe-signature', 't=1,v1=abc'],
				['X-Dup', 'two'],
			],
		});
		const { ctx } = triggerContext({ request });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);

		await runTrigger(ctx);

		expect(ctx.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
		const [credentialType, options, additional] =
			ctx.helpers.httpRequestWithAuthentication.mock.calls[0];
		expect(credentialType).toBe('idempotentClaimApi');
		expect(options).toMatchObject({
			method: 'POST',
			url: `${BASE_URL}/v1/trigger/stripe`,
			json: true,
			timeout: REQUEST_TIMEOUT_MS,
			headers: { Accept: 'application/json' },
		});
		expect(additional?.credentialsDecrypted?.data).toEqual({
			baseUrl: `${BASE_URL}/`,
			apiKey: API_KEY,
		});
		const sent = sentBody(ctx);
		expect(Object.keys(sent).sort()).toEqual(
			['body', 'headers', 'method', 'query', 'request_id', 'test', 'wait_seconds'].sort(),
		);
		expect(sent.method).toBe('POST');
		expect(sent.headers).toEqual([
			['Host', 'n8n.example'],
			['Content-Type', 'application/json; charset=latin1'],
			['X-Dup', 'one'],
			['stripe-signature', 't=1,v1=abc'],
			['X-Dup', 'two'],
		]);
		expect(sent.query).toBe('b=2&a=1&a=%2F+x');
		expect(Buffer.from(sent.body, 'base64').equals(body)).toBe(true);
		expect(sent.body).toBe(body.toString('base64'));
		expect(sent.test).toBe(false);
		expect(sent.wait_seconds).toBe(0);
		expect(sent.request_id).toMatch(/^[0-9a-f-]{36}$/);
	});

	it('gives every incoming request its own request ID', async () => {
		const ids = new Set<string>();
		for (let i = 0; i < 3; i++) {
			const { ctx } = triggerContext();
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(ctx);
			ids.add(sentBody(ctx).request_id);
		}
		expect(ids.size).toBe(3);
	});

	it('reads the body itself when n8n did not, sends an empty body and no query as empty strings', async () => {
		const read = delivery({ body: 'raw=1', keepRaw: false, contentType: 'application/x-custom' });
		const first = triggerContext({ request: read });
		first.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(reply('filtered', []));
		await runTrigger(first.ctx);
		expect(Buffer.from(sentBody(first.ctx).body, 'base64').toString()).toBe('raw=1');

		const empty = triggerContext({ request: delivery({ body: Buffer.alloc(0) }) });
		empty.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(reply('filtered', []));
		await runTrigger(empty.ctx);
		expect(sentBody(empty.ctx).body).toBe('');
		expect(sentBody(empty.ctx).query).toBe('');
	});

	it('forwards Content-Encoding as sent (n8n has inflated the body; claimd refuses it)', async () => {
		const request = delivery({
			headers: [
				['Content-Type', 'application/json'],
				['Content-Encoding', 'gzip'],
			],
		});
		const { ctx, res } = triggerContext({ request });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('unsupported_encoding', [], {
				status: 415,
				body: '{"error":{"code":"unsupported_encoding","message":"…"}}',
			}),
		);
		const result = await runTrigger(ctx);
		expect(sentBody(ctx).headers).toContainEqual(['Content-Encoding', 'gzip']);
		expect(res.statusCode).toBe(415);
		expect(result.workflowData).toBeUndefined();
	});

	it('asks claimd to wait for the holder with Wait for the Holder, and waits longer for its answer', async () => {
		const { ctx } = triggerContext({
			params: { options: { inProgress: 'wait', waitSeconds: 12 } },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(ctx);
		expect(sentBody(ctx).wait_seconds).toBe(12);
		expect(triggerCalls(ctx)[0].timeout).toBe(REQUEST_TIMEOUT_MS + 12_000);
	});

	it("sends the workflow's ID (and no version: n8n gives a node none) for the delivery log", async () => {
		const { ctx } = triggerContext();
		ctx.getWorkflow.mockReturnValue({ id: 'wf-7Yq2', name: 'w', active: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(ctx);
		expect(sentBody(ctx).workflow_id).toBe('wf-7Yq2');
		expect(sentBody(ctx)).not.toHaveProperty('workflow_version');
	});

	it('sends no workflow ID the sidecar would refuse (with spaces, too long)', async () => {
		for (const id of ['has space', 'w'.repeat(129), '']) {
			const { ctx } = triggerContext();
			ctx.getWorkflow.mockReturnValue({ id, name: 'w', active: true });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(ctx);
			expect(sentBody(ctx)).not.toHaveProperty('workflow_id');
		}
	});

	it('refuses a multipart body (n8n keeps no bytes of it) without asking claimd', async () => {
		const request = delivery({ contentType: 'multipart/form-data', keepRaw: false });
		delete request.readRawBody;
		delete request.rawBody;
		const { ctx, res } = triggerContext({ request });
		const result = await runTrigger(ctx);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
		expect(res.statusCode).toBe(415);
		expect(result).toEqual({ noWebhookResponse: true });
	});
});

describe('a won delivery', () => {
	it('starts the execution with one item: the Webhook node fields and the Claim node idempotency object', async () => {
		const { ctx, res, req } = triggerContext({
			request: delivery({ url: '/webhook/stripe-events?mode=live' }),
		});
		const won = event('evt_1', 'won');
		const answer = reply('won', [won]);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);

		const result = await runTrigger(ctx);

		const [item] = items(result);
		expect(item.json).toEqual({
			headers: req.headers,
			params: {},
			query: { mode: 'live' },
			body: { id: 'evt_1', type: 'invoice.paid' },
			idempotency: {
				...claimSidecar(won as ClaimResult),
				event_type: 'invoice.paid',
				on_error: 'unknown',
			},
		});
		expect(item.json.idempotency).toMatchObject({
			outcome: 'won',
			claim_id: 'claim-evt_1',
			claim_token: 'token-evt_1',
			key: 'stripe:evt_1',
		});
		expect(item.binary).toBeUndefined();
		// n8n answers 200 with claimd's body once it has started the
		// execution; the node only set claimd's headers.
		expect(result.webhookResponse).toBe((answer.response as IDataObject).body);
		expect(result.noWebhookResponse).toBeUndefined();
		expect(res.ended).toBe(false);
		expect(res.headers['content-type']).toBe('application/json');
	});

	it('leaves the query parameters claimd names as credentials out of the items', async () => {
		const token = 'mollie-url-token-never-in-items';
		const { ctx } = triggerContext({
			request: delivery({
				url: `/webhook/mollie?shop=eu&token=${token}`,
				headers: [
					['Content-Type', 'application/x-www-form-urlencoded'],
					['X-Original-URL', `/webhook/mollie?shop=eu&token=${token}`],
					['Referer', `https://hooks.example.test/webhook/mollie?token=${token}#top`],
				],
				body: 'id=tr_WDqYK6vllg',
				parsed: { id: 'tr_WDqYK6vllg' },
				contentType: 'application/x-www-form-urlencoded',
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			...reply('won', [event('tr_1', 'won')]),
			credential_query_params: ['token'],
		});

		const result = await runTrigger(ctx);

		// claimd verified the token: it was sent in the call's query.
		expect(sentBody(ctx).query).toBe(`shop=eu&token=${token}`);
		const [item] = items(result);
		expect(item.json.query).toEqual({ shop: 'eu' });
		expect((item.json.headers as IDataObject)['x-original-url']).toBe('/webhook/mollie?shop=eu');
		expect((item.json.headers as IDataObject).referer).toBe(
			'https://hooks.example.test/webhook/mollie?#top',
		);
		expect(JSON.stringify(item)).not.toContain(token);
	});

	it('gives one item per won event of a batch, with the event payload as body', async () => {
		const { ctx } = triggerContext({
			request: delivery({ parsed: [{ id: 'a' }, { id: 'b' }, { id: 'c' }] }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [
				event('a', 'won', { payload: { id: 'a', n: 1 } }),
				event('b', 'duplicate', { payload: { id: 'b' } }),
				event('c', 'won', { payload: { id: 'c', n: 3 } }),
			]),
		);
		const result = await runTrigger(ctx);
		const run = items(result);
		expect(run.map((i) => i.json.body)).toEqual([
			{ id: 'a', n: 1 },
			{ id: 'c', n: 3 },
		]);
		expect(run.map((i) => (i.json.idempotency as IDataObject).claim_token)).toEqual([
			'token-a',
			'token-c',
		]);
		// Each item has its own copies of the request's fields.
		expect(run[0].json.headers).not.toBe(run[1].json.headers);
	});

	it('answers the retry answer at once when other events of the batch are in progress, and still runs the won ones', async () => {
		const { ctx, res } = triggerContext({ request: delivery({ parsed: [] }) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply(
				'won',
				[
					event('a', 'won', { payload: { id: 'a' } }),
					event('b', 'in_progress', { payload: { id: 'b' } }),
				],
				{ status: 503, headers: { 'Content-Type': 'application/json', 'Retry-After': '7' } },
			),
		);
		const result = await runTrigger(ctx);
		expect(items(result).map((i) => i.json.body)).toEqual([{ id: 'a' }]);
		expect(result.noWebhookResponse).toBe(true);
		expect(res.statusCode).toBe(503);
		expect(res.headers['retry-after']).toBe('7');
	});

	it("answers a status other than 200 itself (Microsoft Graph's 202), then n8n starts the execution", async () => {
		const { ctx, res } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won')], { status: 202, body: '{"received":[]}' }),
		);
		const result = await runTrigger(ctx);
		expect(items(result)).toHaveLength(1);
		expect(result.noWebhookResponse).toBe(true);
		expect(res.statusCode).toBe(202);
		expect(res.text()).toBe('{"received":[]}');
	});

	it('uses Answers → Won when set', async () => {
		const { ctx, res } = triggerContext({
			params: { options: { answers: { won: { statusCode: 201, body: '{"ok":true}' } } } },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won')]),
		);
		const result = await runTrigger(ctx);
		expect(items(result)).toHaveLength(1);
		expect(res.statusCode).toBe(201);
		expect(res.text()).toBe('{"ok":true}');
		expect(res.headers['content-type']).toBe('application/json');

		const plain = triggerContext({
			params: { options: { answers: { won: { statusCode: 200, body: 'thanks' } } } },
		});
		plain.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won')]),
		);
		const deferred = await runTrigger(plain.ctx);
		expect(deferred.webhookResponse).toBe('thanks');
		expect(plain.res.headers['content-type']).toBe('text/plain; charset=utf-8');

		// It never turns an answer of claimd's that is not 2xx into a 2xx.
		const refusedByClaimd = triggerContext({
			params: { options: { answers: { won: { statusCode: 200, body: 'thanks' } } } },
		});
		refusedByClaimd.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won')], { status: 503, headers: { 'Retry-After': '3' } }),
		);
		const kept = await runTrigger(refusedByClaimd.ctx);
		expect(items(kept)).toHaveLength(1);
		expect(refusedByClaimd.res.statusCode).toBe(503);
		expect(refusedByClaimd.res.headers['retry-after']).toBe('3');
	});

	it('leaves the answer to n8n with When Last Node Finishes and Respond to Webhook', async () => {
		for (const responseMode of ['lastNode', 'responseNode']) {
			const { ctx, res } = triggerContext({ params: { responseMode } });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('won', [event('evt_1', 'won')]),
			);
			const result = await runTrigger(ctx);
			expect(Object.keys(result)).toEqual(['workflowData']);
			expect(res.ended).toBe(false);
			expect(res.headers).toEqual({});
		}
	});

	it('carries On Execution Error and adds the raw body as binary with Raw Body', async () => {
		const body = Buffer.from([0x7b, 0xff, 0x7d]);
		const { ctx } = triggerContext({
			params: { options: { onExecutionError: 'retryable', rawBody: true } },
			request: delivery({ body }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('evt_1', 'won')]),
		);
		const [item] = items(await runTrigger(ctx));
		expect((item.json.idempotency as IDataObject).on_error).toBe('retryable');
		expect(item.binary?.data.mimeType).toBe('application/json');
		expect(Buffer.from(item.binary?.data.data ?? '', 'base64').equals(body)).toBe(true);
	});

	it('parses a JSON media type n8n leaves unparsed (application/cloudevents+json)', async () => {
		const request = delivery({
			body: '\ufeff{"id":"ce-1"}',
			contentType: 'application/cloudevents+json',
		});
		delete request.body;
		const { ctx } = triggerContext({ request });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('won', [event('ce-1', 'won')]),
		);
		const [item] = items(await runTrigger(ctx));
		expect(item.json.body).toEqual({ id: 'ce-1' });
	});
});

describe('redactQuery', () => {
	it('removes the named parameters as claimd does (inbox.RedactQueryParams)', () => {
		const names = ['token', 'hub.verify_token'];
		const cases: Array<[string, string]> = [
			['/p?token=a', '/p?'],
			['/p?x=1&token=a&token=b&y=2', '/p?x=1&y=2'],
			['/p?%74oken=a&x=%2F', '/p?x=%2F'],
			[
				'/p?hub.mode=subscribe&hub.verify_token=v&hub.challenge=1',
				'/p?hub.mode=subscribe&hub.challenge=1',
			],
			['/p?Token=a', '/p?Token=a'],
			['/p?tokens=a&token', '/p?tokens=a'],
			['/p?x=1#token=a', '/p?x=1#token=a'],
			['/p/token=a', '/p/token=a'],
			['token=a', ''],
			['no query here', 'no query here'],
			['', ''],
		];
		for (const [value, want] of cases) expect(redactQuery(value, names)).toBe(want);
		expect(redactQuery('/p?token=a', [])).toBe('/p?token=a');
	});
});

describe('every other decision', () => {
	it("duplicate: answers claimd's 2xx and starts no execution", async () => {
		const { ctx, res } = triggerContext();
		const answer = reply('duplicate', [event('evt_1', 'duplicate')]);
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(200);
		expect(res.text()).toBe((answer.response as IDataObject).body);
		expect(res.headers['content-type']).toBe('application/json');
	});

	it.each(['stale', 'dead_lettered', 'unknown', 'conflict', 'filtered'])(
		"%s: answers claimd's answer and starts no execution",
		async (decision) => {
			const { ctx, res } = triggerContext();
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply(decision, decision === 'filtered' ? [] : [event('evt_1', decision)]),
			);
			const result = await runTrigger(ctx);
			expect(result.workflowData).toBeUndefined();
			expect(res.ended).toBe(true);
			expect(res.statusCode).toBe(200);
		},
	);

	it.each(['in_progress', 'retry_later'])(
		'%s: 503 with Retry-After, no execution',
		async (decision) => {
			const { ctx, res } = triggerContext();
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply(decision, [event('evt_1', decision)], {
					status: 503,
					headers: { 'Content-Type': 'application/json', 'Retry-After': '7' },
				}),
			);
			const result = await runTrigger(ctx);
			expect(result).toEqual({ noWebhookResponse: true });
			expect(res.statusCode).toBe(503);
			expect(res.headers['retry-after']).toBe('7');
		},
	);

	it("unauthenticated: the source's status and claimd's words, nothing about why", async () => {
		const body = JSON.stringify({
			error: {
				code: 'unauthorized',
				message: "the delivery could not be authenticated; the reason is in claimd's log",
			},
		});
		const { ctx, res } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('unauthenticated', [], {
				status: 401,
				body,
				headers: { 'Content-Type': 'application/json' },
			}),
		);
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(401);
		expect(res.text()).toBe(body);
		expect(res.text()).not.toMatch(/signature|secret|timestamp/i);
	});

	it("handshake: echoes claimd's answer exactly, headers included", async () => {
		const { ctx, res } = triggerContext({
			request: delivery({ url: '/webhook/graph?validationToken=abc%20123' }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('handshake', [], {
				status: 200,
				headers: { 'Content-Type': 'text/plain; charset=utf-8', 'X-Extra': 'yes' },
				body: 'abc 123',
			}),
		);
		const result = await runTrigger(ctx);
		expect(sentBody(ctx).query).toBe('validationToken=abc%20123');
		expect(result).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(200);
		expect(res.headers).toEqual({ 'content-type': 'text/plain; charset=utf-8', 'x-extra': 'yes' });
		expect(res.text()).toBe('abc 123');
	});

	it('sends a body that is not UTF-8 (body_base64) byte for byte', async () => {
		const bytes = Buffer.from([0x00, 0xff, 0xfe]);
		const { ctx, res } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('handshake', [], { body_base64: bytes.toString('base64') }),
		);
		await runTrigger(ctx);
		expect(Buffer.isBuffer(res.body) && res.body.equals(bytes)).toBe(true);
	});

	it('GET and HEAD on the setup webhook reach claimd with their method and start nothing', async () => {
		for (const method of ['GET', 'HEAD']) {
			const { ctx, res } = triggerContext({
				webhookName: 'setup',
				request: delivery({ method, body: Buffer.alloc(0), parsed: {} }),
			});
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('method_not_allowed', [], { status: 405, body: '{"error":{}}' }),
			);
			const result = await runTrigger(ctx);
			expect(sentBody(ctx).method).toBe(method);
			expect(result).toEqual({ noWebhookResponse: true });
			expect(res.statusCode).toBe(405);
		}
	});
});

describe('Options → Answers', () => {
	it("replaces claimd's status and body per decision, keeping Retry-After", async () => {
		const answers = {
			duplicate: { statusCode: 202, body: '{"status":"duplicate"}' },
			conflict: { statusCode: 200, body: 'conflict noted' },
			inProgress: { statusCode: 409, body: '' },
			refused: { statusCode: 403, body: '' },
		};
		const cases: Array<[string, IDataObject, number, string | undefined]> = [
			['duplicate', reply('duplicate', [event('e', 'duplicate')]), 202, '{"status":"duplicate"}'],
			['unknown', reply('unknown', [event('e', 'unknown')]), 202, '{"status":"duplicate"}'],
			['conflict', reply('conflict', [event('e', 'conflict')]), 200, 'conflict noted'],
			[
				'in_progress',
				reply('in_progress', [event('e', 'in_progress')], {
					status: 503,
					headers: { 'Retry-After': '7', 'Content-Type': 'application/json' },
					body: '{"received":[]}',
				}),
				409,
				'{"received":[]}',
			],
			[
				'unauthenticated',
				reply('unauthenticated', [], { status: 401, body: '{"error":{}}' }),
				403,
				'{"error":{}}',
			],
		];
		for (const [decision, answer, code, body] of cases) {
			const { ctx, res } = triggerContext({ params: { options: { answers } } });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(answer);
			const result = await runTrigger(ctx);
			expect(result, decision).toEqual({ noWebhookResponse: true });
			expect(res.statusCode, decision).toBe(code);
			expect(res.text(), decision).toBe(body);
			if (decision === 'in_progress') expect(res.headers['retry-after']).toBe('7');
		}
	});

	it("never answers an in-progress event 2xx: a 2xx In Progress answer is refused, claimd's 503 is sent", async () => {
		const params = { options: { answers: { inProgress: { statusCode: 200, body: 'ok' } } } };
		const { ctx, res } = triggerContext({ params });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('in_progress', [event('e', 'in_progress')], {
				status: 503,
				headers: { 'Retry-After': '7' },
			}),
		);
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(503);
		expect(res.headers['retry-after']).toBe('7');
		expect(res.text()).not.toBe('ok');
		expect(logged(ctx)).toContain('In Progress: Status Code 200 is not allowed');

		// On the Test URL the builder is told at once.
		const manual = triggerContext({ params, mode: 'manual' });
		await expect(runTrigger(manual.ctx)).rejects.toThrow('not set up right');
		expect(manual.ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();

		// And publishing the workflow (or listening on the Test URL) fails with the reason.
		const hook = mockDeep<IHookFunctions>();
		hook.getNode.mockReturnValue({ ...TRIGGER_NODE, parameters: { source: 'stripe', ...params } });
		(
			hook.getNodeParameter as unknown as { mockImplementation: (fn: unknown) => void }
		).mockImplementation((name: string, fallback?: unknown) =>
			name === 'options' ? params.options : name === 'source' ? 'stripe' : fallback,
		);
		const methods = new IdempotentClaimTrigger().webhookMethods.default;
		await expect(methods.create.call(hook)).rejects.toThrow('not set up right');
	});

	it('refuses a 2xx Refused answer and a won answer that is not 2xx', async () => {
		const { ctx, res } = triggerContext({
			params: {
				options: {
					answers: { refused: { statusCode: 204, body: '' }, won: { statusCode: 500, body: '' } },
				},
			},
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('unauthenticated', [], { status: 401, body: '{"error":{}}' }),
		);
		await runTrigger(ctx);
		expect(res.statusCode).toBe(401);
		expect(logged(ctx)).toContain('Refused: Status Code 204 is not allowed');
		expect(logged(ctx)).toContain('Won (Respond Immediately): Status Code 500 is not allowed');
	});
});

describe('when claimd cannot decide', () => {
	it('sends the call again with the same request ID after a 5xx, and uses the answer', async () => {
		const { ctx } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(status(503, 'unavailable'))
			.mockRejectedValueOnce(refused())
			.mockResolvedValueOnce(reply('won', [event('evt_1', 'won')]));
		const result = await runTrigger(ctx);
		expect(items(result)).toHaveLength(1);
		expect(triggerCalls(ctx)).toHaveLength(3);
		const ids = [0, 1, 2].map((i) => sentBody(ctx, i).request_id);
		expect(new Set(ids).size).toBe(1);
		expect(sentBody(ctx, 2)).toEqual(sentBody(ctx, 0));
		expect(vi.mocked(sleep).mock.calls.map((call) => call[0])).toEqual([200, 400]);
	});

	it('answers the provider 503 with Retry-After and starts no execution when claimd stays down', async () => {
		const { ctx, res } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(refused());
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(triggerCalls(ctx)).toHaveLength(MAX_TRIES);
		const waited = vi.mocked(sleep).mock.calls.reduce((sum, call) => sum + Number(call[0]), 0);
		expect(waited).toBeLessThanOrEqual(RETRY_WINDOW_MS);
		expect(res.statusCode).toBe(503);
		expect(res.headers['retry-after']).toBe('5');
		expect(res.text()).not.toContain('127.0.0.1');
		expect(ctx.logger.error).toHaveBeenCalledTimes(1);
		expect(logged(ctx)).toContain('Cannot reach the Idempotent Claim sidecar');
	});

	it('never logs the body, a signature or the API key', async () => {
		const secret = 'whsec_signature_value_xyz';
		const { ctx } = triggerContext({
			request: delivery({
				body: '{"card":"4242424242424242"}',
				headers: [['Stripe-Signature', secret]],
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			new NodeApiError(TRIGGER_NODE, { message: 'boom' }, { httpCode: '500' }),
		);
		await runTrigger(ctx);
		const text = logged(ctx);
		expect(text).not.toContain('4242424242424242');
		expect(text).not.toContain(secret);
		expect(text).not.toContain(API_KEY);
	});

	it('does not retry a refusal of the call (no such source), and still answers 503', async () => {
		const { ctx, res } = triggerContext({ params: { source: 'nope' } });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(status(404, 'not_found'));
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(triggerCalls(ctx)).toHaveLength(1);
		expect(triggerCalls(ctx)[0].url).toBe(`${BASE_URL}/v1/trigger/nope`);
		expect(res.statusCode).toBe(503);
		expect(logged(ctx)).toContain('claimd has no source \\"nope\\" for this API key');
	});

	it('answers 503 when something else answers at the Base URL', async () => {
		const { ctx, res } = triggerContext();
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue('<html>hello</html>');
		const result = await runTrigger(ctx);
		expect(result).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(503);
		expect(logged(ctx)).toContain('does not point at an Idempotent Claim sidecar');
	});

	it('answers 503 without calling claimd when Source is empty', async () => {
		const { ctx, res } = triggerContext({ params: { source: '  ' } });
		await runTrigger(ctx);
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
		expect(res.statusCode).toBe(503);
	});
});

describe('the Test URL (manual mode)', () => {
	it('asks claimd with test: true and shows every event with outcome test and no claim token', async () => {
		const { ctx } = triggerContext({ mode: 'manual' });
		// A test event is identity only: no claim was made.
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply(
				'test',
				[
					{
						idempotency_key: 'stripe:evt_1',
						source: 'stripe',
						event_id: 'evt_1',
						action: '',
						event_type: 'invoice.paid',
						payload_hash: 'ab'.repeat(32),
					},
				],
				{ body: '{"received":[],"test":true,"rejected_items":0}' },
			),
		);
		const result = await runTrigger(ctx);
		expect(sentBody(ctx).test).toBe(true);
		const [item] = items(result);
		expect(item.json.idempotency).toMatchObject({
			outcome: 'test',
			claim_token: null,
			claim_id: null,
			key: 'stripe:evt_1',
			event_id: 'evt_1',
			event_type: 'invoice.paid',
		});
		expect(result.webhookResponse).toBe('{"received":[],"test":true,"rejected_items":0}');
	});

	it('never gives a test item a claim token, even if claimd sent one', async () => {
		const { ctx } = triggerContext({ mode: 'manual' });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('test', [event('evt_1', 'won')]),
		);
		const [item] = items(await runTrigger(ctx));
		expect(item.json.idempotency).toMatchObject({ outcome: 'test', claim_token: null });
	});

	it('shows a failure in the editor instead of answering 503', async () => {
		const { ctx, res } = triggerContext({ mode: 'manual' });
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(status(401, 'unauthorized'));
		await expect(runTrigger(ctx)).rejects.toThrow('rejected the API key');
		expect(res.ended).toBe(false);
	});
});

/** The key a user rotated the credential to. */
const ROTATED_KEY = `${API_KEY}_rotated`;

describe('the credential across deliveries', () => {
	/** A context whose workflow has an ID, so the trigger keeps what it read. */
	function cachingContext(name = TRIGGER_NODE.name, workflowId = 'wf-1') {
		const made = triggerContext();
		made.ctx.getWorkflow.mockReturnValue({ id: workflowId, name: 'w', active: true });
		made.ctx.getNode.mockReturnValue({ ...TRIGGER_NODE, name, parameters: { source: 'stripe' } });
		return made;
	}

	beforeEach(() => {
		clearTriggerCredentialCache();
	});

	it("reads the credential through n8n once, then uses it for the node's next deliveries", async () => {
		const first = cachingContext();
		first.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(first.ctx);
		expect(first.ctx.getCredentials).toHaveBeenCalledTimes(1);
		expect(cachedTriggerCredentialCount()).toBe(1);

		const second = cachingContext();
		second.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(second.ctx);
		expect(second.ctx.getCredentials).not.toHaveBeenCalled();
		const [, , additional] = second.ctx.helpers.httpRequestWithAuthentication.mock.calls[0];
		expect(additional?.credentialsDecrypted?.data).toEqual({
			baseUrl: `${BASE_URL}/`,
			apiKey: API_KEY,
		});
	});

	it("never lends one node's read to another node or workflow", async () => {
		for (const [name, workflowId] of [
			[TRIGGER_NODE.name, 'wf-1'],
			['Another Trigger', 'wf-1'],
			[TRIGGER_NODE.name, 'wf-2'],
		]) {
			const { ctx } = cachingContext(name, workflowId);
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(ctx);
			expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
		}
		expect(cachedTriggerCredentialCount()).toBe(3);
	});

	it('reads it again when claimd refuses the kept key (401), and sends at once with the new one', async () => {
		const first = cachingContext();
		first.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(first.ctx);

		const { ctx } = cachingContext();
		ctx.getCredentials.mockResolvedValue({
			baseUrl: `${BASE_URL}/`,
			apiKey: ROTATED_KEY,
		});
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(status(401, 'unauthorized'))
			.mockResolvedValueOnce(reply('won', [event('evt_2', 'won')]));
		const result = await runTrigger(ctx);
		expect(items(result)).toHaveLength(1);
		expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
		expect(vi.mocked(sleep)).not.toHaveBeenCalled();
		const calls = ctx.helpers.httpRequestWithAuthentication.mock.calls;
		expect(calls).toHaveLength(2);
		expect(calls[1][2]?.credentialsDecrypted?.data).toMatchObject({
			apiKey: ROTATED_KEY,
		});
		expect(sentBody(ctx, 1).request_id).toBe(sentBody(ctx, 0).request_id);
	});

	it('a fresh read refused 401 is final: no loop', async () => {
		const { ctx, res } = cachingContext();
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(status(401, 'unauthorized'));
		await runTrigger(ctx);
		expect(ctx.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
		expect(res.statusCode).toBe(503);
	});

	it('reads it again on the next try when the kept Base URL does not answer', async () => {
		const first = cachingContext();
		first.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			reply('duplicate', [event('evt_1', 'duplicate')]),
		);
		await runTrigger(first.ctx);

		const { ctx } = cachingContext();
		ctx.getCredentials.mockResolvedValue({ baseUrl: 'http://claimd.moved:8080', apiKey: API_KEY });
		ctx.helpers.httpRequestWithAuthentication
			.mockRejectedValueOnce(refused())
			.mockResolvedValueOnce(reply('won', [event('evt_2', 'won')]));
		await runTrigger(ctx);
		expect(ctx.getCredentials).toHaveBeenCalledTimes(1);
		expect(triggerCalls(ctx)[1].url).toBe('http://claimd.moved:8080/v1/trigger/stripe');
	});

	it(`reads it again once it is older than ${TRIGGER_CREDENTIAL_MAX_AGE_MS} ms`, async () => {
		const now = vi.spyOn(Date, 'now');
		try {
			now.mockReturnValue(1_000_000);
			const first = cachingContext();
			first.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(first.ctx);
			now.mockReturnValue(1_000_000 + TRIGGER_CREDENTIAL_MAX_AGE_MS);
			const later = cachingContext();
			later.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(later.ctx);
			expect(later.ctx.getCredentials).toHaveBeenCalledTimes(1);
		} finally {
			now.mockRestore();
		}
	});

	it(`keeps at most ${TRIGGER_CREDENTIAL_MAX_ENTRIES} nodes' credentials`, async () => {
		for (let i = 0; i < TRIGGER_CREDENTIAL_MAX_ENTRIES + 5; i++) {
			const { ctx } = cachingContext(`Trigger ${i}`);
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				reply('duplicate', [event('evt_1', 'duplicate')]),
			);
			await runTrigger(ctx);
		}
		expect(cachedTriggerCredentialCount()).toBe(TRIGGER_CREDENTIAL_MAX_ENTRIES);
	});
});
