import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import {
	notFoundSidecar,
	recordSidecar,
	simplifiedSidecar,
	withIdempotency,
} from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import { claimPath, sidecarRequest, type SidecarRequest } from '../../transport';
import { sidecarErrorCode } from '../../transport/errors';
import type { ClaimRecord, FindClaimQuery } from '../../transport/types';
import {
	claimIdOf,
	claimIdProperty,
	forEachItem,
	optionalText,
	requiredText,
	toNodeError,
	type ShowWhen,
} from '../common';
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
	claimIdProperty({ ...show, lookupBy: ['claimId'] }),
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
	{
		displayName: 'Return Not Found as Item',
		name: 'notFoundAsItem',
		type: 'boolean',
		default: true,
		description:
			'Whether an event that was never claimed gives an item with idempotency.found false (the looked-up ID, every other field null) instead of an error that stops the workflow. A claim found has idempotency.found true.',
		displayOptions: { show },
	},
	{
		// Off by default: Lookup existed before Simplify, and n8n does not
		// store a parameter left at its default, so a default of on would
		// change the output of saved workflows.
		displayName: 'Simplify',
		name: 'simplify',
		type: 'boolean',
		default: false,
		description:
			'Whether to return only the main fields of the claim (claim_id, source, event_id, action, state, result_ref, attempt, lease_until, updated_at, found) instead of the whole record with its delivery log',
		displayOptions: { show },
	},
];

/** The request of one item's lookup, and what it looked up (for a claim not found). */
function lookupRequest(
	this: IExecuteFunctions,
	itemIndex: number,
): { request: SidecarRequest; lookedUp: IDataObject } {
	const lookupBy = nodeParameter.call(this, 'lookupBy', itemIndex) as string;
	if (lookupBy === 'claimId') {
		const claimId = claimIdOf.call(this, itemIndex);
		return {
			request: { method: 'GET', path: claimPath(claimId), itemIndex },
			lookedUp: { claim_id: claimId },
		};
	}
	if (lookupBy === 'eventKey') {
		const qs: FindClaimQuery = {
			source: requiredText(nodeParameter.call(this, 'source', itemIndex), 'Source').trim(),
			event_id: requiredText(nodeParameter.call(this, 'eventId', itemIndex), 'Event ID'),
		};
		const action = optionalText(nodeParameter.call(this, 'actionName', itemIndex, ''));
		if (action !== undefined) qs.action = action.trim();
		return {
			request: { method: 'GET', path: '/v1/claims', qs, itemIndex },
			lookedUp: { action: '', ...qs },
		};
	}
	throw new FieldError(`Unknown Look Up By "${String(lookupBy)}"`);
}

/**
 * Reads each item's claim record with its delivery log: GET /v1/claims/{claim_id}
 * or GET /v1/claims?source=&event_id=&action=. With Return Not Found as
 * Item, the sidecar's own not_found (never a 404 of another server at the
 * Base URL) gives the item with idempotency.found false.
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const { request, lookedUp } = lookupRequest.call(this, itemIndex);
		const simplify = nodeParameter.call(this, 'simplify', itemIndex, false) === true;
		let sidecar: IDataObject;
		try {
			const record = (await sidecarRequest.call(this, request)) as ClaimRecord;
			sidecar = { found: true, ...recordSidecar(item.json.idempotency, record) };
		} catch (error) {
			if (
				sidecarErrorCode(error) !== 'not_found' ||
				nodeParameter.call(this, 'notFoundAsItem', itemIndex, true) !== true
			) {
				throw toNodeError(this.getNode(), error, itemIndex);
			}
			sidecar = notFoundSidecar(lookedUp);
		}
		return withIdempotency(item.json, simplify ? simplifiedSidecar(sidecar) : sidecar);
	});
}
