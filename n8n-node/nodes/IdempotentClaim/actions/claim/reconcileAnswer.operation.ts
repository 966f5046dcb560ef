import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar } from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import { claimPath, sidecarRequest } from '../../transport';
import type { ClaimRecord, ReconcileBody } from '../../transport/types';
import {
	eachItem,
	optionalText,
	requiredText,
	retryProperties,
	sidecarRetry,
	type ShowWhen,
} from '../common';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['reconcileAnswer'] };

/** The verdicts claimd takes for a reconcile call (reconcile design: done, not_done, still_unknown). */
export const VERDICTS = ['done', 'not_done', 'still_unknown'] as const;

export type Verdict = (typeof VERDICTS)[number];

const RECONCILE_HINT =
	"By default it is read from $json.body, the body of claimd's reconcile request as a Webhook node receives it. After other nodes, map it from the Webhook node, e.g. {{ $('Reconcile Webhook').first().json.body.claim_id }}.";

export const description: INodeProperties[] = [
	{
		displayName: 'Claim ID',
		name: 'claimId',
		type: 'string',
		required: true,
		// The claim claimd asks about: claim_id of its reconcile request.
		default: '={{ $json.body.claim_id }}',
		description:
			"ID of the claim claimd asks about: claim_id of claimd's reconcile request, read by default from the Webhook node's body",
		displayOptions: { show },
	},
	{
		// password: n8n's node linter and its community-package scanner
		// require it of every string parameter whose name contains "token".
		// The reconcile token is not a secret either: it fences one call of
		// claimd's reconcile, as the claim token fences one attempt.
		displayName: 'Reconcile Token',
		name: 'reconcileToken',
		type: 'string',
		typeOptions: { password: true },
		required: true,
		default: '={{ $json.body.reconcile_token }}',
		description:
			"Token of this reconcile call: reconcile_token of claimd's reconcile request. claimd takes an answer only with the token of the call in flight, before answer_by; an answer to an older call is refused (409).",
		displayOptions: { show },
	},
	{
		displayName: 'Verdict',
		name: 'verdict',
		type: 'options',
		default: 'done',
		description: 'What the workflow found at the destination about the effect of the claim',
		options: [
			{
				name: 'Done',
				value: 'done',
				description:
					'The destination has the effect: the claim is completed with the result reference, and later deliveries are duplicates',
			},
			{
				name: 'Not Done',
				value: 'not_done',
				description:
					'The destination has no trace of the effect: the claim may run once more (the next delivery wins it; an event claimd ingested is dispatched again)',
			},
			{
				name: 'Still Unknown',
				value: 'still_unknown',
				description:
					"The destination cannot tell yet: claimd asks again after a backoff, up to the reconciler's max_calls, then leaves the claim unknown for an operator",
			},
		],
		displayOptions: { show },
	},
	{
		displayName: 'Result Reference',
		name: 'resultRef',
		type: 'string',
		default: '',
		placeholder: 'e.g. pay_1234',
		description:
			'What the destination holds for the effect (a payment ID, a message ID), recorded with the completed claim like the result reference of Complete. Sent with Done only; optional.',
		// Hidden for the other verdicts, shown for Done and for a verdict set by an expression.
		displayOptions: { show, hide: { verdict: ['not_done', 'still_unknown'] } },
	},
	{
		displayName: 'Note',
		name: 'note',
		type: 'string',
		default: '',
		placeholder: 'e.g. Found payment by idempotency key',
		description:
			"Why the workflow answers so, kept in the claim's delivery log (optional). Never put secrets or personal data in it.",
		displayOptions: { show },
	},
	...retryProperties(
		show,
		'Safe: the same answer with the same reconcile token is applied once; claimd answers a repeat with the same result.',
	),
];

/**
 * claimd's 409 invalid_state for a reconcile answer: the claim left
 * unknown first, or this call was answered with another verdict.
 */
const SETTLED_ALREADY = {
	message: 'The reconcile answer was not applied: the claim was settled already',
	description:
		"The claim left unknown before this answer came (its original holder's late Complete, or an operator's Resolve or Release), or this call was answered already with another verdict; claimd's message above says which. Nothing was written; look the claim up (Lookup) for its state.",
};

/** Reads Verdict of one item: one of VERDICTS, else an error that names the parameter. */
function verdictOf(this: IExecuteFunctions, itemIndex: number): Verdict {
	const verdict = nodeParameter.call(this, 'verdict', itemIndex);
	const found = VERDICTS.find((name) => name === verdict);
	if (found === undefined) {
		throw new FieldError(
			`Verdict must be one of ${VERDICTS.join(', ')}`,
			'Choose Done, Not Done or Still Unknown; an expression must give one of these values.',
		);
	}
	return found;
}

function isObject(value: unknown): value is IDataObject {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Answers claimd's reconcile call for each item: POST
 * /v1/claims/{claim_id}/reconcile {reconcile_token, verdict, result_ref?,
 * note?} with the node's credential (the API key of the claim's tenant).
 *
 * Each output item is a new item, not the input item with fields added:
 * the input is the Webhook node's item, whose headers hold the Header Auth
 * token of the reconcile webhook, and under "When Last Node Finishes" the
 * output goes back to claimd as the webhook's answer. It holds
 * `verdict`, `result_ref` and `note` as answered (null when not sent), so
 * claimd reads the same answer from the response body; `claim_id`;
 * `reconcile`, the reconcile state claimd answered (null when it sent
 * none); and `idempotency`, the claim record after the answer.
 *
 * Errors: a parameter that cannot be sent names the parameter; claimd's
 * 409 reconcile_token_stale (the call is no longer the one in flight) and
 * invalid_state (the claim left unknown first) say so (transport/errors.ts).
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await eachItem.call(this, items, async (itemIndex) => {
		const claimId = requiredText(
			nodeParameter.call(this, 'claimId', itemIndex),
			'Claim ID',
			RECONCILE_HINT,
		).trim();
		const reconcileToken = requiredText(
			nodeParameter.call(this, 'reconcileToken', itemIndex),
			'Reconcile Token',
			RECONCILE_HINT,
		).trim();
		const verdict = verdictOf.call(this, itemIndex);
		const body: ReconcileBody = { reconcile_token: reconcileToken, verdict };
		const resultRef =
			verdict === 'done'
				? optionalText(nodeParameter.call(this, 'resultRef', itemIndex, ''))
				: undefined;
		if (resultRef !== undefined) body.result_ref = resultRef;
		const note = optionalText(nodeParameter.call(this, 'note', itemIndex, ''));
		if (note !== undefined) body.note = note;

		const answer = (await sidecarRequest.call(this, {
			method: 'POST',
			path: claimPath(claimId, 'reconcile'),
			body,
			itemIndex,
			retry: sidecarRetry.call(this, itemIndex),
			invalidState: SETTLED_ALREADY,
		})) as ClaimRecord;
		// The claim record, with the reconcile state as its `reconcile`
		// member; an answer that holds them as `record` and `reconcile` is
		// read as well.
		const { reconcile, ...rest } = answer;
		const record = (
			isObject(rest.record) && rest.claim_id === undefined ? rest.record : rest
		) as ClaimRecord;
		return {
			output: 0,
			json: {
				verdict,
				result_ref: resultRef ?? null,
				note: note ?? null,
				claim_id: claimId,
				reconcile: isObject(reconcile) ? reconcile : null,
				idempotency: recordSidecar(undefined, record),
			},
		};
	});
}
