import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { claimPath, sidecarRequest, type SidecarRequest } from '../../transport';
import type { ClaimRecord } from '../../transport/types';
import { CLAIM_ID_HINT, forEachItem, optionalText, requiredText, type ShowWhen } from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['lookup'] };

export const description: INodeProperties[] = [
	{
		displayName: 'Look Up By',
		name: 'lookupBy',
		type: 'options',
		noDataExpression: true,
		default: 'claimId',
		options: [
			{ name: 'Claim ID', value: 'claimId' },
			{ name: 'Source and Event ID', value: 'eventKey' },
		],
		displayOptions: { show },
	},
	{
		displayName: 'Claim ID',
		name: 'claimId',
		type: 'string',
		required: true,
		default: '={{ $json.idempotency.claim_id }}',
		description: 'ID of the claim, as returned by the Claim operation',
		displayOptions: { show: { ...show, lookupBy: ['claimId'] } },
	},
	{
		displayName: 'Source',
		name: 'source',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. stripe',
		description: 'Source the event was claimed under',
		displayOptions: { show: { ...show, lookupBy: ['eventKey'] } },
	},
	{
		displayName: 'Event ID',
		name: 'eventId',
		type: 'string',
		required: true,
		default: '',
		description:
			'Event ID of the claim. For a composite or hashed key, the event_id the sidecar returned (idempotency.event_id).',
		displayOptions: { show: { ...show, lookupBy: ['eventKey'] } },
	},
	{
		displayName: 'Action Name',
		name: 'actionName',
		type: 'string',
		default: '',
		description: 'Action of an action-ledger claim; empty for the event claim itself',
		displayOptions: { show: { ...show, lookupBy: ['eventKey'] } },
	},
];

function lookupRequest(this: IExecuteFunctions, itemIndex: number): SidecarRequest {
	const lookupBy = this.getNodeParameter('lookupBy', itemIndex) as string;
	if (lookupBy === 'claimId') {
		const claimId = requiredText(
			this.getNodeParameter('claimId', itemIndex),
			'Claim ID',
			CLAIM_ID_HINT,
		);
		return { method: 'GET', path: claimPath(claimId), itemIndex };
	}
	if (lookupBy === 'eventKey') {
		const qs: IDataObject = {
			source: requiredText(this.getNodeParameter('source', itemIndex), 'Source').trim(),
			event_id: requiredText(this.getNodeParameter('eventId', itemIndex), 'Event ID'),
		};
		const action = optionalText(this.getNodeParameter('actionName', itemIndex, ''));
		if (action !== undefined) qs.action = action.trim();
		return { method: 'GET', path: '/v1/claims', qs, itemIndex };
	}
	throw new FieldError(`Unknown Look Up By "${String(lookupBy)}"`);
}

/**
 * Reads each item's claim record with its delivery log: GET /v1/claims/{claim_id}
 * or GET /v1/claims?source=&event_id=&action=.
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const request = lookupRequest.call(this, itemIndex);
		const record = (await sidecarRequest.call(this, request)) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
