import type { IExecuteFunctions } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

import { sidecarRequest, type SidecarRequest } from '../transport';
import type { ClaimRecord } from '../transport/types';

/**
 * Sends `request` and returns its answer, which must hold a `claims` list:
 * a page of GET /v1/claims/list (ClaimListPage) or a round of
 * POST /v1/claims/fail/execution (FailExecutionRound).
 */
export async function requestClaimList<List extends { claims: ClaimRecord[] }>(
	context: IExecuteFunctions,
	request: SidecarRequest,
): Promise<List> {
	const answer: unknown = await sidecarRequest.call(context, request);
	if (Array.isArray((answer as { claims?: unknown } | undefined)?.claims)) {
		return answer as List;
	}
	throw new NodeApiError(
		context.getNode(),
		{},
		{
			message: 'Unexpected answer from the Idempotent Claim sidecar',
			description: `${request.method} ${request.path} answered without a "claims" list.`,
			itemIndex: request.itemIndex,
		},
	);
}
