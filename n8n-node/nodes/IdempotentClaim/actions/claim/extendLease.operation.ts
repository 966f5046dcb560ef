import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord } from '../../transport/types';
import {
	claimIdAndToken,
	claimIdProperty,
	claimTokenProperty,
	forEachItem,
	positiveSeconds,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['extendLease'] };

// Lease Seconds is declared once in claim.operation.ts and shown for both
// Claim and Extend Lease.
export const description: INodeProperties[] = [claimIdProperty(show), claimTokenProperty(show)];

/** Extends the lease of each item's claim: POST /v1/claims/{claim_id}/extend. */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
		const leaseSeconds = positiveSeconds(
			this.getNodeParameter('leaseSeconds', itemIndex),
			'Lease Seconds',
		);
		const record = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'extend'),
			body: { claim_token: claimToken, lease_seconds: leaseSeconds },
			itemIndex,
		})) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
