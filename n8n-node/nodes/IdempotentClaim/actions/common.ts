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
import { nodeParameter } from '../helpers/parameters';
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
 * Runs `handle` for each item in order, for its result. A failure stops the
 * node at once unless it continues on fail; then the failure is that item's
 * result and the next item runs.
 */
export async function eachItem(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
	handle: (itemIndex: number, item: INodeExecutionData) => Promise<ItemResult>,
): Promise<ItemResult[]> {
	const results: ItemResult[] = [];
	for (let itemIndex = 0; itemIndex < items.length; itemIndex++) {
		try {
			results.push(await handle(itemIndex, items[itemIndex]));
		} catch (error) {
			const nodeError = toNodeError(this.getNode(), error, itemIndex);
			if (!this.continueOnFail()) throw nodeError;
			results.push({ error: nodeError });
		}
	}
	return results;
}

/** Runs `handle` for each item in order (see eachItem); its JSON is the item's output. */
export async function forEachItem(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
	handle: (itemIndex: number, item: INodeExecutionData) => Promise<IDataObject>,
): Promise<ItemResult[]> {
	return await eachItem.call(this, items, async (itemIndex, item) => ({
		output: 0,
		json: await handle(itemIndex, item),
	}));
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
		// Literally CLAIM_ID_DEFAULT: n8n's linter wants a literal default.
		default: '={{ $json.idempotency.claim_id }}',
		description: 'ID of the claim, as returned by the Claim operation',
		displayOptions: { show },
	};
}

/**
 * Claim Token parameter shown for the given operations. The token is not a
 * secret but the proof that this execution won the current attempt of the
 * claim (a fencing token): Claim outputs it for Complete, Fail and Extend
 * Lease to read, it works only with the tenant's API key, and it is refused
 * once a newer attempt holds the claim. The field still keeps
 * `password: true`: n8n's node linter and its community-package scanner
 * (which ignores inline disables) require it of every string parameter
 * whose name contains "token", and the name `claimToken` cannot change
 * without breaking saved workflows. It hides only a fixed value typed into
 * the field; the default expression shows as an expression.
 */
export function claimTokenProperty(show: ShowWhen): INodeProperties {
	return {
		displayName: 'Claim Token',
		name: 'claimToken',
		type: 'string',
		typeOptions: { password: true },
		required: true,
		// Literally CLAIM_TOKEN_DEFAULT.
		default: '={{ $json.idempotency.claim_token }}',
		description:
			"Proof that this execution won the claim: idempotency.claim_token of the Claim output, where it is shown in full (it is not a secret). It is refused once another execution has won the claim after this one's time limit passed (lease lost).",
		displayOptions: { show },
	};
}

/** Where n8n execution IDs come from and why they need one API key per n8n instance. */
export const EXECUTION_ID_NOTE =
	"In an Error Trigger workflow the crashed execution's ID is {{ $json.execution.id }}. Execution IDs are numbered by each n8n instance on its own, so give every n8n instance its own API key (tenant): two instances sharing one would share their execution IDs.";

/** Execution ID parameter shown for the given operations: by default the Error Trigger's. */
export function executionIdProperty(show: ShowWhen, what: string): INodeProperties {
	return {
		displayName: 'Execution ID',
		name: 'executionId',
		type: 'string',
		required: true,
		// Literally EXECUTION_ID_DEFAULT.
		default: '={{ $json.execution.id }}',
		description: `The n8n execution whose claims to ${what}: those whose current attempt it won. ${EXECUTION_ID_NOTE} The default reads it from an Error Trigger's item.`,
		displayOptions: { show },
	};
}

/**
 * Reads Claim ID of one item: left at its default, from the item's
 * idempotency.claim_id (a plain path: see nodeParameter).
 */
export function claimIdOf(this: IExecuteFunctions, itemIndex: number): string {
	return requiredText(nodeParameter.call(this, 'claimId', itemIndex), 'Claim ID', CLAIM_ID_HINT);
}

/** Reads Claim ID and Claim Token of one item (defaults: from the item's idempotency). */
export function claimIdAndToken(
	this: IExecuteFunctions,
	itemIndex: number,
): { claimId: string; claimToken: string } {
	return {
		claimId: claimIdOf.call(this, itemIndex),
		claimToken: requiredText(
			nodeParameter.call(this, 'claimToken', itemIndex),
			'Claim Token',
			'Only the execution that won the claim holds its token. ' + CLAIM_ID_HINT,
		),
	};
}

/** Reads Execution ID of one item (default: the Error Trigger's execution.id), trimmed. */
export function executionIdOf(this: IExecuteFunctions, itemIndex: number, hint: string): string {
	return requiredText(
		nodeParameter.call(this, 'executionId', itemIndex),
		'Execution ID',
		hint,
	).trim();
}

export { CLAIM_ID_HINT };

const DEFAULT_TRIES = 3;
const DEFAULT_WAIT_MS = 500;

/** First wait of Complete and Fail between tries; doubled up to MAX_WAIT_MS. */
export const SETTLE_WAIT_MS = 1_000;

/** Claim's default Time Limit for the Side Effect (lease_seconds). */
export const DEFAULT_TIME_LIMIT_SECONDS = 300;

/** The displayed name of leaseSeconds, for messages. */
export const TIME_LIMIT_LABEL = 'Time Limit for the Side Effect';

/** How long Complete and Fail keep trying when the lease end is not known (the default time limit). */
export const DEFAULT_KEEP_TRYING_SECONDS = DEFAULT_TIME_LIMIT_SECONDS;

/**
 * The retry settings of Claim (and of Fail for all claims of an execution),
 * shown for `show`, on by default: the request is sent up to Max Tries
 * times. `safe` says why sending it again is safe.
 */
export function retryProperties(show: ShowWhen, safe: string): INodeProperties[] {
	return [
		{
			displayName: 'Retry Sidecar Calls',
			name: 'retrySidecarCalls',
			type: 'boolean',
			default: true,
			description: `Whether to send a request again when the connection to the sidecar fails, breaks or times out, or it answers 5xx (e.g. 503 during a database failover). ${safe} n8n's Retry On Fail of this node is safe in the same way.`,
			displayOptions: { show },
		},
		{
			displayName: 'Max Tries',
			name: 'sidecarMaxTries',
			type: 'number',
			typeOptions: { minValue: 2, maxValue: MAX_TRIES },
			default: DEFAULT_TRIES,
			description: 'How many times a request is sent at most, the first included',
			displayOptions: { show: { ...show, retrySidecarCalls: [true] } },
		},
		{
			displayName: 'Wait Between Tries (Ms)',
			name: 'sidecarWaitBetweenTries',
			type: 'number',
			typeOptions: { minValue: 0, maxValue: MAX_WAIT_MS },
			default: DEFAULT_WAIT_MS,
			description: `Wait before the second try; doubled before each further try, at most ${MAX_WAIT_MS} ms`,
			displayOptions: { show: { ...show, retrySidecarCalls: [true] } },
		},
	];
}

/**
 * The retry settings of Complete or Fail (shown for `show`), on by default.
 * They report an effect that has already run, so they keep trying until
 * Keep Trying Until: by default the claim's time limit (lease end), after
 * which the report can no longer keep another delivery from winning the
 * claim and running the effect again (under lease policy reclaim).
 */
export function settleRetryProperties(show: ShowWhen): INodeProperties[] {
	return [
		{
			displayName: 'Retry Sidecar Calls',
			name: 'retrySidecarCalls',
			type: 'boolean',
			default: true,
			description:
				"Whether to keep sending the report while the sidecar cannot be reached, the connection breaks or times out, or it answers 5xx (e.g. 503 during a database failover), until it lands or Keep Trying Until. The effect has already run: a report that is lost leaves the claim processing until its time limit passes. Safe: Complete and Fail with the same token are recorded once. n8n's Retry On Fail of this node is safe in the same way.",
			displayOptions: { show },
		},
		{
			displayName: 'Keep Trying Until',
			name: 'keepTryingUntil',
			type: 'options',
			noDataExpression: true,
			default: 'leaseEnd',
			description: `How long to keep sending the report (waits of ${SETTLE_WAIT_MS / 1000} s, doubling, at most ${MAX_WAIT_MS / 1000} s). When it gives up, the item fails with an error saying that the outcome is unknown and how to settle it.`,
			options: [
				{
					name: "The Claim's Time Limit Ends (Lease End)",
					value: 'leaseEnd',
					description:
						'Until the time limit for the side effect set by Claim (or Extend Lease) passes: after that the claim is marked for review or, if so configured, another delivery may win it and run the effect again',
				},
				{
					name: 'A Number of Seconds Passes',
					value: 'timeLimit',
					description: 'For a number of seconds after the first try',
				},
			],
			displayOptions: { show: { ...show, retrySidecarCalls: [true] } },
		},
		{
			// Named leaseUntil: saved workflows keep their value.
			displayName: 'Time Limit Ends At (Lease Until)',
			name: 'leaseUntil',
			type: 'string',
			// Literally LEASE_UNTIL_DEFAULT.
			default: '={{ $json.idempotency.lease_until }}',
			placeholder: "e.g. {{ $('Idempotent Claim').item.json.idempotency.lease_until }}",
			description: `When the claim's time limit for the side effect ends: idempotency.lease_until of the Claim (or Extend Lease) output. The default reads it from the incoming item, which holds it right after the Claim node; after other nodes (such as the protected node) map it from the Claim node, like the placeholder. When empty or not a time, the node keeps trying for ${DEFAULT_KEEP_TRYING_SECONDS} seconds.`,
			displayOptions: {
				show: { ...show, retrySidecarCalls: [true], keepTryingUntil: ['leaseEnd'] },
			},
		},
		{
			displayName: 'Keep Trying For (Seconds)',
			name: 'keepTryingSeconds',
			type: 'number',
			typeOptions: { minValue: 1 },
			default: DEFAULT_KEEP_TRYING_SECONDS,
			description: 'How long to keep trying after the first try',
			displayOptions: {
				show: { ...show, retrySidecarCalls: [true], keepTryingUntil: ['timeLimit'] },
			},
		},
	];
}

function boundedInteger(value: unknown, min: number, max: number, fallback: number): number {
	const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
	if (typeof n !== 'number' || !Number.isFinite(n)) return fallback;
	return Math.min(max, Math.max(min, Math.trunc(n)));
}

/** The retry policy of one item's sidecar call, from the retry settings (Claim). */
export function sidecarRetry(this: IExecuteFunctions, itemIndex: number): RetryPolicy {
	if (nodeParameter.call(this, 'retrySidecarCalls', itemIndex, true) !== true) return NO_RETRY;
	return {
		tries: boundedInteger(
			nodeParameter.call(this, 'sidecarMaxTries', itemIndex, DEFAULT_TRIES),
			1,
			MAX_TRIES,
			DEFAULT_TRIES,
		),
		waitMs: boundedInteger(
			nodeParameter.call(this, 'sidecarWaitBetweenTries', itemIndex, DEFAULT_WAIT_MS),
			0,
			MAX_WAIT_MS,
			DEFAULT_WAIT_MS,
		),
	};
}

/**
 * How one item's Complete or Fail keeps trying, from its retry settings:
 * not at all (Retry Sidecar Calls off), for a number of seconds, or until
 * its claim's lease end. Read before the first send; the lease end itself
 * (Lease Until, often an expression) is read only when a send fails
 * (settleDeadline).
 */
export type SettleRetry =
	| { until: 'off' }
	| { until: 'timeLimit'; seconds: number }
	| { until: 'leaseEnd' };

/** The retry settings of one item's Complete or Fail (see SettleRetry). */
export function settleRetry(this: IExecuteFunctions, itemIndex: number): SettleRetry {
	if (nodeParameter.call(this, 'retrySidecarCalls', itemIndex, true) !== true) {
		return { until: 'off' };
	}
	if (nodeParameter.call(this, 'keepTryingUntil', itemIndex, 'leaseEnd') === 'timeLimit') {
		const seconds = boundedInteger(
			nodeParameter.call(this, 'keepTryingSeconds', itemIndex, DEFAULT_KEEP_TRYING_SECONDS),
			1,
			Number.MAX_SAFE_INTEGER / 1000,
			DEFAULT_KEEP_TRYING_SECONDS,
		);
		return { until: 'timeLimit', seconds };
	}
	return { until: 'leaseEnd' };
}

/** Until when one item's Complete or Fail keeps trying, and what that moment is. */
export interface SettleDeadline {
	/** Epoch ms; undefined when Retry Sidecar Calls is off (send once). */
	until?: number;
	/** "the lease end", "the time limit" or the fallback, for the error message. */
	what: string;
}

function parseTime(value: unknown): number | undefined {
	if (value instanceof Date) return Number.isFinite(value.getTime()) ? value.getTime() : undefined;
	if (typeof value !== 'string' || value.trim() === '') return undefined;
	const ms = Date.parse(value);
	return Number.isFinite(ms) ? ms : undefined;
}

/**
 * The deadline of one item's Complete or Fail, from its retry settings
 * (settleRetry): its claim's lease end (Lease Until; left at its default,
 * read from the item's idempotency.lease_until), a time limit after `now`,
 * or, when Lease Until is empty or not a time, DEFAULT_KEEP_TRYING_SECONDS
 * after `now`. Never fails: a report must be sent whatever the settings
 * say.
 */
export function settleDeadline(
	this: IExecuteFunctions,
	itemIndex: number,
	retry: SettleRetry,
	now: number,
): SettleDeadline {
	if (retry.until === 'off') return { what: 'Retry Sidecar Calls is off' };
	const limit = (seconds: number, what: string) => ({ until: now + seconds * 1000, what });
	if (retry.until === 'timeLimit') return limit(retry.seconds, 'the time limit');
	let leaseEnd: unknown;
	try {
		// Undefined and null alike fall back below, without an error.
		leaseEnd = nodeParameter.call(this, 'leaseUntil', itemIndex, '');
	} catch {
		// An expression that cannot be resolved for this item (e.g. the Claim
		// node it names did not run): the fallback below applies.
		leaseEnd = undefined;
	}
	const until = parseTime(leaseEnd);
	if (until !== undefined) return { until, what: 'the lease end' };
	return limit(
		DEFAULT_KEEP_TRYING_SECONDS,
		`${DEFAULT_KEEP_TRYING_SECONDS} s, as Time Limit Ends At was empty`,
	);
}
