import type { INode, JsonObject } from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import type { ErrorCode, SidecarErrorBody } from './types';

/** Context for turning a failure into a message the workflow author can act on. */
export interface ErrorContext {
	/** Base URL of the sidecar, shown when it cannot be reached. */
	baseUrl?: string;
	/** Item the failure belongs to; unset for a failure of a whole batch. */
	itemIndex?: number;
	/** How many times the request was sent; more than 1 when it was retried. */
	tries?: number;
	/** The request, e.g. "GET /v1/claims/list", named when the answer is not the sidecar's. */
	request?: string;
	/** What claimd's not_found means for this request, instead of "Claim not found". */
	notFound?: { message: string; description?: string };
	/** What claimd's invalid_state means for this request, instead of the general message. */
	invalidState?: { message: string; description?: string };
}

/** Node.js socket codes meaning the request never reached the sidecar. */
const NOT_REACHED_CODES = new Set([
	'ECONNREFUSED',
	'ENOTFOUND',
	'EAI_AGAIN',
	'EHOSTUNREACH',
	'ENETUNREACH',
	'EADDRNOTAVAIL',
]);

/** Node.js socket codes meaning the connection broke after the request may have arrived. */
const BROKEN_CODES = new Set([
	'ECONNRESET',
	'ETIMEDOUT',
	'ECONNABORTED',
	'EPIPE',
	'ESOCKETTIMEDOUT',
]);

/**
 * Messages of n8n's own database failing to serve a query: the PostgreSQL
 * pool of n8n (pg-pool) had no free connection within
 * DB_POSTGRESDB_CONNECTION_TIMEOUT, the connection broke, the server is
 * full or restarting, or SQLite is locked. n8n reads the credential from
 * it; such a failure is n8n's, never the sidecar's.
 */
const N8N_DATABASE_MESSAGES = [
	/timeout exceeded when trying to connect/i,
	/Connection terminated/i,
	/too many clients already|remaining connection slots are reserved/i,
	/the database system is (starting up|shutting down|in recovery mode)/i,
	/SQLITE_BUSY|database is locked/i,
];

/** The pg-pool message of an exhausted pool. */
const POOL_EXHAUSTED = /timeout exceeded when trying to connect/i;

/**
 * HTTP status the sidecar answers for each error code of its contract:
 * every code of openapi.yaml's ErrorCode (a code added there does not
 * compile until it is here), with the status its x-status gives
 * (test/wireContract.test.ts), and too_large, the name older sidecars
 * answer body_too_large under.
 */
export const STATUS_BY_CODE: Readonly<Record<ErrorCode | 'too_large', number>> = {
	malformed: 400,
	invalid: 422,
	unauthorized: 401,
	rate_limited: 429,
	not_found: 404,
	lease_lost: 409,
	invalid_state: 409,
	// An answer to a reconcile call that is no longer the one in flight.
	reconcile_token_stale: 409,
	body_too_large: 413,
	too_large: 413,
	bad_request: 400,
	header_too_large: 431,
	request_timeout: 408,
	method_not_allowed: 405,
	internal: 500,
	unavailable: 503,
	// Answered only by POST /ingest/{source}, a provider's door, never to a
	// request of this node (INGEST_ONLY_CODES).
	unsupported_encoding: 415,
	not_stored: 422,
	bad_gateway: 502,
	gateway_timeout: 504,
};

/**
 * The codes only POST /ingest/{source} answers: a status of another
 * server (a proxy's 502 or 504) is never taken for one of them.
 */
const INGEST_ONLY_CODES: ReadonlySet<string> = new Set<ErrorCode>([
	'unsupported_encoding',
	'not_stored',
	'bad_gateway',
	'gateway_timeout',
]);

/** The status of a code of the contract; undefined for any other string. */
function statusOfCode(code: string): number | undefined {
	return Object.prototype.hasOwnProperty.call(STATUS_BY_CODE, code)
		? STATUS_BY_CODE[code as keyof typeof STATUS_BY_CODE]
		: undefined;
}

/** Node parameter names for the wire fields the sidecar may name in a validation error. */
const FIELD_LABELS: Record<string, string> = {
	source: 'Source',
	event_id: 'Event ID',
	key_parts: 'Key Parts',
	key_fields: 'Fields to Hash',
	event_type: 'Event Type',
	action: 'Action Name',
	payload: 'Payload for Conflict Detection',
	payload_hash: 'Payload Hash',
	lease_seconds: 'Time Limit for the Side Effect (Seconds)',
	lease_policy: 'When the Time Limit Passes Without Complete',
	object_id: 'Object ID',
	object_version: 'Object Version',
	execution_id: 'Execution ID',
	request_id: 'Request ID (execution, node, run and item)',
	claim_token: 'Claim Token',
	claim_id: 'Claim ID',
	result_ref: 'Result Reference',
	error: 'Error Message',
	retry: 'Retry Kind',
	outcome: 'Outcome',
	note: 'Note',
	claims: 'Items',
	state: 'State',
	limit: 'Limit',
	cursor: 'Cursor (next page)',
	reconciler: 'Reconciler',
	reconcile_token: 'Reconcile Token',
	verdict: 'Verdict',
};

interface Extracted {
	status?: number;
	body?: SidecarErrorBody;
	/** Whether an answer body had the sidecar's own error shape: {"error": {"code", "message"}}. */
	sidecarBody: boolean;
	socketCode?: string;
	message?: string;
	/** Every message along the cause chain, outermost first. */
	messages: string[];
}

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function toStatus(value: unknown): number | undefined {
	const status = typeof value === 'string' ? Number(value) : value;
	return typeof status === 'number' && Number.isInteger(status) && status >= 100 && status < 600
		? status
		: undefined;
}

/** The sidecar's error body in value: parsed, or JSON text (an answer read as text). */
function toErrorBody(value: unknown): SidecarErrorBody | undefined {
	if (typeof value === 'string') {
		try {
			return toErrorBody(JSON.parse(value));
		} catch {
			return undefined;
		}
	}
	if (!isObject(value) || !isObject(value.error)) return undefined;
	const { code, message, field } = value.error;
	return {
		code: typeof code === 'string' ? code : undefined,
		message: typeof message === 'string' ? message : undefined,
		field: typeof field === 'string' && field !== '' ? field : undefined,
	};
}

/**
 * Whether value is an error answer of the sidecar itself: every error it
 * sends is {"error": {"code": "...", "message": "...", "field"?: "..."}}.
 * Another server at the Base URL (a proxy, n8n, a web server) answers
 * otherwise, so its 404 is not taken for "claim not found".
 */
export function isSidecarErrorBody(value: unknown): boolean {
	if (typeof value === 'string') {
		try {
			return isSidecarErrorBody(JSON.parse(value));
		} catch {
			return false;
		}
	}
	return (
		isObject(value) &&
		isObject(value.error) &&
		typeof value.error.code === 'string' &&
		value.error.code !== '' &&
		typeof value.error.message === 'string'
	);
}

/**
 * Collects status, sidecar error body and socket code from an error thrown by
 * httpRequestWithAuthentication: a NodeApiError whose `cause` is the HTTP
 * client's error (with `code` and `response`), possibly nested further.
 */
function extract(error: unknown): Extracted {
	const found: Extracted = { messages: [], sidecarBody: false };
	let current: unknown = error;
	for (let depth = 0; depth < 6 && isObject(current); depth++) {
		const response = isObject(current.response) ? current.response : undefined;
		const context = isObject(current.context) ? current.context : undefined;
		found.status ??=
			toStatus(response?.status) ??
			toStatus(current.httpCode) ??
			toStatus(current.statusCode) ??
			toStatus(current.status);
		found.sidecarBody ||=
			isSidecarErrorBody(response?.data) ||
			isSidecarErrorBody(response?.body) ||
			isSidecarErrorBody(context?.data);
		found.body ??=
			toErrorBody(response?.data) ??
			toErrorBody(response?.body) ??
			toErrorBody(context?.data) ??
			toErrorBody(current.error === undefined ? undefined : { error: current.error });
		if (typeof current.code === 'string' && /^E[A-Z_]+$/.test(current.code)) {
			found.socketCode ??= current.code;
		}
		if (typeof current.message === 'string') {
			found.message ??= current.message;
			found.messages.push(current.message);
		}
		current = current.cause;
	}
	return found;
}

/** A batch names the field of one claim as "claims[3].source"; the item is known already. */
function claimField(field: string): string {
	return field.replace(/^claims\[\d+\]\./, '');
}

function fieldLabel(field: string): string {
	const label = FIELD_LABELS[field];
	return label ? `${label} (${field})` : field;
}

function errorCodeFor(status: number | undefined, code: string | undefined): string | undefined {
	if (code) return code;
	if (status === undefined) return undefined;
	if (status === 400 || status === 422) return 'invalid';
	if (status === 409) return 'lease_lost';
	// A proxy limits requests too; only the sidecar's own body says rate_limited.
	if (status === 429) return undefined;
	return Object.keys(STATUS_BY_CODE).find(
		(key) => !INGEST_ONLY_CODES.has(key) && statusOfCode(key) === status,
	);
}

function invalidField(field: string, detail: string | undefined) {
	const name = claimField(field);
	return {
		message: `Invalid ${fieldLabel(name)}: ${detail ?? 'rejected by the sidecar'}`,
		description:
			name === 'claims'
				? "One execution sends all its items in one batch. Split the input (Loop Over Items) or raise the sidecar's CLAIMD_MAX_BATCH."
				: `The sidecar rejected the value sent for "${name}". Fix the node parameter that supplies it.`,
	};
}

function messagesFor(
	code: string | undefined,
	body: SidecarErrorBody | undefined,
	status: number | undefined,
	notFound?: ErrorContext['notFound'],
	invalidState?: ErrorContext['invalidState'],
): { message: string; description?: string } {
	const detail = body?.message;
	switch (code) {
		case 'unauthorized':
			return {
				message: 'The Idempotent Claim sidecar rejected the API key',
				description:
					"The sidecar does not know the API Key of the Idempotent Claim API credential. It must be one of the keys in claimd's CLAIMD_API_KEYS (or made with claimd keys create), and it selects the tenant.",
			};
		case 'rate_limited':
			return {
				message: 'The Idempotent Claim sidecar is refusing API keys from this n8n for now',
				description: `${detail ? `${detail}. ` : ''}The sidecar received too many requests with a missing, unknown or revoked API key from this address (CLAIMD_AUTH_FAILURE_LIMIT within CLAIMD_AUTH_FAILURE_WINDOW_SECONDS) and checks no new key from it until its window ends. No claim was made. Check the API Key of every Idempotent Claim API credential used from this n8n (or behind the same proxy), then deliver the event again later.`,
			};
		case 'invalid':
		case 'malformed':
			return body?.field
				? invalidField(body.field, detail)
				: { message: `Invalid request: ${detail ?? 'rejected by the sidecar'}` };
		case 'invalid_state':
			if (invalidState !== undefined) {
				return {
					message: invalidState.message,
					description: `${detail ? `${detail}. ` : ''}${invalidState.description ?? ''}`.trim(),
				};
			}
			return {
				message: 'The claim is not in a state that allows this operation',
				description: detail,
			};
		case 'reconcile_token_stale':
			return {
				message: 'Reconcile token stale: this reconcile call is no longer the one claimd waits for',
				description: `${detail ? `${detail}. ` : ''}The call was answered or failed already, or its answer_by passed (claimd counts it as a failed call and asks again after a backoff, with a new token), or a later call was made. The answer was not applied; the next call of claimd's reconcile brings the token to answer with.`,
			};
		case 'lease_lost':
			return {
				message: 'Lease lost: this claim token is no longer current',
				description: `${detail ? `${detail}. ` : ''}This execution's time limit for the side effect passed (its lease expired) and another execution won the claim, or the claim was already finished. This execution no longer holds the claim; the request was not applied.`,
			};
		case 'not_found':
			if (notFound !== undefined) return { ...notFound };
			return {
				message: 'Claim not found',
				description: detail ?? 'No claim matches the given claim ID or key for this API key.',
			};
		case 'body_too_large':
		case 'too_large':
			return {
				message: 'Request too large for the Idempotent Claim sidecar',
				description:
					'Send fewer items per execution, or choose Selected Fields or None for Payload for Conflict Detection.',
			};
		case 'unavailable':
			return {
				message: 'The Idempotent Claim sidecar is unavailable',
				description: `${detail ? `${detail}. ` : ''}No claim was decided; deliver the event again later.`,
			};
		case 'internal':
			return {
				message: 'The Idempotent Claim sidecar failed to process the request',
				description: detail,
			};
		default:
			return {
				message: `Idempotent Claim sidecar error${status ? ` (HTTP ${status})` : ''}${detail ? `: ${detail}` : ''}`,
			};
	}
}

function build(
	node: INode,
	parts: { message: string; description?: string },
	status: number | undefined,
	details: JsonObject,
	itemIndex: number | undefined,
): NodeApiError {
	// A plain object (not the thrown error) so that NodeApiError keeps our message
	// instead of returning the wrapped instance unchanged.
	const apiError = new NodeApiError(node, { message: parts.message } as JsonObject, {
		message: parts.message,
		description: parts.description,
		httpCode: status === undefined ? undefined : String(status),
		itemIndex,
	});
	apiError.context.sidecar = details;
	return apiError;
}

/** Builds the error for one entry of a batch answer that carries `{"error": {...}}`. */
export function sidecarEntryError(
	node: INode,
	body: SidecarErrorBody,
	ctx: ErrorContext = {},
): NodeApiError {
	const status = body.code ? statusOfCode(body.code) : undefined;
	return build(
		node,
		messagesFor(body.code, body, status),
		status,
		{ ...body } as JsonObject,
		ctx.itemIndex,
	);
}

/**
 * Whether a failed sidecar request may be sent again as it is: the connection
 * failed or broke before an answer (refused, reset, aborted, timed out) or the
 * answer was a 5xx (the sidecar's 503 while its database is unavailable, a
 * proxy's 502/504). Sending again is safe for Claim (same request ID: a claim
 * it made is answered again with the same token), Complete and Fail (same
 * token: idempotent). A 4xx is never retried: the same request would be
 * refused again.
 */
export function isRetryable(error: unknown): boolean {
	const found = extract(error);
	if (found.status !== undefined) return found.status >= 500;
	return (
		found.socketCode !== undefined &&
		(NOT_REACHED_CODES.has(found.socketCode) || BROKEN_CODES.has(found.socketCode))
	);
}

/**
 * The HTTP status of the answer an error of httpRequestWithAuthentication
 * carries; undefined when no answer came (the connection failed or broke).
 */
export function answerStatus(error: unknown): number | undefined {
	return extract(error).status;
}

function n8nDatabaseMessage(found: Extracted): string | undefined {
	return found.messages.find((message) =>
		N8N_DATABASE_MESSAGES.some((pattern) => pattern.test(message)),
	);
}

/**
 * Whether error, thrown while n8n read the node's credential, is n8n's own
 * database failing for now (pool exhausted, connection refused or broken,
 * server full or restarting, SQLite busy): worth trying again. The sidecar
 * is not involved at that point, so a socket code here is n8n's database's.
 */
export function isN8nDatabaseError(error: unknown): boolean {
	const found = extract(error);
	if (n8nDatabaseMessage(found) !== undefined) return true;
	return (
		found.status === undefined &&
		found.socketCode !== undefined &&
		(NOT_REACHED_CODES.has(found.socketCode) || BROKEN_CODES.has(found.socketCode))
	);
}

/** The error for n8n's own database failing while the credential was read or a request was made. */
function n8nDatabaseError(node: INode, detail: string, ctx: ErrorContext): NodeOperationError {
	const hint = POOL_EXHAUSTED.test(detail)
		? " It means every connection of n8n's database pool was busy: raise DB_POSTGRESDB_POOL_SIZE (n8n's default is 2) or run fewer executions at once (a worker's --concurrency)."
		: '';
	return new NodeOperationError(
		node,
		'n8n could not read the Idempotent Claim API credential from its own database',
		{
			itemIndex: ctx.itemIndex,
			description: `${detail}. This is n8n's own database (DB_TYPE, DB_POSTGRESDB_*), not the Idempotent Claim sidecar: the sidecar was not called${ctx.tries !== undefined && ctx.tries > 1 ? ` (tried ${ctx.tries} times)` : ''}.${hint}`,
		},
	);
}

/**
 * Maps a failure to read the node's credential: n8n's own database failing
 * names that database (never the sidecar); n8n's own node errors (no
 * credential selected, not found) are kept as they are; anything else says
 * the credential could not be loaded.
 */
export function credentialError(
	node: INode,
	error: unknown,
	ctx: ErrorContext = {},
): NodeApiError | NodeOperationError {
	const found = extract(error);
	if (isN8nDatabaseError(error)) {
		return n8nDatabaseError(
			node,
			n8nDatabaseMessage(found) ?? found.message ?? `connection failed (${found.socketCode})`,
			ctx,
		);
	}
	if (error instanceof NodeApiError || error instanceof NodeOperationError) {
		if (ctx.itemIndex !== undefined && error.context.itemIndex === undefined) {
			error.context.itemIndex = ctx.itemIndex;
		}
		return error;
	}
	return new NodeOperationError(
		node,
		`n8n could not load the Idempotent Claim API credential${found.message ? `: ${found.message}` : ''}`,
		{ itemIndex: ctx.itemIndex },
	);
}

/** " (sent 3 times)" when the request was retried, else "". */
function triesNote(tries: number | undefined): string {
	return tries !== undefined && tries > 1 ? ` (sent ${tries} times)` : '';
}

/**
 * Maps any failure of a sidecar request to a NodeApiError: unreachable sidecar,
 * rejected API key, too many rejected keys (429), invalid field (named from the answer's `error.field`), lease
 * lost, not found, too large, unavailable or internal failure.
 */
export function mapSidecarError(node: INode, error: unknown, ctx: ErrorContext = {}): NodeApiError {
	// Already said: an answer that is not the sidecar's.
	if (error instanceof NodeApiError && sidecarErrorCode(error) === 'not_sidecar') return error;
	const found = extract(error);
	const where = ctx.baseUrl ? ` at ${ctx.baseUrl}` : '';

	if (found.status === undefined && found.socketCode && NOT_REACHED_CODES.has(found.socketCode)) {
		return build(
			node,
			{
				message: `Cannot reach the Idempotent Claim sidecar${where}`,
				description: `Connection failed (${found.socketCode})${triesNote(ctx.tries)}. Check that claimd is running and the Base URL of the Idempotent Claim API credential: http://claimd:8080 from n8n in docker compose, http://127.0.0.1:8080 when claimd runs on the same machine. No claim was made; deliver the event again later.`,
			},
			undefined,
			{ code: 'unreachable', socket: found.socketCode },
			ctx.itemIndex,
		);
	}
	if (found.status === undefined && found.socketCode && BROKEN_CODES.has(found.socketCode)) {
		return build(
			node,
			{
				message: `Lost the connection to the Idempotent Claim sidecar${where}`,
				description: `Connection broke (${found.socketCode}) before an answer arrived${triesNote(ctx.tries)}, so the outcome is unknown. Running this node again in the same execution (Retry On Fail) is safe: a claim this request made comes back as the same won claim while its lease lasts, and Complete or Fail with the same token is idempotent. A new execution finds such a claim in progress until its lease expires.`,
			},
			undefined,
			{ code: 'unreachable', socket: found.socketCode },
			ctx.itemIndex,
		);
	}

	const own = found.status === undefined ? n8nDatabaseMessage(found) : undefined;
	if (own !== undefined) {
		const ownError = n8nDatabaseError(node, own, ctx);
		return build(
			node,
			{ message: ownError.message, description: ownError.description ?? undefined },
			undefined,
			{ code: 'n8n_database' },
			ctx.itemIndex,
		);
	}

	if ((found.status === 404 || found.status === 405) && !found.sidecarBody) {
		return notSidecarError(node, `answered HTTP ${found.status}`, ctx, found.status);
	}

	const code = errorCodeFor(found.status, found.body?.code);
	if (code === undefined && found.status === undefined) {
		return build(
			node,
			{
				message: `Idempotent Claim request failed${found.message ? `: ${found.message}` : ''}`,
			},
			undefined,
			{},
			ctx.itemIndex,
		);
	}
	const parts = messagesFor(code, found.body, found.status, ctx.notFound, ctx.invalidState);
	if (ctx.tries !== undefined && ctx.tries > 1) {
		parts.description = `${parts.description ? `${parts.description} ` : ''}Sent ${ctx.tries} times.`;
	}
	return build(
		node,
		parts,
		found.status ?? (code ? statusOfCode(code) : undefined),
		{ ...(found.body ?? {}), code: code ?? null } as JsonObject,
		ctx.itemIndex,
	);
}

/** The Base URL of the credential, as the messages name it. */
const BASE_URL_HINT =
	'Check the Base URL of the Idempotent Claim API credential: http://claimd:8080 from n8n in docker compose, http://127.0.0.1:8080 when claimd runs on the same machine, without a path. Its credential test calls GET /v1/whoami and says whether the address is the sidecar.';

/**
 * The error for an answer that is not the sidecar's: a 404 or 405 without
 * the sidecar's error body, or a success whose body is not a JSON object.
 * Something else answers at the Base URL (a web server, a proxy, n8n
 * itself); nothing was decided.
 */
export function notSidecarError(
	node: INode,
	what: string,
	ctx: ErrorContext = {},
	status?: number,
): NodeApiError {
	const where = ctx.baseUrl ? ` (${ctx.baseUrl})` : '';
	const request = ctx.request ? `${ctx.request} ` : 'The request ';
	return build(
		node,
		{
			message: 'The Base URL does not point at an Idempotent Claim sidecar',
			description: `${request}${what}, and not in the way the sidecar answers${where}. ${BASE_URL_HINT}`,
		},
		status,
		{ code: 'not_sidecar' },
		ctx.itemIndex,
	);
}

/**
 * The sidecar's error code an error of sidecarRequest carries ("not_found",
 * "lease_lost", "unreachable", "not_sidecar", …), or undefined.
 */
export function sidecarErrorCode(error: unknown): string | undefined {
	if (!isObject(error) || !isObject(error.context) || !isObject(error.context.sidecar)) {
		return undefined;
	}
	const code = error.context.sidecar.code;
	return typeof code === 'string' ? code : undefined;
}

/** What a Complete or Fail that gave up knows about its report. */
export interface UnrecordedContext {
	operation: 'complete' | 'fail';
	claimId: string;
	itemIndex: number;
	/** Items of the execution whose report met the same fate (1 or more). */
	items: number;
	/** When the first send started and the deadline, epoch ms. */
	since: number;
	until?: number;
	/** What the deadline was: "the lease end" or "the time limit". */
	untilWhat?: string;
}

/**
 * The error of a Complete or Fail that kept trying while the sidecar could
 * not be reached (or answered 5xx, or n8n's database failed) and gave up at
 * its deadline: the effect's outcome is now unknown to the sidecar. It says
 * what becomes of the claim under each lease policy and how to settle it.
 */
export function unrecordedOutcomeError(
	node: INode,
	cause: { message: string },
	ctx: UnrecordedContext,
): NodeApiError {
	const complete = ctx.operation === 'complete';
	const tried =
		ctx.until === undefined
			? 'Sent once (Retry Sidecar Calls is off)'
			: `Kept trying for ${Math.max(0, Math.round((Date.now() - ctx.since) / 1000))} s, until ${new Date(ctx.until).toISOString()} (${ctx.untilWhat ?? 'the deadline'})`;
	const fate = complete
		? 'once its time limit passes (lease end): marked for review (lease policy review), it becomes unknown and no delivery runs the effect again until it is resolved; set to let the next delivery run it again (lease policy reclaim), the next delivery of the event wins it and runs the effect again'
		: 'once its time limit passes (lease end): marked for review (lease policy review), it becomes unknown until it is resolved; set to let the next delivery run it again (lease policy reclaim), the next delivery of the event wins it and runs the effect again, as after a retryable failure';
	const settle = complete
		? `if it is still processing, run Complete again with the same claim token; if it is unknown, Resolve it as completed, with the result reference`
		: `if it is still processing, run Fail again with the same claim token; if it is unknown, Resolve it: retry to let the next delivery run the effect, or completed`;
	const others =
		ctx.items > 1 ? ` ${ctx.items} items of this execution are in the same state.` : '';
	const parts = {
		message: complete
			? `The effect ran but its outcome could not be recorded (claim ${ctx.claimId}): the outcome is now unknown`
			: `The effect failed but the failure could not be recorded (claim ${ctx.claimId}): the outcome is now unknown`,
		description: `Last failure: ${cause.message}. ${tried}. The last try may still have landed. Otherwise the claim stays processing, and ${fate}. Once the sidecar answers, look the claim up (Lookup, Claim ID ${ctx.claimId}): ${settle}.${others}`,
	};
	return build(
		node,
		parts,
		undefined,
		{ code: 'outcome_unknown', claim_id: ctx.claimId },
		ctx.itemIndex,
	);
}
