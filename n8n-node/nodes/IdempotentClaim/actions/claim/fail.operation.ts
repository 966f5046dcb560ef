import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar } from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import type {
	ClaimRecord,
	FailExecutionBody,
	FailExecutionRound,
	Schemas,
} from '../../transport/types';
import {
	EXECUTION_ID_NOTE,
	claimIdProperty,
	claimTokenProperty,
	eachItem,
	executionIdOf,
	executionIdProperty,
	optionalText,
	requiredText,
	retryProperties,
	settleRetryProperties,
	sidecarRetry,
	type ShowWhen,
} from '../common';
import { requestClaimList } from '../records';
import { settle, type SettleOperation } from '../settle';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['fail'] };
const one: ShowWhen = { ...show, claimsToFail: ['token'] };
const ofExecution: ShowWhen = { ...show, claimsToFail: ['execution'] };

const RETRY_KINDS: ReadonlyArray<Schemas['FailKind']> = ['retryable', 'permanent', 'unknown'];

const RETRY_KIND_OPTIONS = [
	{
		name: 'Retryable',
		value: 'retryable',
		description:
			'The effect did not happen; the claim may be won again after a backoff, up to the attempt cap',
	},
	{
		name: 'Permanent',
		value: 'permanent',
		description: 'Retrying cannot help (validation, permission); the event is dead-lettered',
	},
	{
		name: 'Unknown Outcome',
		value: 'unknown',
		description:
			'The effect may or may not have happened (e.g. a timeout); never retried automatically, a person resolves it',
	},
];

/**
 * Rounds of POST /v1/claims/fail/execution one item sends at most: each
 * fails up to the sidecar's batch limit and says whether more are left.
 */
export const MAX_FAIL_ROUNDS = 100;

export const description: INodeProperties[] = [
	{
		displayName: 'Claims to Fail',
		name: 'claimsToFail',
		type: 'options',
		noDataExpression: true,
		default: 'token',
		options: [
			{
				name: 'This Claim (Claim ID and Token)',
				value: 'token',
				description: 'The claim this execution won, after its protected node failed',
			},
			{
				name: 'All Claims of an Execution',
				value: 'execution',
				description:
					'For an Error Trigger workflow: every claim a crashed execution won and left processing',
			},
		],
		displayOptions: { show },
	},
	claimIdProperty(one),
	claimTokenProperty(one),
	executionIdProperty(ofExecution, 'fail'),
	{
		displayName: 'Error Message',
		name: 'errorMessage',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. {{ $json.error.message }}',
		description: "Why the side effect failed; stored as the claim's last error",
		displayOptions: { show: one },
	},
	{
		displayName: 'Error Message',
		name: 'errorMessage',
		type: 'string',
		required: true,
		// Literally EXECUTION_ERROR_DEFAULT.
		default: '={{ $json.execution.error.message }}',
		description:
			"Why the claims failed; stored as each claim's last error. The default is the error of the execution an Error Trigger reports.",
		displayOptions: { show: ofExecution },
	},
	{
		displayName: 'Retry Kind',
		name: 'retryKind',
		type: 'options',
		default: 'retryable',
		description: 'What the failure means for the event',
		options: RETRY_KIND_OPTIONS,
		displayOptions: { show: one },
	},
	{
		displayName: 'Retry Kind',
		name: 'retryKind',
		type: 'options',
		default: 'unknown',
		description:
			'What the crash means for the events. Unknown Outcome (the default) is right when the execution may have stopped after a protected node ran: a person checks and resolves each claim.',
		options: RETRY_KIND_OPTIONS,
		displayOptions: { show: ofExecution },
	},
	{
		displayName: 'Filters',
		name: 'filters',
		type: 'collection',
		placeholder: 'Add Filter',
		default: {},
		displayOptions: { show: ofExecution },
		options: [
			{
				displayName: 'Source',
				name: 'source',
				type: 'string',
				default: '',
				placeholder: 'e.g. stripe',
				description: "Only the execution's claims of this source",
			},
		],
	},
	...settleRetryProperties(one),
	...retryProperties(
		ofExecution,
		'Safe: a claim that the first try failed is no longer processing, so a second try leaves it alone.',
	),
];

function retryKind(this: IExecuteFunctions, itemIndex: number): Schemas['FailKind'] {
	const retry: unknown = nodeParameter.call(this, 'retryKind', itemIndex);
	const kind = RETRY_KINDS.find((known) => known === retry);
	if (kind === undefined) {
		throw new FieldError(`Retry Kind must be one of ${RETRY_KINDS.join(', ')}`);
	}
	return kind;
}

/**
 * Fails every claim that the item's execution won and left processing:
 * POST /v1/claims/fail/execution, again while the sidecar says more are
 * left (at most MAX_FAIL_ROUNDS rounds). Returns the failed records.
 */
async function failExecution(this: IExecuteFunctions, itemIndex: number): Promise<ClaimRecord[]> {
	const body: FailExecutionBody = {
		execution_id: executionIdOf.call(this, itemIndex, EXECUTION_ID_NOTE),
		retry: retryKind.call(this, itemIndex),
		error: requiredText(nodeParameter.call(this, 'errorMessage', itemIndex), 'Error Message'),
	};
	const filters = nodeParameter.call(this, 'filters', itemIndex, {}) as IDataObject;
	const source = optionalText(filters.source);
	if (source !== undefined) body.source = source.trim();

	const failed: ClaimRecord[] = [];
	for (let round = 1; ; round++) {
		const answer = await requestClaimList<FailExecutionRound>(this, {
			method: 'POST',
			path: '/v1/claims/fail/execution',
			body,
			itemIndex,
			retry: sidecarRetry.call(this, itemIndex),
			notFound: {
				message: 'This Idempotent Claim sidecar cannot fail the claims of an execution',
				description:
					'It does not know POST /v1/claims/fail/execution: update claimd to a version that has it.',
			},
		});
		failed.push(...answer.claims);
		if (answer.more !== true || answer.claims.length === 0) return failed;
		if (round >= MAX_FAIL_ROUNDS) {
			throw new FieldError(
				`Failed ${failed.length} claims of execution ${String(body.execution_id)} in ${MAX_FAIL_ROUNDS} requests, and the sidecar says more are left`,
				'Run the node again to fail the rest.',
			);
		}
	}
}

/**
 * This Claim: reports every item's side effect as failed in one
 * POST /v1/claims/fail/batch, kept trying until the claims' time limit
 * while the sidecar is unreachable (see settle and the retry settings).
 * All Claims of an n8n Execution: per item, fails the claims that
 * execution won and left processing; one output item per failed claim.
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	if (nodeParameter.call(this, 'claimsToFail', 0, 'token') === 'execution') {
		return await eachItem.call(this, items, async (itemIndex) => ({
			output: 0,
			many: (await failExecution.call(this, itemIndex)).map((record) => ({
				idempotency: recordSidecar(undefined, record),
			})),
		}));
	}
	const report: SettleOperation<'fail'> = {
		operation: 'fail',
		path: '/v1/claims/fail/batch',
		fields(itemIndex) {
			const error = requiredText(
				nodeParameter.call(this, 'errorMessage', itemIndex),
				'Error Message',
			);
			return { error, retry: retryKind.call(this, itemIndex) };
		},
	};
	return await settle.call(this, report, items);
}
