import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	IHttpRequestOptions,
} from 'n8n-workflow';

import { mapSidecarError } from './errors';

/** Name of the credential type that authenticates every sidecar request. */
export const CREDENTIAL_TYPE = 'idempotentClaimApi';

/** Upper bound for one sidecar request; a claim answers in milliseconds. */
const REQUEST_TIMEOUT_MS = 30_000;

export interface SidecarRequest {
	method: IHttpRequestMethods;
	/** Path below the base URL, starting with "/v1/". */
	path: string;
	body?: IDataObject;
	qs?: IDataObject;
	/** Item the request is made for; unset for a batch. */
	itemIndex?: number;
}

/**
 * Sends one request to the Idempotent Claim sidecar through the credential
 * (Bearer API key) and returns the parsed JSON answer. Every failure becomes a
 * NodeApiError from mapSidecarError.
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

	try {
		return (await this.helpers.httpRequestWithAuthentication.call(
			this,
			CREDENTIAL_TYPE,
			options,
		)) as T;
	} catch (error) {
		throw mapSidecarError(this.getNode(), error, { baseUrl, itemIndex: request.itemIndex });
	}
}

/** Path segment for a claim id, encoded so that any id stays one segment. */
export function claimPath(claimId: string, action?: string): string {
	const base = `/v1/claims/${encodeURIComponent(claimId)}`;
	return action ? `${base}/${action}` : base;
}
