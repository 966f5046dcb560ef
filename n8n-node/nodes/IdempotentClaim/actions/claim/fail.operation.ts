import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import {
	claimIdProperty,
	claimTokenProperty,
	requiredText,
	settleRetryProperties,
	type ShowWhen,
} from '../common';
import { settle } from '../settle';
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
	...settleRetryProperties(show),
];

/**
 * Reports every item's side effect as failed in one
 * POST /v1/claims/fail/batch, kept trying until the claims' lease end while
 * the sidecar is unreachable (see settle and the retry settings).
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await settle.call(
		this,
		{
			operation: 'fail',
			path: '/v1/claims/fail/batch',
			fields(itemIndex) {
				const error = requiredText(
					this.getNodeParameter('errorMessage', itemIndex),
					'Error Message',
				);
				const retry = this.getNodeParameter('retryKind', itemIndex) as string;
				if (!RETRY_KINDS.includes(retry)) {
					throw new FieldError(`Retry Kind must be one of ${RETRY_KINDS.join(', ')}`);
				}
				return { error, retry };
			},
		},
		items,
	);
}
