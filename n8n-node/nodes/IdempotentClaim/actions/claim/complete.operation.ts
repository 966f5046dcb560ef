import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { nodeParameter } from '../../helpers/parameters';
import type { CompleteBatchEntry } from '../../transport/types';
import {
	claimIdProperty,
	claimTokenProperty,
	optionalText,
	settleRetryProperties,
	type ShowWhen,
} from '../common';
import { settle, type SettleOperation } from '../settle';
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
	...settleRetryProperties(show),
];

/**
 * Marks every item's claim completed in one POST /v1/claims/complete/batch,
 * kept trying until the claims' lease end while the sidecar is unreachable
 * (see settle and the retry settings).
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	const report: SettleOperation<'complete'> = {
		operation: 'complete',
		path: '/v1/claims/complete/batch',
		fields(itemIndex) {
			const fields: Pick<CompleteBatchEntry, 'result_ref'> = {};
			const resultRef = optionalText(nodeParameter.call(this, 'resultRef', itemIndex, ''));
			if (resultRef !== undefined) fields.result_ref = resultRef;
			return fields;
		},
	};
	return await settle.call(this, report, items);
}
