import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	IHttpRequestOptions,
} from 'n8n-workflow';
import { sleep } from 'n8n-workflow';

import { isRetryable, mapSidecarError } from './errors';

/** Name of the credential type that authenticates every sidecar request. */
export const CREDENTIAL_TYPE = 'idempotentClaimApi';

/** Upper bound for one sidecar request; a claim answers in milliseconds. */
const REQUEST_TIMEOUT_MS = 30_000;

/**
 * How a request is sent again after a failure that isRetryable allows (the
 * connection failed or broke, or a 5xx answer): the same request, body
 * included, so a Claim keeps its request IDs and Complete / Fail their token.
 */
export interface RetryPolicy {
	/** Sends in all, at least 1 (1: no retry). */
	tries: number;
	/** Wait before the second send, in ms; doubled before each further send. */
	waitMs: number;
}

/** Send once. */
export const NO_RETRY: RetryPolicy = { tries: 1, waitMs: 0 };

/** Bounds of RetryPolicy, and the longest single wait. */
export const MAX_TRIES = 5;
export const MAX_WAIT_MS = 5_000;

export interface SidecarRequest {
	method: IHttpRequestMethods;
	/** Path below the base URL, starting with "/v1/". */
	path: string;
	body?: IDataObject;
	qs?: IDataObject;
	/** Item the request is made for; unset for a batch. */
	itemIndex?: number;
	/** Retries after a transport failure or a 5xx; default NO_RETRY. */
	retry?: RetryPolicy;
}

/**
 * Sends one request to the Idempotent Claim sidecar through the credential
 * (Bearer API key) and returns the parsed JSON answer. A failure that
 * isRetryable allows is sent again per `request.retry` (waits from n8n's
 * sleep, cut short when the execution is cancelled); every failure that
 * remains becomes a NodeApiError from mapSidecarError, saying how often the
 * request was sent.
 */
export async function sidecarRequest<T>(
	this: IExecuteFunctions,
	request: SidecarRequest,
): Promise<T> {
	const credentials = await this.getCredentials<{ baseUrl?: string }>(CREDENTIAL_TYPE);
	const baseUrl = String(credentials.baseUrl ?? '').replace(/\/+$/, '');
	const options: IHttpRequestOptions = {
		method: request.method,
		url: `${baseUrl}${request.path}`,
		headers: { Accept: 'application/json' },
		json: true,
		timeout: REQUEST_TIMEOUT_MS,
	};
	if (request.body !== undefined) options.body = request.body;
	if (request.qs !== undefined) options.qs = request.qs;

	const { tries, waitMs } = request.retry ?? NO_RETRY;
	for (let sent = 1; ; sent++) {
		try {
			return (await this.helpers.httpRequestWithAuthentication.call(this, CREDENTIAL_TYPE, {
				...options,
				headers: { ...options.headers },
			})) as T;
		} catch (error) {
			if (sent >= tries || !isRetryable(error)) {
				throw mapSidecarError(this.getNode(), error, {
					baseUrl,
					itemIndex: request.itemIndex,
					tries: sent,
				});
			}
		}
		const wait = Math.min(MAX_WAIT_MS, waitMs * 2 ** (sent - 1));
		if (wait > 0) await sleep(wait, this.getExecutionCancelSignal());
	}
}

/** Path segment for a claim id, encoded so that any id stays one segment. */
export function claimPath(claimId: string, action?: string): string {
	const base = `/v1/claims/${encodeURIComponent(claimId)}`;
	return action ? `${base}/${action}` : base;
}
