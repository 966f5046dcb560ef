import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError, parseFieldList, pickFields } from '../../helpers/fields';
import { claimSidecar, withIdempotency } from '../../helpers/idempotency';
import { eventIdText, keyFieldValues, keyPartText } from '../../helpers/identity';
import { TOOL_CALL_KEY_MODE, runsAsTool, toolMessage } from '../../helpers/toolKey';
import { nodeParameter, runNode } from '../../helpers/parameters';
import { sidecarRequest } from '../../transport';
import type { ClaimBatchBody, ClaimRequest, ClaimResult } from '../../transport/types';
import { workflowIdOf } from '../../helpers/workflow';
import { batchResults, planBatch } from '../batch';
import {
	DEFAULT_TIME_LIMIT_SECONDS,
	TIME_LIMIT_LABEL,
	optionalText,
	positiveSeconds,
	requiredText,
	retryProperties,
	sidecarRetry,
	toNodeError,
	type ShowWhen,
} from '../common';
import { claimOutputIndex, claimSeparatesOutcomes } from '../outputs';
import type { ItemResult } from '../types';
import { checkToolKeyParameters, toolCallKey, toolKeyProperties } from './toolCall';

const show: ShowWhen = { operation: ['claim'] };

/** The sidecar's limit for wait_seconds (claim.MaxWait). */
const MAX_WAIT_SECONDS = 25;

export const description: INodeProperties[] = [
	{
		displayName: 'Source',
		name: 'source',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. stripe',
		description:
			'Provider and endpoint the event comes from, e.g. "stripe" or "github/orders". Part of the idempotency key.',
		displayOptions: { show },
	},
	{
		displayName: 'Key Mode',
		name: 'keyMode',
		type: 'options',
		noDataExpression: true,
		default: 'eventId',
		description: 'How the event is identified',
		options: [
			{
				name: 'Provider Event ID',
				value: 'eventId',
				description:
					"The provider's own event or delivery ID (Stripe event ID, X-GitHub-Delivery, webhook-ID). Preferred.",
			},
			{
				name: 'Composite of Fields',
				value: 'composite',
				description:
					'Several immutable values (e.g. event type, object ID, object version), joined unambiguously by the sidecar',
			},
			{
				name: 'Hash of Selected Fields',
				value: 'hash',
				description:
					'SHA-256 of the canonical JSON of chosen item fields, computed by the sidecar. Last resort; keeps personal data out of the key.',
			},
			{
				name: 'Derived From the Tool Call (AI Agent Tool)',
				value: TOOL_CALL_KEY_MODE,
				description:
					"Only when an AI agent calls this node as a tool: the node derives the event ID from the execution (or chat session), this node and the tool's arguments, so the agent cannot choose or change the key",
			},
		],
		displayOptions: { show },
	},
	...toolKeyProperties,
	{
		displayName: 'Event ID',
		name: 'eventId',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. {{ $json.headers["x-github-delivery"] }}',
		description:
			'The event ID sent by the provider. Never use a random value, an arrival time or the execution ID.',
		displayOptions: { show: { ...show, keyMode: ['eventId'] } },
	},
	{
		displayName: 'Key Parts',
		name: 'keyParts',
		type: 'fixedCollection',
		placeholder: 'Add Key Part',
		typeOptions: { multipleValues: true, sortable: true },
		default: {},
		description: 'Values that together identify the event; order matters',
		displayOptions: { show: { ...show, keyMode: ['composite'] } },
		options: [
			{
				name: 'parts',
				displayName: 'Part',
				values: [
					{
						displayName: 'Value',
						name: 'value',
						type: 'string',
						default: '',
						placeholder: 'e.g. {{ $json.body.type }}',
					},
				],
			},
		],
	},
	{
		displayName: 'Fields to Hash',
		name: 'keyFields',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. body.order.number, body.order.revision',
		description:
			'Comma-separated item fields (dot notation for nested fields) whose values form the key. An item where one of them is missing, null or empty (anywhere inside) fails instead of sharing a key.',
		displayOptions: { show: { ...show, keyMode: ['hash'] } },
	},
	{
		displayName: 'Event Type',
		name: 'eventType',
		type: 'string',
		default: '',
		placeholder: 'e.g. {{ $json.body.type }}',
		description: 'Type of the event, recorded with the claim (optional)',
		displayOptions: { show },
	},
	{
		displayName: 'Action Name',
		name: 'actionName',
		type: 'string',
		default: '',
		placeholder: 'e.g. create-invoice',
		description:
			'Claim one side effect of the event rather than the event itself: each (event, action) pair is claimed separately (optional)',
		displayOptions: { show },
	},
	{
		displayName: 'Payload for Conflict Detection',
		name: 'payloadMode',
		type: 'options',
		noDataExpression: true,
		default: 'fields',
		description:
			'What the sidecar hashes beside the key: the same key with a different payload hash is reported as a conflict, not as a duplicate',
		options: [
			{
				name: 'Selected Fields',
				value: 'fields',
				description: 'Only the chosen fields, e.g. the webhook body without its changing headers',
			},
			{
				name: 'Whole Item JSON',
				value: 'item',
				description:
					'The whole item, except an "idempotency" field added by an earlier claim. Headers that change per delivery cause false conflicts.',
			},
			{
				name: 'None',
				value: 'none',
				description: 'No conflict detection',
			},
		],
		displayOptions: { show, hide: { keyMode: [TOOL_CALL_KEY_MODE] } },
	},
	{
		displayName: 'Payload Fields',
		name: 'payloadFields',
		type: 'string',
		required: true,
		default: 'body',
		placeholder: 'e.g. body',
		description:
			'Comma-separated item fields (dot notation for nested fields) that form the payload. "body" is the request body of a Webhook node item.',
		displayOptions: {
			show: { ...show, payloadMode: ['fields'] },
			hide: { keyMode: [TOOL_CALL_KEY_MODE] },
		},
	},
	{
		// Named leaseSeconds since version 1: saved workflows keep their value.
		displayName: 'Time Limit for the Side Effect (Seconds)',
		name: 'leaseSeconds',
		type: 'number',
		typeOptions: { minValue: 1 },
		default: DEFAULT_TIME_LIMIT_SECONDS,
		description:
			"How long this execution may take to run the protected node and Complete before the claim's lease ends. Until then every other delivery of the event waits (In Progress); after it, the option When the Time Limit Passes Without Complete decides. Set it longer than the protected work ever takes, or extend it (Extend Lease).",
		displayOptions: { show },
	},
	{
		// Version 1 only: from version 2 Conflict and In Progress always have
		// their own outputs (see outputs.ts). Kept for saved workflows, whose
		// node stays version 1 and whose unset toggle stays off.
		displayName: 'Separate Conflict and In-Progress Outputs',
		name: 'separateConflictOutputs',
		type: 'boolean',
		noDataExpression: true,
		default: false,
		description:
			'Whether to add the outputs Conflict (same key, different payload) and In Progress (another holder has the claim, or a retry is not due yet). When off, both go to Duplicate: never answer them 2xx.',
		displayOptions: { show: { ...show, '@version': [1] } },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add option',
		default: {},
		displayOptions: { show },
		options: [
			{
				displayName: 'Object ID',
				name: 'objectId',
				type: 'string',
				default: '',
				description:
					'ID of the object the event changes. With Object Version, an event not newer than the last completed one for this object is reported as stale.',
			},
			{
				displayName: 'Object Version',
				name: 'objectVersion',
				type: 'number',
				default: 0,
				description: 'Version of the object in this event (whole number), used with Object ID',
			},
			{
				displayName: 'Reconciler',
				name: 'reconciler',
				type: 'string',
				default: '',
				placeholder: 'e.g. crm',
				description:
					"Name of a reconciler in claimd's sources file (reconcilers:) that claimd calls when this claim's outcome becomes unknown: a workflow that looks at the destination and answers done, not done or still unknown (operation Answer Reconcile). Empty: the reconciler the source names in the sources file, if it names one. A name the sources file does not configure is refused. A name, never a URL: claimd calls only the reconcilers its sources file configures.",
			},
			{
				displayName: 'Shadow Mode (Observe Only)',
				name: 'shadow',
				type: 'boolean',
				default: false,
				description:
					"Whether to only observe: every item leaves by Won, as if the node were not there, while the sidecar decides and records what it would have done (idempotency.shadow.would_be: duplicate, in_progress, conflict…; its cause in idempotency.shadow.cause). Only an item that would have won gets a claim token; Complete and Fail pass the others through. The records are real: turn this off and the next copy is stopped, decided against everything seen in shadow. A source with shadow: true in the sidecar's sources file is observed whatever this says.",
			},
			{
				displayName: 'Wait for a Concurrent Holder (Seconds)',
				name: 'waitSeconds',
				type: 'number',
				typeOptions: { minValue: 0, maxValue: MAX_WAIT_SECONDS },
				default: 5,
				description: `When another execution holds the claim (in progress), wait up to this many seconds for it to finish, then go on with what the claim is then: Duplicate with its result, or In Progress with the retry outcome when it failed. The sidecar is woken when the holder completes or fails; this execution waits meanwhile. Without this option (or 0) an in-progress claim leaves at once. At most ${MAX_WAIT_SECONDS}; keep it below the provider's request timeout.`,
			},
			{
				displayName: 'When the Time Limit Passes Without Complete',
				name: 'leasePolicy',
				type: 'options',
				default: 'source',
				description:
					"What happens to a won claim when this execution neither completes nor fails it in time, e.g. because n8n stopped between the protected node and Complete: the side effect may or may not have happened (the claim's lease policy)",
				options: [
					{
						name: "Use the Source's Setting (Default: Mark for Review)",
						value: 'source',
						description:
							'As configured for the source in the sidecar (lease_policy); a source without a setting marks the claim for review',
					},
					{
						name: 'Mark for Review (Never Run Again Automatically)',
						value: 'review',
						description:
							'The claim becomes unknown and every later delivery leaves by Duplicate until a person resolves it (Resolve). For side effects that must never happen twice, such as a payment.',
					},
					{
						name: 'Let the Next Delivery Run It Again',
						value: 'reclaim',
						description:
							'The next delivery of the event wins the claim and runs the protected node again, so the side effect may happen twice. Only for destinations that honour the idempotency key sent with the effect (e.g. an Idempotency-Key header).',
					},
				],
			},
		],
	},
	...retryProperties(
		show,
		'Safe: a claim is sent with the same request ID, and a claim it already made comes back won with the same token.',
	),
];

/** The sidecar's limit for request_id, in bytes. */
const MAX_REQUEST_ID_BYTES = 200;
/** Room kept for ":" and an item index. */
const ITEM_SUFFIX_BYTES = 12;

function utf8Bytes(text: string): number {
	return new TextEncoder().encode(text).length;
}

/**
 * What the request IDs of this node's claims start with: the execution ID,
 * the node's name (unique in a workflow; its ID when the name is too long
 * for the sidecar's 200 bytes) and the node's run index. With ":" and the
 * item index this identifies one claim request, and stays the same when
 * n8n's Retry On Fail (or the node's own retry) sends it again, so the
 * sidecar answers such a retry with the claim it already made (same token)
 * instead of in_progress; two items with one key in one execution, or two
 * runs of the node in a loop, stay distinct requests (one wins). Undefined
 * when the execution ID or run index is unknown: then no request ID is sent
 * and a retry is decided like any other claim.
 */
function requestIdPrefix(
	this: IExecuteFunctions,
	executionId: string | undefined,
): string | undefined {
	if (executionId === undefined) return undefined;
	const runIndex: unknown = this.getWorkflowDataProxy(0).$thisRunIndex;
	if (typeof runIndex !== 'number' || !Number.isSafeInteger(runIndex) || runIndex < 0) {
		return undefined;
	}
	const node = runNode.call(this);
	for (const name of [node.name, node.id]) {
		if (!name) continue;
		const prefix = `${executionId}:${name}:${runIndex}`;
		if (utf8Bytes(prefix) <= MAX_REQUEST_ID_BYTES - ITEM_SUFFIX_BYTES) return prefix;
	}
	return undefined;
}

function wholeItemPayload(json: IDataObject): IDataObject {
	const payload: IDataObject = {};
	for (const [name, value] of Object.entries(json)) {
		if (name !== 'idempotency') payload[name] = value;
	}
	return payload;
}

/** Builds the claim request of one item from its parameters. */
function buildClaim(
	this: IExecuteFunctions,
	itemIndex: number,
	item: INodeExecutionData,
	executionId: string | undefined,
	requestIdBase: string | undefined,
): ClaimRequest {
	const claim: ClaimRequest = {
		source: requiredText(nodeParameter.call(this, 'source', itemIndex), 'Source').trim(),
	};

	const keyMode = nodeParameter.call(this, 'keyMode', itemIndex) as string;
	checkToolKeyParameters.call(this, keyMode);
	if (keyMode === TOOL_CALL_KEY_MODE) {
		claim.event_id = toolCallKey.call(this, itemIndex, executionId);
	} else if (keyMode === 'eventId') {
		claim.event_id = eventIdText(nodeParameter.call(this, 'eventId', itemIndex), itemIndex);
	} else if (keyMode === 'composite') {
		const keyParts = nodeParameter.call(this, 'keyParts', itemIndex, {}) as {
			parts?: Array<{ value?: unknown }>;
		};
		const parts = keyParts.parts ?? [];
		if (parts.length === 0) throw new FieldError('Key Parts has no part');
		claim.key_parts = parts.map((part, index) => keyPartText(part.value, index + 1, itemIndex));
	} else if (keyMode === 'hash') {
		const fields = parseFieldList(nodeParameter.call(this, 'keyFields', itemIndex) as string);
		if (fields.length === 0) throw new FieldError('Fields to Hash is empty');
		claim.key_fields = keyFieldValues(item.json, fields, itemIndex);
	} else {
		throw new FieldError(`Unknown Key Mode "${String(keyMode)}"`);
	}

	const eventType = optionalText(nodeParameter.call(this, 'eventType', itemIndex, ''));
	if (eventType !== undefined) claim.event_type = eventType;
	const action = optionalText(nodeParameter.call(this, 'actionName', itemIndex, ''));
	if (action !== undefined) claim.action = action.trim();

	// A derived key holds the tool's arguments already: no payload to compare.
	const payloadMode =
		keyMode === TOOL_CALL_KEY_MODE
			? 'none'
			: (nodeParameter.call(this, 'payloadMode', itemIndex) as string);
	if (payloadMode === 'item') {
		claim.payload = wholeItemPayload(item.json);
	} else if (payloadMode === 'fields') {
		const fields = parseFieldList(nodeParameter.call(this, 'payloadFields', itemIndex) as string);
		if (fields.length === 0) throw new FieldError('Payload Fields is empty');
		claim.payload = pickFields(item.json, fields, 'Payload Fields');
	} else if (payloadMode !== 'none') {
		throw new FieldError(`Unknown Payload for Conflict Detection "${String(payloadMode)}"`);
	}

	claim.lease_seconds = positiveSeconds(
		nodeParameter.call(this, 'leaseSeconds', itemIndex),
		TIME_LIMIT_LABEL,
	);

	const options = nodeParameter.call(this, 'options', itemIndex, {}) as IDataObject;
	const objectId = optionalText(options.objectId);
	if (objectId !== undefined) claim.object_id = objectId;
	if (options.objectVersion !== undefined && options.objectVersion !== '') {
		const version = Number(options.objectVersion);
		if (!Number.isSafeInteger(version)) {
			throw new FieldError('Object Version must be a whole number');
		}
		claim.object_version = version;
	}
	const leasePolicy = options.leasePolicy;
	if (leasePolicy === 'review' || leasePolicy === 'reclaim') {
		claim.lease_policy = leasePolicy;
	} else if (leasePolicy !== undefined && leasePolicy !== '' && leasePolicy !== 'source') {
		throw new FieldError(
			`Unknown When the Time Limit Passes Without Complete "${String(leasePolicy)}"`,
			'Choose source, review or reclaim.',
		);
	}
	if (options.waitSeconds !== undefined && options.waitSeconds !== '') {
		const wait = Number(options.waitSeconds);
		if (!Number.isInteger(wait) || wait < 0 || wait > MAX_WAIT_SECONDS) {
			throw new FieldError(
				`Wait for a Concurrent Holder must be a whole number of seconds from 0 to ${MAX_WAIT_SECONDS}`,
			);
		}
		if (wait > 0) claim.wait_seconds = wait;
	}
	if (options.shadow === true) claim.shadow = true;
	const reconciler = optionalText(options.reconciler);
	if (reconciler !== undefined) claim.reconciler = reconciler.trim();

	if (executionId) claim.execution_id = executionId;
	// n8n's execution mode: a copy claimed in retry or manual mode is told
	// apart as an operator's replay in the sidecar's delivery log.
	const mode: unknown = this.getMode();
	if (typeof mode === 'string' && mode !== '') claim.execution_mode = mode.slice(0, 64);
	// The workflow's id, for the delivery log (n8n gives a node no version id).
	const workflowId = workflowIdOf(this);
	if (workflowId !== undefined) claim.workflow_id = workflowId;
	if (requestIdBase !== undefined) claim.request_id = `${requestIdBase}:${itemIndex}`;
	return claim;
}

/**
 * Claims every item of the execution in one POST /v1/claims/batch and routes
 * each result on its own: won → Won; conflict → Conflict and in_progress /
 * retry_later → In Progress (always from node version 2; in version 1 when
 * separate outputs are on); everything else → Duplicate. Items whose
 * parameters cannot be sent are not claimed, and without continue on fail
 * nothing is claimed at all. An item with Wait for a Concurrent Holder
 * waits in the sidecar for an in-progress holder. Each claim carries a
 * request ID (see requestIdPrefix), and the batch call is retried per the
 * retry settings: a retry gets back the claims the lost answer held.
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	const node = runNode.call(this);
	const separate = claimSeparatesOutcomes.call(this, node.typeVersion);
	const executionId = optionalText(this.getExecutionId());
	const requestIdBase = requestIdPrefix.call(this, executionId);

	// Every request is built before any is sent, so a bad item stops the
	// node (unless it continues on fail) before claims are held for the others.
	const plan = planBatch(
		node,
		items,
		(itemIndex, item) => buildClaim.call(this, itemIndex, item, executionId, requestIdBase),
		!this.continueOnFail(),
	);
	if (plan.entries.length === 0) return plan.results;

	const body: ClaimBatchBody = { claims: plan.entries };
	let response: unknown;
	try {
		response = await sidecarRequest.call(this, {
			method: 'POST',
			path: '/v1/claims/batch',
			body,
			retry: sidecarRetry.call(this, 0),
		});
	} catch (error) {
		const nodeError = toNodeError(node, error);
		for (const itemIndex of plan.places) plan.results[itemIndex] = { error: nodeError };
		return plan.results;
	}

	const asTool = runsAsTool(node);
	return batchResults(node, response, plan, { noun: 'claims' }, (entry, itemIndex) => {
		const sidecar = claimSidecar(entry as ClaimResult);
		// The agent's model reads the tool's output: say what to do in words.
		if (asTool) sidecar.message = toolMessage(sidecar);
		return {
			output: claimOutputIndex(entry.outcome, separate),
			json: withIdempotency(items[itemIndex].json, sidecar),
		};
	});
}
