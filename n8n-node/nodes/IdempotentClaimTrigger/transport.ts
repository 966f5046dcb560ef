import type {
	GenericValue,
	ICredentialDataDecryptedObject,
	IDataObject,
	IHttpRequestOptions,
	IWebhookFunctions,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';
import { sleep } from 'n8n-workflow';

import { AgedCache } from '../IdempotentClaim/helpers/agedCache';
import { CREDENTIAL_TYPE } from '../IdempotentClaim/transport';
import {
	answerStatus,
	credentialError,
	isN8nDatabaseError,
	isRetryable,
	mapSidecarError,
	notSidecarError,
	sidecarErrorCode,
	type ErrorContext,
} from '../IdempotentClaim/transport/errors';
import type { ClaimResult } from '../IdempotentClaim/transport/types';
import { parseExactJson } from './exactJson';

/**
 * How claimd decided a delivery (POST /v1/trigger/{source}): a claim
 * outcome of its events (won first, then in_progress, retry_later,
 * conflict, unknown, dead_lettered, stale, duplicate), or a decision taken
 * before any event was claimed.
 */
export type TriggerDecision =
	| 'won'
	| 'duplicate'
	| 'conflict'
	| 'in_progress'
	| 'retry_later'
	| 'stale'
	| 'dead_lettered'
	| 'unknown'
	/** A provider handshake (Slack url_verification, Graph validationToken…): answered as claimd says. */
	| 'handshake'
	/** Not authenticated: the source's unauthenticated_status, saying nothing of why. */
	| 'unauthenticated'
	/** Authentic, but its body cannot be keyed as sent (422): the provider must retry, never 2xx. */
	| 'not_stored'
	/** Authentic, of an event type the source leaves out: 200, nothing claimed. */
	| 'filtered'
	/** Sent with a Content-Encoding (415): signatures cover the bytes as sent. */
	| 'unsupported_encoding'
	/** Not POST (405): only POST is a delivery. */
	| 'method_not_allowed'
	/** The Test URL: verified and keyed, nothing claimed. */
	| 'test';

/** The body of POST /v1/trigger/{source}: the provider's request as n8n received it. */
export interface TriggerRequest {
	method: string;
	/** req.rawHeaders in pairs: names as sent, in order, repeats kept. */
	headers: Array<[string, string]>;
	/** The raw query string, without '?'. */
	query: string;
	/** Standard padded base64 of the raw body bytes. */
	body: string;
	/** Random per incoming request; the same when this call is sent again. */
	request_id: string;
	/** n8n's Test URL: verify and key, claim nothing. */
	test: boolean;
	/** How long an in_progress event waits for its holder, 0 to 25. */
	wait_seconds: number;
	/** Shadow mode (observe only): every event answered won, with shadow.would_be. */
	shadow?: boolean;
	/** The workflow's id (getWorkflow().id), on each event's claim; n8n gives nodes no version id. */
	workflow_id?: string;
}

/** One event of a decided delivery: its claim result (identity only for a test). */
export interface TriggerEvent extends Partial<ClaimResult> {
	event_type?: string;
	/** The item's own JSON, for an item of a batch body. */
	payload?: IDataObject | IDataObject[] | GenericValue | GenericValue[];
}

/** What claimd's ingest door would answer the provider. */
export interface ProviderResponse {
	status: number;
	headers: Record<string, string>;
	/** The body as text; absent when it is not UTF-8 (then body_base64). */
	body?: string;
	body_base64?: string;
}

/** The answer of POST /v1/trigger/{source}. */
export interface TriggerReply {
	decision: TriggerDecision | string;
	events: TriggerEvent[];
	response: ProviderResponse;
	/**
	 * The query parameters of the provider's request that carry the
	 * source's token (a classic Mollie `token`, Pub/Sub's query_token,
	 * Meta's hub.verify_token): left out of the items. Absent from an
	 * older claimd.
	 */
	credential_query_params?: string[];
}

/** A call that ended: claimd's reply, or the error that ended it (never thrown). */
export type TriggerCall =
	| { ok: true; reply: TriggerReply; tries: number }
	| { ok: false; error: NodeApiError | NodeOperationError; tries: number };

/**
 * The call is sent again (same body, so the same request_id) after a
 * failure that may be retried (claimd unreachable, the connection broken,
 * a 5xx, n8n's own database failing while the credential is read), at most
 * MAX_TRIES times, and no send starts later than RETRY_WINDOW_MS after the
 * first one: a provider waits for its answer, and times out in seconds.
 */
export const MAX_TRIES = 4;
export const RETRY_WINDOW_MS = 2_000;
/** Wait before the second send; doubled before each further one. */
export const FIRST_WAIT_MS = 200;
/** Each send's own limit, beyond the wait it asks claimd for. */
export const REQUEST_TIMEOUT_MS = 5_000;

function isObject(value: unknown): value is IDataObject {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Whether value is claimd's reply: a decision, events and a provider response with a status. */
function isTriggerReply(value: unknown): value is TriggerReply {
	if (!isObject(value) || typeof value.decision !== 'string' || value.decision === '') return false;
	if (value.events !== undefined && value.events !== null && !Array.isArray(value.events)) {
		return false;
	}
	const response = value.response;
	return (
		isObject(response) &&
		typeof response.status === 'number' &&
		Number.isInteger(response.status) &&
		response.status >= 100 &&
		response.status <= 599 &&
		(response.headers === undefined || response.headers === null || isObject(response.headers))
	);
}

/**
 * claimd's reply as the HTTP client gave it: parsed by the client, or text
 * (asked for with exact numbers) parsed here; text that is not JSON is
 * kept as it is (not claimd's reply).
 */
function replyValue(answer: unknown, exactNumbers: boolean): unknown {
	if (typeof answer !== 'string') return answer;
	try {
		return exactNumbers ? parseExactJson(answer) : (JSON.parse(answer) as unknown);
	} catch {
		return answer;
	}
}

/** How long a credential the trigger read serves its later deliveries. */
export const TRIGGER_CREDENTIAL_MAX_AGE_MS = 60_000;
/** How many trigger nodes' credentials are kept at most; the oldest goes first. */
export const TRIGGER_CREDENTIAL_MAX_ENTRIES = 100;

/**
 * The credential each trigger node read, keyed by workflow ID, node name
 * and credential ID, with when it was read.
 *
 * Why: in a webhook's context n8n resolves a credential outside any
 * execution, and with its default expression engine (vm) every
 * getCredentials there takes a fresh expression isolate, because the
 * webhook's own workflow holds the one warm isolate of the pool
 * (credentials-helper getDecrypted without expression values; measured in
 * n8n 2.41.1: +40 to +80 ms a delivery, against ~2 ms in claimd). So the
 * first delivery of a trigger node reads the credential through n8n (with
 * n8n's own permission checks for this workflow and node), and the
 * deliveries of the next TRIGGER_CREDENTIAL_MAX_AGE_MS use what it read.
 * The key names the workflow and the node, so a credential is never used
 * by a node that did not read it itself through n8n.
 *
 * A credential edited meanwhile (a new API key or Base URL) is read again
 * at once when claimd refuses the old key (401: the delivery is sent again
 * with the new one, not counted as a try) or the old Base URL cannot be
 * reached (the next try reads it); otherwise within
 * TRIGGER_CREDENTIAL_MAX_AGE_MS. Expired entries are dropped whenever one
 * is added; at most TRIGGER_CREDENTIAL_MAX_ENTRIES are kept.
 */
const credentialCache = new AgedCache<ICredentialDataDecryptedObject>(
	TRIGGER_CREDENTIAL_MAX_AGE_MS,
	TRIGGER_CREDENTIAL_MAX_ENTRIES,
);

/** The cache key of this trigger node's credential, or undefined when it has no ID. */
function credentialKey(context: IWebhookFunctions): string | undefined {
	const node = context.getNode();
	const credentialId = node.credentials?.[CREDENTIAL_TYPE]?.id;
	if (typeof credentialId !== 'string' || credentialId === '') return undefined;
	const workflowId: unknown =
		typeof context.getWorkflow === 'function' ? context.getWorkflow()?.id : undefined;
	if (typeof workflowId !== 'string' || workflowId === '') return undefined;
	return JSON.stringify([workflowId, node.name, credentialId]);
}

/** How many trigger credentials the cache holds (for tests). */
export function cachedTriggerCredentialCount(): number {
	return credentialCache.size;
}

/** Empties the credential cache (for tests). */
export function clearTriggerCredentialCache(): void {
	credentialCache.clear();
}

/**
 * Sends one provider request to claimd (POST {baseUrl}/v1/trigger/{source})
 * through the Idempotent Claim API credential, retried as MAX_TRIES and
 * RETRY_WINDOW_MS allow. Never throws: a call that did not end in claimd's
 * reply ends in an error from the Claim node's own mapping (unreachable,
 * API key rejected, no such source, not claimd at the Base URL…), which
 * never holds the body, a header or the API key.
 *
 * With exactNumbers the reply is read as text and parsed with
 * parseExactJson, so a batch event's payload keeps the numbers a
 * JavaScript number would change as strings of their digits.
 */
export async function callTrigger(
	this: IWebhookFunctions,
	source: string,
	request: TriggerRequest,
	exactNumbers = false,
): Promise<TriggerCall> {
	const path = `/v1/trigger/${encodeURIComponent(source)}`;
	const started = Date.now();
	const deadline = started + RETRY_WINDOW_MS;
	const key = credentialKey(this);
	let data = key === undefined ? undefined : credentialCache.get(key, started);
	let fromCache = data !== undefined;
	let baseUrl: string | undefined;
	for (let sent = 1; ; sent++) {
		let loading = data === undefined;
		try {
			if (data === undefined) {
				data = await this.getCredentials<ICredentialDataDecryptedObject>(CREDENTIAL_TYPE);
				fromCache = false;
				if (key !== undefined) credentialCache.set(key, data, Date.now());
			}
			const credentials = data;
			loading = false;
			baseUrl = String(credentials.baseUrl ?? '').replace(/\/+$/, '');
			const ref = this.getNode().credentials?.[CREDENTIAL_TYPE];
			const options: IHttpRequestOptions = {
				method: 'POST',
				url: `${baseUrl}${path}`,
				headers: { Accept: 'application/json' },
				body: request as unknown as IDataObject,
				json: true,
				timeout: REQUEST_TIMEOUT_MS + request.wait_seconds * 1000,
			};
			if (exactNumbers) options.encoding = 'text';
			const received: unknown = await this.helpers.httpRequestWithAuthentication.call(
				this,
				CREDENTIAL_TYPE,
				options,
				{
					credentialsDecrypted: {
						id: ref?.id ?? '',
						name: ref?.name ?? '',
						type: CREDENTIAL_TYPE,
						data: credentials,
					},
				},
			);
			const answer = replyValue(received, exactNumbers);
			if (isTriggerReply(answer)) {
				return {
					ok: true,
					reply: {
						...answer,
						events: answer.events ?? [],
						response: { ...answer.response, headers: answer.response.headers ?? {} },
					},
					tries: sent,
				};
			}
			return {
				ok: false,
				error: notSidecarError(
					this.getNode(),
					'answered without a decision and a response for the provider',
					{ baseUrl, request: `POST ${path}` },
				),
				tries: sent,
			};
		} catch (error) {
			const ctx: ErrorContext = {
				baseUrl,
				tries: sent,
				request: `POST ${path}`,
				notFound: {
					message: `claimd has no source "${source}" for this API key`,
					description:
						"Source must name a source in claimd's sources file (CLAIMD_SOURCES_FILE) that belongs to the tenant of the credential's API key.",
				},
			};
			if (!loading && sidecarErrorCode(error) === 'not_sidecar') {
				return { ok: false, error: mapSidecarError(this.getNode(), error, ctx), tries: sent };
			}
			if (!loading && fromCache && data !== undefined) {
				const status = answerStatus(error);
				if (status === 401) {
					// The cached key was refused: read the credential again and
					// send at once (claimd refused the call unprocessed).
					if (key !== undefined) credentialCache.forget(key, (kept) => kept === data);
					data = undefined;
					sent--;
					continue;
				}
				if (status === undefined && isRetryable(error)) {
					// The cached Base URL did not answer: the next try reads
					// the credential again.
					if (key !== undefined) credentialCache.forget(key, (kept) => kept === data);
					data = undefined;
				}
			}
			const retryable = loading ? isN8nDatabaseError(error) : isRetryable(error);
			const now = Date.now();
			if (!retryable || sent >= MAX_TRIES || now >= deadline) {
				return {
					ok: false,
					error: loading
						? credentialError(this.getNode(), error, ctx)
						: mapSidecarError(this.getNode(), error, ctx),
					tries: sent,
				};
			}
			const wait = Math.min(FIRST_WAIT_MS * 2 ** (sent - 1), deadline - now);
			if (wait > 0) await sleep(wait);
		}
	}
}
