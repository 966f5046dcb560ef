import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord, ExtendBody } from '../../transport/types';
import {
	DEFAULT_TIME_LIMIT_SECONDS,
	claimIdAndToken,
	claimIdProperty,
	claimTokenProperty,
	forEachItem,
	positiveSeconds,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['extendLease'] };

export const description: INodeProperties[] = [
	claimIdProperty(show),
	claimTokenProperty(show),
	{
		// Named leaseSeconds, like Claim's: saved workflows keep their value.
		displayName: 'New Time Limit From Now (Seconds)',
		name: 'leaseSeconds',
		type: 'number',
		typeOptions: { minValue: 1 },
		default: DEFAULT_TIME_LIMIT_SECONDS,
		description:
			"How much more time, counted from now, this execution gets to finish the protected work and Complete (the claim's new lease end). At most the sidecar's CLAIMD_MAX_LEASE_SECONDS (default 86400).",
		displayOptions: { show },
	},
];

/** Gives each item's claim more time (extends its lease): POST /v1/claims/{claim_id}/extend. */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
		const leaseSeconds = positiveSeconds(
			nodeParameter.call(this, 'leaseSeconds', itemIndex),
			'New Time Limit From Now',
		);
		const body: ExtendBody = { claim_token: claimToken, lease_seconds: leaseSeconds };
		const record = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'extend'),
			body,
			itemIndex,
		})) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
