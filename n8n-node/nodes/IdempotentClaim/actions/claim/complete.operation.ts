import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord } from '../../transport/types';
import {
	claimIdAndToken,
	claimIdProperty,
	claimTokenProperty,
	forEachItem,
	sidecarRetry,
	optionalText,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['complete'] };

export const description: INodeProperties[] = [
	claimIdProperty(show),
	claimTokenProperty(show),
	{
		displayName: 'Result Reference',
		name: 'resultRef',
		type: 'string',
		default: '',
		placeholder: 'e.g. {{ $json.invoice_number }}',
		description:
			'Reference to what the side effect produced (created record ID, provider message ID); duplicates of this event receive it (optional)',
		displayOptions: { show },
	},
];

/** Marks each item's claim completed: POST /v1/claims/{claim_id}/complete. */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
		const body: IDataObject = { claim_token: claimToken };
		const resultRef = optionalText(this.getNodeParameter('resultRef', itemIndex, ''));
		if (resultRef !== undefined) body.result_ref = resultRef;
		const record = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'complete'),
			body,
			itemIndex,
			retry: sidecarRetry.call(this, itemIndex),
		})) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
