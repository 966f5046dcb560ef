import type {
	IDataObject,
	IHttpRequestOptions,
	INode,
	INodeParameters,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { mockDeep, type DeepMockProxy } from 'vitest-mock-extended';

import { IdempotentClaimTrigger } from '../nodes/IdempotentClaimTrigger/IdempotentClaimTrigger.node';
import type { TriggerRequest } from '../nodes/IdempotentClaimTrigger/transport';
import { BASE_URL } from './helpers';

export const TRIGGER_NODE: INode = {
	id: 'trigger-1',
	name: 'Idempotent Claim Trigger',
	type: 'n8n-nodes-idempotent-claim.idempotentClaimTrigger',
	typeVersion: 1.1,
	position: [0, 0],
	parameters: {},
	credentials: { idempotentClaimApi: { id: 'cred-1', name: 'Idempotent Claim API' } },
};

export const API_KEY = 'ic_test_key_not_to_be_logged';

/** A provider request as n8n hands it to the trigger (express request, body parsed by n8n). */
export interface FakeRequest {
	method: string;
	rawHeaders: string[];
	headers: IDataObject;
	params: IDataObject;
	query: IDataObject;
	body?: unknown;
	rawBody?: Buffer;
	readRawBody?: () => Promise<void>;
	originalUrl: string;
	url: string;
	contentType?: string;
}

/** What the trigger sent the provider through the response object. */
export class FakeResponse {
	statusCode = 200;
	headers: Record<string, string> = {};
	body: string | Buffer | undefined;
	ended = false;

	get headersSent(): boolean {
		return this.ended;
	}

	status(code: number): this {
		this.statusCode = code;
		return this;
	}

	setHeader(name: string, value: string): this {
		this.headers[name.toLowerCase()] = value;
		return this;
	}

	end(body?: string | Buffer): this {
		this.body = body;
		this.ended = true;
		return this;
	}

	/** The body as text. */
	text(): string {
		return Buffer.isBuffer(this.body) ? this.body.toString('utf8') : (this.body ?? '');
	}
}

/**
 * A delivery: raw header lines (as req.rawHeaders), the raw body bytes, and
 * what n8n derives from them (lower-cased headers, the parsed query).
 */
export function delivery(
	options: {
		method?: string;
		headers?: Array<[string, string]>;
		body?: Buffer | string;
		url?: string;
		parsed?: unknown;
		contentType?: string;
		keepRaw?: boolean;
	} = {},
): FakeRequest {
	const lines = options.headers ?? [
		['Content-Type', 'application/json'],
		['Stripe-Signature', 't=1,v1=abc'],
	];
	const headers: IDataObject = {};
	for (const [name, value] of lines) {
		const key = name.toLowerCase();
		headers[key] = headers[key] === undefined ? value : `${String(headers[key])}, ${value}`;
	}
	const url = options.url ?? '/webhook/stripe-events';
	const at = url.indexOf('?');
	const query = at < 0 ? {} : Object.fromEntries(new URLSearchParams(url.slice(at + 1)));
	const raw =
		options.body === undefined
			? Buffer.from('{"id":"evt_1","type":"invoice.paid"}')
			: Buffer.isBuffer(options.body)
				? options.body
				: Buffer.from(options.body);
	const request: FakeRequest = {
		method: options.method ?? 'POST',
		rawHeaders: lines.flat(),
		headers,
		params: {},
		query,
		body: options.parsed === undefined ? { id: 'evt_1', type: 'invoice.paid' } : options.parsed,
		originalUrl: url,
		url,
		contentType: options.contentType ?? 'application/json',
	};
	if (options.keepRaw === false) {
		request.readRawBody = async () => {
			request.rawBody = raw;
		};
	} else {
		request.rawBody = raw;
	}
	return request;
}

export type TriggerContext = DeepMockProxy<IWebhookFunctions>;

/**
 * A mocked webhook context: parameters from `params` (n8n's fallback when
 * one is missing), the credential holds the base URL and API key,
 * httpRequestWithAuthentication is a mock the test programs.
 */
export function triggerContext(
	options: {
		params?: IDataObject;
		mode?: 'webhook' | 'manual';
		webhookName?: 'default' | 'setup';
		request?: FakeRequest;
	} = {},
): { ctx: TriggerContext; res: FakeResponse; req: FakeRequest } {
	const ctx = mockDeep<IWebhookFunctions>();
	const params: IDataObject = { source: 'stripe', ...(options.params ?? {}) };
	const req = options.request ?? delivery();
	const res = new FakeResponse();
	ctx.getMode.mockReturnValue(options.mode ?? 'webhook');
	ctx.getNode.mockReturnValue({ ...TRIGGER_NODE, parameters: params as INodeParameters });
	ctx.getWebhookName.mockReturnValue(options.webhookName ?? 'default');
	ctx.getCredentials.mockResolvedValue({ baseUrl: `${BASE_URL}/`, apiKey: API_KEY });
	ctx.getRequestObject.mockReturnValue(
		req as unknown as ReturnType<IWebhookFunctions['getRequestObject']>,
	);
	ctx.getResponseObject.mockReturnValue(
		res as unknown as ReturnType<IWebhookFunctions['getResponseObject']>,
	);
	(
		ctx.getNodeParameter as unknown as { mockImplementation: (fn: unknown) => void }
	).mockImplementation((name: string, fallback?: unknown) =>
		Object.prototype.hasOwnProperty.call(params, name) ? params[name] : fallback,
	);
	return { ctx, res, req };
}

/** Runs the trigger's webhook() with the mocked context. */
export async function runTrigger(ctx: TriggerContext): Promise<IWebhookResponseData> {
	return await new IdempotentClaimTrigger().webhook.call(ctx);
}

/** Every call the trigger made to claimd, in order. */
export function triggerCalls(ctx: TriggerContext): IHttpRequestOptions[] {
	return ctx.helpers.httpRequestWithAuthentication.mock.calls.map(
		(call) => call[1] as IHttpRequestOptions,
	);
}

/** The body of the n-th call to claimd. */
export function sentBody(ctx: TriggerContext, index = 0): TriggerRequest {
	return triggerCalls(ctx)[index].body as unknown as TriggerRequest;
}

/** A claim result of one event as claimd's trigger call answers it. */
export function event(eventId: string, outcome: string, extra: IDataObject = {}): IDataObject {
	return {
		outcome,
		claim_id: `claim-${eventId}`,
		idempotency_key: `stripe:${eventId}`,
		source: 'stripe',
		event_id: eventId,
		action: '',
		attempt: 1,
		state: outcome === 'won' ? 'processing' : 'completed',
		payload_hash: 'ab'.repeat(32),
		// As claimd: an open record's earliest date, a finished one's exact date.
		key_expires_at: outcome === 'won' ? '2028-01-10T12:00:00Z' : '2028-01-09T12:00:00Z',
		key_expiry: outcome === 'won' ? 'not_before' : 'fixed',
		event_type: 'invoice.paid',
		...(outcome === 'won'
			? { claim_token: `token-${eventId}`, lease_until: '2030-01-01T00:00:00Z' }
			: {}),
		...(outcome === 'in_progress' || outcome === 'retry_later' ? { retry_after_seconds: 7 } : {}),
		...extra,
	};
}

/** claimd's reply to a trigger call. */
export function reply(
	decision: string,
	events: IDataObject[],
	response: {
		status?: number;
		headers?: Record<string, string>;
		body?: string;
		body_base64?: string;
	} = {},
): IDataObject {
	return {
		decision,
		events,
		response: {
			status: response.status ?? 200,
			headers: response.headers ?? { 'Content-Type': 'application/json' },
			...(response.body_base64 !== undefined
				? { body_base64: response.body_base64 }
				: {
						body:
							response.body ??
							JSON.stringify({
								received: events.map((e) => ({
									event_id: e.event_id,
									claim_id: e.claim_id,
									outcome: e.outcome,
								})),
								rejected_items: 0,
							}),
					}),
		},
	};
}
