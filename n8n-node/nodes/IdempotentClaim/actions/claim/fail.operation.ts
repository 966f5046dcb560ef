import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord } from '../../transport/types';
import {
	claimIdAndToken,
	claimIdProperty,
	claimTokenProperty,
	forEachItem,
	sidecarRetry,
	requiredText,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['fail'] };

const RETRY_KINDS = ['retryable', 'permanent', 'unknown'];

export const description: INodeProperties[] = [
	claimIdProperty(show),
	claimTokenProperty(show),
	{
		displayName: 'Error Message',
		name: 'errorMessage',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. {{ $json.error.message }}',
		description: "Why the side effect failed; stored as the claim's last error",
		displayOptions: { show },
	},
	{
		displayName: 'Retry Kind',
		name: 'retryKind',
		type: 'options',
		default: 'retryable',
		description: 'What the failure means for the event',
		options: [
			{
				name: 'Retryable',
				value: 'retryable',
				description:
					'The effect did not happen; the claim may be won again after a backoff, up to the attempt cap',
			},
			{
				name: 'Permanent',
				value: 'permanent',
				description: 'Retrying cannot help (validation, permission); the event is dead-lettered',
			},
			{
				name: 'Unknown Outcome',
				value: 'unknown',
				description:
					'The effect may or may not have happened (e.g. a timeout); never retried automatically, an operator resolves it',
			},
		],
		displayOptions: { show },
	},
];

/** Reports each item's side effect as failed: POST /v1/claims/{claim_id}/fail. */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
		const error = requiredText(this.getNodeParameter('errorMessage', itemIndex), 'Error Message');
		const retry = this.getNodeParameter('retryKind', itemIndex) as string;
		if (!RETRY_KINDS.includes(retry)) {
			throw new FieldError(`Retry Kind must be one of ${RETRY_KINDS.join(', ')}`);
		}
		const record = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'fail'),
			body: { claim_token: claimToken, error, retry },
			itemIndex,
			retry: sidecarRetry.call(this, itemIndex),
		})) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
