import { randomUUID } from 'node:crypto';

import type {
	IBinaryKeyData,
	IDataObject,
	IHookFunctions,
	INodeExecutionData,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import { claimSidecar } from '../IdempotentClaim/helpers/idempotency';
import type { ClaimResult } from '../IdempotentClaim/transport/types';
import { workflowIdOf } from '../IdempotentClaim/helpers/workflow';
import {
	answerKind,
	claimdAnswer,
	configuredAnswers,
	inProgressAnswer,
	isUnfinished,
	unavailableAnswer,
	withConfigured,
	type Answer,
	type AnswerKind,
	type ConfiguredAnswer,
} from './answers';
import { DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS } from './description';
import { parseExactJson } from './exactJson';
import { callTrigger, type TriggerEvent, type TriggerRequest } from './transport';

/** What the node reads of n8n's request (an express request, body already parsed by n8n). */
interface IncomingRequest {
	method: string;
	/** Header names and values as received, alternating, repeats kept. */
	rawHeaders?: string[];
	headers: IDataObject;
	params?: IDataObject;
	query?: IDataObject;
	body?: unknown;
	/** The body bytes, kept by n8n when it read the body (inflated for gzip and deflate). */
	rawBody?: Buffer;
	readRawBody?: () => Promise<void>;
	originalUrl?: string;
	url?: string;
	/** The media type of Content-Type, without parameters. */
	contentType?: string;
}

/** What the node uses of n8n's response (an express response). */
interface OutgoingResponse {
	headersSent?: boolean;
	status(code: number): unknown;
	setHeader(name: string, value: string): unknown;
	end(body?: string | Buffer): unknown;
}

/** How the claim is settled when the execution fails (idempotency.on_error). */
export const ON_ERROR_VALUES = ['unknown', 'retryable', 'permanent'] as const;

/** The node's parameters for one delivery. */
export interface Settings {
	source: string;
	responseMode: string;
	answers: Partial<Record<AnswerKind, ConfiguredAnswer>>;
	waitSeconds: number;
	onError: string;
	rawBody: boolean;
	/** Options → Exact Numbers: JSON numbers a JavaScript number would change are kept as strings. */
	exactNumbers: boolean;
	/** Options → Shadow Mode: every delivery starts an execution; claimd records what it would have decided. */
	shadow: boolean;
	/** Parameters that are not valid, each with what was done instead. */
	problems: Array<{ parameter: string; message: string }>;
}

/**
 * Reads the node's parameters. A value that is not allowed is reported in
 * `problems` and replaced by the safe one: an answer that may not have its
 * status code is left out (claimd's answer is sent), a wait out of range is
 * no wait, an unknown On Execution Error is unknown.
 */
export function readSettings(
	this: Pick<IWebhookFunctions | IHookFunctions, 'getNodeParameter'>,
): Settings {
	const problems: Settings['problems'] = [];
	const source = String(this.getNodeParameter('source', '') ?? '').trim();
	if (source === '') {
		problems.push({
			parameter: 'source',
			message: "Source is empty: name a source of claimd's sources file",
		});
	}
	const responseMode = String(this.getNodeParameter('responseMode', 'onReceived'));
	const options = this.getNodeParameter('options', {}) as IDataObject;
	const { answers, problems: answerProblems } = configuredAnswers(options.answers);
	for (const message of answerProblems) {
		problems.push({
			parameter: 'options.answers',
			message: `${message}; claimd's answer is sent instead`,
		});
	}
	let waitSeconds = 0;
	if (options.inProgress === 'wait') {
		const wanted = options.waitSeconds ?? DEFAULT_WAIT_SECONDS;
		if (
			typeof wanted === 'number' &&
			Number.isInteger(wanted) &&
			wanted >= 1 &&
			wanted <= MAX_WAIT_SECONDS
		) {
			waitSeconds = wanted;
		} else {
			problems.push({
				parameter: 'options.waitSeconds',
				message: `Options → Wait Seconds must be a whole number from 1 to ${MAX_WAIT_SECONDS}, not ${String(wanted)}; in-progress events are answered at once instead`,
			});
		}
	}
	let onError = String(options.onExecutionError ?? 'unknown');
	if (!(ON_ERROR_VALUES as readonly string[]).includes(onError)) {
		problems.push({
			parameter: 'options.onExecutionError',
			message: `Options → On Execution Error must be one of ${ON_ERROR_VALUES.join(', ')}, not "${onError}"; unknown is used instead`,
		});
		onError = 'unknown';
	}
	return {
		source,
		responseMode,
		answers,
		waitSeconds,
		onError,
		rawBody: options.rawBody === true,
		exactNumbers: options.exactNumbers === true,
		shadow: options.shadow === true,
		problems,
	};
}

/** req.rawHeaders as [name, value] pairs, in order, repeats kept. */
export function headerPairs(req: IncomingRequest): Array<[string, string]> {
	const pairs: Array<[string, string]> = [];
	const raw = req.rawHeaders;
	if (Array.isArray(raw)) {
		for (let i = 0; i + 1 < raw.length; i += 2) pairs.push([String(raw[i]), String(raw[i + 1])]);
		return pairs;
	}
	for (const [name, value] of Object.entries(req.headers ?? {})) {
		for (const one of Array.isArray(value) ? value : [value]) pairs.push([name, String(one)]);
	}
	return pairs;
}

/** The raw query string of the request, without '?' ("" without one). */
export function rawQuery(req: IncomingRequest): string {
	const url = req.originalUrl ?? req.url ?? '';
	const at = url.indexOf('?');
	return at < 0 ? '' : url.slice(at + 1);
}

/** A delivery the node refuses before claimd is asked: its answer and why. */
class Refusal extends Error {
	constructor(
		message: string,
		readonly answer: Answer,
		readonly description: string,
	) {
		super(message);
	}
}

/**
 * The body bytes as received: n8n's req.rawBody, read by n8n first when it
 * has not (a media type it does not parse). A multipart body is parsed by
 * n8n from the stream without keeping its bytes: it cannot be verified, so
 * it is refused (415).
 */
async function rawBodyOf(req: IncomingRequest): Promise<Buffer> {
	if (Buffer.isBuffer(req.rawBody)) return req.rawBody;
	if ((req.contentType ?? '').startsWith('multipart/')) {
		throw new Refusal(
			'multipart/form-data deliveries are not supported',
			{
				status: 415,
				headers: { 'Content-Type': 'application/json' },
				body: JSON.stringify({
					error: {
						code: 'unsupported_media_type',
						message: 'multipart/form-data deliveries are not taken',
					},
				}),
			},
			'n8n parses a multipart body without keeping its bytes, so claimd cannot check its signature. The delivery was answered 415 and nothing was claimed.',
		);
	}
	if (typeof req.readRawBody === 'function') await req.readRawBody();
	return Buffer.isBuffer(req.rawBody) ? req.rawBody : Buffer.alloc(0);
}

/** The raw body parsed as JSON (exactly with exactNumbers), or undefined when it is not JSON. */
function parseRaw(raw: Buffer, exactNumbers: boolean): unknown {
	let text = raw.toString('utf8');
	if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
	try {
		return exactNumbers ? parseExactJson(text) : (JSON.parse(text) as unknown);
	} catch {
		// Not JSON after all: the raw bytes are claimd's to judge, and a
		// parse error would quote the body.
		return undefined;
	}
}

/**
 * The body of a delivery that is not a batch. A JSON media type
 * (application/json, any +json) is the raw body parsed: with exactNumbers
 * its numbers that a JavaScript number would change are strings of their
 * digits (n8n's own parse has rounded them). Otherwise n8n's parsed body
 * (a form's fields); for a JSON media type n8n does not parse
 * (application/cloudevents+json), the JSON; else {}.
 */
function parsedBody(req: IncomingRequest, raw: Buffer, exactNumbers: boolean): unknown {
	const json = raw.length > 0 && /^[^;]*[/+]json\s*(;|$)/i.test(req.contentType ?? '');
	if (json && exactNumbers) {
		const exact = parseRaw(raw, true);
		if (exact !== undefined) return exact;
	}
	if (req.body !== undefined && req.body !== null) return req.body;
	if (json) return parseRaw(raw, false) ?? {};
	return {};
}

/**
 * value with every query parameter named in names (exact names, compared
 * after percent-decoding) left out of its query: the part after the first
 * '?' up to a '#', or, for a value without '?' that holds '=', the whole
 * value read as a query string. The other parameters stay as they were,
 * in order, joined with '&'; a value without such a parameter is returned
 * unchanged. claimd's inbox.RedactQueryParams, for header values that
 * repeat the webhook URL (a proxy's X-Original-URL, a Referer).
 */
export function redactQuery(value: string, names: readonly string[]): string {
	if (names.length === 0) return value;
	let prefix = '';
	let query = value;
	let fragment = '';
	const q = value.indexOf('?');
	if (q >= 0) {
		prefix = value.slice(0, q + 1);
		query = value.slice(q + 1);
	} else if (!value.includes('=')) {
		return value;
	}
	const h = query.indexOf('#');
	if (h >= 0) {
		fragment = query.slice(h);
		query = query.slice(0, h);
	}
	let removed = false;
	const kept = query
		.split(/[&;]/)
		.filter((part) => part !== '')
		.filter((part) => {
			let name = part.split('=', 1)[0];
			try {
				name = decodeURIComponent(name.replace(/\+/g, ' '));
			} catch {
				// Not validly encoded: compared as it is.
			}
			if (names.includes(name.trim())) {
				removed = true;
				return false;
			}
			return true;
		});
	return removed ? prefix + kept.join('&') + fragment : value;
}

/** The request's headers with credential query parameters left out of their values. */
function itemHeaders(req: IncomingRequest, credentialQuery: readonly string[]): IDataObject {
	const headers: IDataObject = { ...(req.headers ?? {}) };
	if (credentialQuery.length === 0) return headers;
	for (const [name, value] of Object.entries(headers)) {
		if (typeof value === 'string') headers[name] = redactQuery(value, credentialQuery);
		else if (Array.isArray(value)) {
			headers[name] = value.map((one) =>
				typeof one === 'string' ? redactQuery(one, credentialQuery) : one,
			);
		}
	}
	return headers;
}

/** The request's parsed query without the credential query parameters. */
function itemQuery(req: IncomingRequest, credentialQuery: readonly string[]): IDataObject {
	const query: IDataObject = { ...(req.query ?? {}) };
	for (const name of credentialQuery) delete query[name];
	return query;
}

/**
 * One item per event that runs: json is what n8n's Webhook node gives
 * (headers, params, query, body) with `idempotency`: the Claim node's
 * object, plus event_type and on_error. The body of an item of a batch is
 * the event's own payload. A test item has outcome "test" and no claim token
 * (nor key expiry: nothing was claimed).
 * The query parameters claimd names as the source's credentials
 * (credentialQuery: a token in the webhook URL) are left out of `query`
 * and of header values that repeat the URL.
 */
export function eventItems(
	req: IncomingRequest,
	raw: Buffer,
	events: TriggerEvent[],
	settings: Pick<Settings, 'onError' | 'rawBody' | 'exactNumbers'>,
	test: boolean,
	credentialQuery: readonly string[] = [],
): INodeExecutionData[] {
	return events.map((event) => {
		// A test event claims nothing: no token and no record, so no key expiry.
		const result = (
			test
				? {
						...event,
						outcome: 'test',
						claim_token: undefined,
						key_expires_at: undefined,
						key_expiry: undefined,
					}
				: event
		) as ClaimResult;
		const json: IDataObject = {
			headers: itemHeaders(req, credentialQuery),
			params: { ...(req.params ?? {}) },
			query: itemQuery(req, credentialQuery),
			body: (Object.prototype.hasOwnProperty.call(event, 'payload')
				? event.payload
				: parsedBody(req, raw, settings.exactNumbers)) as IDataObject,
			idempotency: {
				...claimSidecar(result),
				event_type: event.event_type ?? null,
				on_error: settings.onError,
			},
		};
		const item: INodeExecutionData = { json };
		if (settings.rawBody) {
			const binary: IBinaryKeyData = {
				data: {
					data: raw.toString('base64'),
					mimeType: req.contentType ?? 'application/octet-stream',
					fileSize: String(raw.length),
				},
			};
			item.binary = binary;
		}
		return item;
	});
}

/** Headers never copied from an answer: the server sets them for the body and connection it sends. */
const SERVER_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive']);

function setHeaders(this: IWebhookFunctions, res: OutgoingResponse, answer: Answer): void {
	for (const [name, value] of Object.entries(answer.headers)) {
		if (SERVER_HEADERS.has(name.toLowerCase())) continue;
		try {
			res.setHeader(name, value);
		} catch (error) {
			this.logger.warn(`Idempotent Claim Trigger: header ${name} left out of the answer`, {
				error: (error as Error).message,
			});
		}
	}
}

/** Sends answer to the provider now. */
function send(this: IWebhookFunctions, res: OutgoingResponse, answer: Answer): void {
	res.status(answer.status);
	setHeaders.call(this, res, answer);
	res.end(answer.body);
}

/** The answer for a delivery whose events do not run. */
function noRunAnswer(
	base: Answer,
	decision: string,
	events: TriggerEvent[],
	answers: Settings['answers'],
): Answer {
	const kind = answerKind(decision);
	if (kind === 'inProgress' || events.some(isUnfinished)) {
		return inProgressAnswer(base, events, answers.inProgress);
	}
	if (kind === undefined || kind === 'won') return base;
	return withConfigured(base, answers[kind]);
}

/**
 * Decides one provider request with claimd and answers it (see the node's
 * description): won events start the execution, every other decision is
 * answered at once and starts none.
 */
async function decide(
	this: IWebhookFunctions,
	req: IncomingRequest,
	res: OutgoingResponse,
	manual: boolean,
): Promise<IWebhookResponseData> {
	const settings = readSettings.call(this);
	if (settings.problems.length > 0) {
		const message = settings.problems.map((p) => p.message).join('. ');
		if (manual || settings.source === '') {
			throw new NodeOperationError(
				this.getNode(),
				'The Idempotent Claim Trigger is not set up right',
				{
					description: message,
				},
			);
		}
		this.logger.warn(`Idempotent Claim Trigger: ${message}`, { node: this.getNode().name });
	}
	const raw = await rawBodyOf(req);
	const request: TriggerRequest = {
		method: req.method,
		headers: headerPairs(req),
		query: rawQuery(req),
		body: raw.toString('base64'),
		request_id: randomUUID(),
		test: manual,
		wait_seconds: settings.waitSeconds,
	};
	if (settings.shadow) request.shadow = true;
	const workflowId = workflowIdOf(this);
	if (workflowId !== undefined) request.workflow_id = workflowId;
	const call = await callTrigger.call(this, settings.source, request, settings.exactNumbers);
	if (!call.ok) throw call.error;

	const { reply } = call;
	const base = claimdAnswer(reply.response);
	const test = reply.decision === 'test';
	const running = test ? reply.events : reply.events.filter((event) => event.outcome === 'won');
	if (running.length === 0) {
		send.call(this, res, noRunAnswer(base, reply.decision, reply.events, settings.answers));
		return { noWebhookResponse: true };
	}

	const credentialQuery = Array.isArray(reply.credential_query_params)
		? reply.credential_query_params.filter((name): name is string => typeof name === 'string')
		: [];
	const workflowData = [eventItems(req, raw, running, settings, test, credentialQuery)];
	if (reply.events.some(isUnfinished)) {
		// Some events of the delivery are not done: the provider must
		// deliver it again (the won ones are then duplicates).
		send.call(this, res, inProgressAnswer(base, reply.events, settings.answers.inProgress));
		return { noWebhookResponse: true, workflowData };
	}
	if (this.getWebhookName() !== 'default') {
		send.call(this, res, base);
		return { noWebhookResponse: true, workflowData };
	}
	if (settings.responseMode === 'lastNode' || settings.responseMode === 'responseNode') {
		return { workflowData };
	}
	// Answers → Won replaces claimd's 2xx only: a refusal of claimd's stays.
	const claimdAccepted = base.status >= 200 && base.status <= 299;
	const answer = test || !claimdAccepted ? base : withConfigured(base, settings.answers.won);
	if (answer.status === 200 && typeof answer.body === 'string') {
		// n8n answers 200 with this body once it has started the
		// execution (stored, or queued in queue mode), as for its Webhook node.
		setHeaders.call(this, res, answer);
		return { webhookResponse: answer.body, workflowData };
	}
	// n8n would answer 200: another status is sent now, before n8n starts
	// the execution.
	send.call(this, res, answer);
	return { noWebhookResponse: true, workflowData };
}

/**
 * The trigger's webhook method. On the Test URL (manual mode) a failure
 * is thrown, so the editor shows it. In production nothing is thrown (n8n
 * would record an execution for it and answer 500): a delivery that could
 * not be decided is answered 503 with Retry-After and starts nothing, and
 * the cause is logged (never the body, a header or the API key).
 */
export async function handleDelivery(this: IWebhookFunctions): Promise<IWebhookResponseData> {
	const manual = this.getMode() === 'manual';
	const req = this.getRequestObject() as unknown as IncomingRequest;
	const res = this.getResponseObject() as unknown as OutgoingResponse;
	try {
		return await decide.call(this, req, res, manual);
	} catch (error) {
		if (error instanceof Refusal) {
			if (manual) {
				throw new NodeOperationError(this.getNode(), error.message, {
					description: error.description,
				});
			}
			this.logger.warn(`Idempotent Claim Trigger: ${error.message}`, { node: this.getNode().name });
			if (!res.headersSent) send.call(this, res, error.answer);
			return { noWebhookResponse: true };
		}
		if (manual) {
			throw error instanceof NodeOperationError || error instanceof NodeApiError
				? error
				: new NodeOperationError(this.getNode(), error as Error);
		}
		const { message, description } = error as { message?: string; description?: string };
		this.logger.error(
			`Idempotent Claim Trigger: the delivery was not decided and was answered ${unavailableAnswer().status}: ${message ?? 'unknown error'}`,
			{ node: this.getNode().name, description: description ?? undefined },
		);
		if (!res.headersSent) send.call(this, res, unavailableAnswer());
		return { noWebhookResponse: true };
	}
}
