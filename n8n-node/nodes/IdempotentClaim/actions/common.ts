import type {
	IDataObject,
	IDisplayOptions,
	IExecuteFunctions,
	INode,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import { FieldError } from '../helpers/fields';
import { MAX_TRIES, MAX_WAIT_MS, NO_RETRY, type RetryPolicy } from '../transport';
import type { ItemResult } from './types';

/** Turns anything thrown while handling an item into a node error that names the item. */
export function toNodeError(
	node: INode,
	error: unknown,
	itemIndex?: number,
): NodeApiError | NodeOperationError {
	if (error instanceof NodeApiError || error instanceof NodeOperationError) {
		if (itemIndex !== undefined && error.context.itemIndex === undefined) {
			error.context.itemIndex = itemIndex;
		}
		return error;
	}
	if (error instanceof FieldError) {
		return new NodeOperationError(node, error.message, {
			itemIndex,
			description: error.description,
		});
	}
	return new NodeOperationError(node, error as Error, { itemIndex });
}

/**
 * Runs `handle` for each item in order. A failure stops the node at once
 * unless it continues on fail; then the failure is that item's result and the
 * next item runs.
 */
export async function forEachItem(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
	handle: (itemIndex: number, item: INodeExecutionData) => Promise<IDataObject>,
): Promise<ItemResult[]> {
	const results: ItemResult[] = [];
	for (let itemIndex = 0; itemIndex < items.length; itemIndex++) {
		try {
			results.push({ output: 0, json: await handle(itemIndex, items[itemIndex]) });
		} catch (error) {
			const nodeError = toNodeError(this.getNode(), error, itemIndex);
			if (!this.continueOnFail()) throw nodeError;
			results.push({ error: nodeError });
		}
	}
	return results;
}

/** Reads a text parameter and rejects an empty value with a message naming the parameter. */
export function requiredText(value: unknown, label: string, hint?: string): string {
	if (typeof value === 'number' && Number.isFinite(value)) return String(value);
	if (typeof value !== 'string' || value.trim() === '') {
		throw new FieldError(`${label} is empty`, hint);
	}
	return value;
}

/** Reads an optional text parameter: undefined when empty. */
export function optionalText(value: unknown): string | undefined {
	if (typeof value === 'number' && Number.isFinite(value)) return String(value);
	if (typeof value !== 'string' || value.trim() === '') return undefined;
	return value;
}

/** Reads a whole number of seconds, at least 1. */
export function positiveSeconds(value: unknown, label: string): number {
	const seconds = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
	if (typeof seconds !== 'number' || !Number.isSafeInteger(seconds) || seconds < 1) {
		throw new FieldError(`${label} must be a whole number of seconds, at least 1`);
	}
	return seconds;
}

/** The `displayOptions.show` condition of a parameter. */
export type ShowWhen = NonNullable<IDisplayOptions['show']>;

const CLAIM_ID_HINT =
	'By default it is read from $json.idempotency, which a Claim operation earlier in the workflow adds to each item.';

/** Claim ID parameter shown for the given operations. */
export function claimIdProperty(show: ShowWhen): INodeProperties {
	return {
		displayName: 'Claim ID',
		name: 'claimId',
		type: 'string',
		required: true,
		default: '={{ $json.idempotency.claim_id }}',
		description: 'ID of the claim, as returned by the Claim operation',
		displayOptions: { show },
	};
}

/** Claim Token parameter shown for the given operations. */
export function claimTokenProperty(show: ShowWhen): INodeProperties {
	return {
		displayName: 'Claim Token',
		name: 'claimToken',
		type: 'string',
		typeOptions: { password: true },
		required: true,
		default: '={{ $json.idempotency.claim_token }}',
		description:
			'Fencing token issued with the won claim; a token superseded by a newer claim attempt is rejected as lease lost',
		displayOptions: { show },
	};
}

/** Reads Claim ID and Claim Token of one item. */
export function claimIdAndToken(
	this: IExecuteFunctions,
	itemIndex: number,
): { claimId: string; claimToken: string } {
	return {
		claimId: requiredText(this.getNodeParameter('claimId', itemIndex), 'Claim ID', CLAIM_ID_HINT),
		claimToken: requiredText(
			this.getNodeParameter('claimToken', itemIndex),
			'Claim Token',
			'Only the execution that won the claim holds its token. ' + CLAIM_ID_HINT,
		),
	};
}

export { CLAIM_ID_HINT };

/** Operations whose sidecar calls are retried (all safe to send again). */
const RETRIED: ShowWhen = { operation: ['claim', 'complete', 'fail'] };

const DEFAULT_TRIES = 3;
const DEFAULT_WAIT_MS = 500;

/**
 * The retry settings of the sidecar calls, on by default, shown with Claim,
 * Complete and Fail. Retrying is safe: a Claim is sent again with the same
 * request IDs, so a claim whose answer was lost comes back as the same won
 * claim (same token); Complete and Fail carry the same token and are
 * idempotent.
 */
export const retryProperties: INodeProperties[] = [
	{
		displayName: 'Retry Sidecar Calls',
		name: 'retrySidecarCalls',
		type: 'boolean',
		default: true,
		description:
			"Whether to send a request again when the connection to the sidecar fails, breaks or times out, or it answers 5xx (e.g. 503 during a database failover). Safe: a claim is sent with the same request ID and a claim it made comes back won with the same token; Complete and Fail with the same token are idempotent. n8n's Retry On Fail of this node is safe in the same way.",
		displayOptions: { show: RETRIED },
	},
	{
		displayName: 'Max Tries',
		name: 'sidecarMaxTries',
		type: 'number',
		typeOptions: { minValue: 2, maxValue: MAX_TRIES },
		default: DEFAULT_TRIES,
		description: 'How many times a request is sent at most, the first included',
		displayOptions: { show: { ...RETRIED, retrySidecarCalls: [true] } },
	},
	{
		displayName: 'Wait Between Tries (Ms)',
		name: 'sidecarWaitBetweenTries',
		type: 'number',
		typeOptions: { minValue: 0, maxValue: MAX_WAIT_MS },
		default: DEFAULT_WAIT_MS,
		description: `Wait before the second try; doubled before each further try, at most ${MAX_WAIT_MS} ms`,
		displayOptions: { show: { ...RETRIED, retrySidecarCalls: [true] } },
	},
];

function boundedInteger(value: unknown, min: number, max: number, fallback: number): number {
	const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
	if (typeof n !== 'number' || !Number.isFinite(n)) return fallback;
	return Math.min(max, Math.max(min, Math.trunc(n)));
}

/** The retry policy of one item's sidecar call, from the retry settings. */
export function sidecarRetry(this: IExecuteFunctions, itemIndex: number): RetryPolicy {
	if (this.getNodeParameter('retrySidecarCalls', itemIndex, true) !== true) return NO_RETRY;
	return {
		tries: boundedInteger(
			this.getNodeParameter('sidecarMaxTries', itemIndex, DEFAULT_TRIES),
			1,
			MAX_TRIES,
			DEFAULT_TRIES,
		),
		waitMs: boundedInteger(
			this.getNodeParameter('sidecarWaitBetweenTries', itemIndex, DEFAULT_WAIT_MS),
			0,
			MAX_WAIT_MS,
			DEFAULT_WAIT_MS,
		),
	};
}
