import type { IExecuteFunctions, INodeExecutionData, INodeProperties } from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar, withIdempotency } from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord, ResolveBody } from '../../transport/types';
import {
	claimIdOf,
	claimIdProperty,
	forEachItem,
	optionalText,
	requiredText,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['resolve'] };

const OUTCOMES: ReadonlyArray<ResolveBody['outcome']> = ['completed', 'retry'];

export const description: INodeProperties[] = [
	claimIdProperty(show),
	{
		displayName: 'Resolution',
		name: 'resolveOutcome',
		type: 'options',
		default: 'completed',
		description: 'What an operator found out about a claim in state unknown or dead_lettered',
		options: [
			{
				name: 'Completed',
				value: 'completed',
				description: 'The side effect did happen; duplicates are answered as done',
			},
			{
				name: 'Retry',
				value: 'retry',
				description: 'The side effect did not happen; the event may be claimed and processed again',
			},
		],
		displayOptions: { show },
	},
	{
		displayName: 'Result Reference',
		name: 'resultRef',
		type: 'string',
		default: '',
		description:
			'Reference to what the side effect produced, when resolved as completed (optional)',
		displayOptions: { show },
	},
	{
		displayName: 'Note',
		name: 'note',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. Checked in the billing system: invoice exists',
		description: 'Why the claim is resolved this way; kept in the audit trail',
		displayOptions: { show },
	},
];

/** Resolves each item's claim by hand: POST /v1/claims/{claim_id}/resolve. */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await forEachItem.call(this, items, async (itemIndex, item) => {
		const claimId = claimIdOf.call(this, itemIndex);
		const resolution: unknown = nodeParameter.call(this, 'resolveOutcome', itemIndex);
		const outcome = OUTCOMES.find((known) => known === resolution);
		if (outcome === undefined) {
			throw new FieldError(`Resolution must be one of ${OUTCOMES.join(', ')}`);
		}
		const body: ResolveBody = {
			outcome,
			note: requiredText(nodeParameter.call(this, 'note', itemIndex), 'Note'),
		};
		const resultRef = optionalText(nodeParameter.call(this, 'resultRef', itemIndex, ''));
		if (resultRef !== undefined) body.result_ref = resultRef;
		const record = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'resolve'),
			body,
			itemIndex,
		})) as ClaimRecord;
		return withIdempotency(item.json, recordSidecar(item.json.idempotency, record));
	});
}
