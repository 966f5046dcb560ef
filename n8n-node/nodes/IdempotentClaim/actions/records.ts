import type { IExecuteFunctions } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

import { sidecarRequest, type SidecarRequest } from '../transport';
import type { ClaimRecord } from '../transport/types';

/**
 * An answer that lists claim records: a page of GET /v1/claims/list (with
 * next_cursor) or a round of POST /v1/claims/fail/execution (with more).
 */
export interface ClaimList {
	claims: ClaimRecord[];
	next_cursor?: unknown;
	more?: unknown;
}

/** Sends `request` and returns its answer, which must hold a `claims` list. */
export async function requestClaimList(
	this: IExecuteFunctions,
	request: SidecarRequest,
): Promise<ClaimList> {
	const answer: unknown = await sidecarRequest.call(this, request);
	if (Array.isArray((answer as { claims?: unknown } | undefined)?.claims)) {
		return answer as ClaimList;
	}
	throw new NodeApiError(
		this.getNode(),
		{},
		{
			message: 'Unexpected answer from the Idempotent Claim sidecar',
			description: `${request.method} ${request.path} answered without a "claims" list.`,
			itemIndex: request.itemIndex,
		},
	);
}
