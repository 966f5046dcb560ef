import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
} from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { recordSidecar, simplifiedSidecar } from '../../helpers/idempotency';
import { nodeParameter } from '../../helpers/parameters';
import type { RetryPolicy } from '../../transport';
import type { ClaimListPage, ClaimRecord, ListClaimsQuery } from '../../transport/types';
import {
	eachItem,
	executionIdOf,
	executionIdProperty,
	optionalText,
	requiredText,
	type ShowWhen,
} from '../common';
import { requestClaimList } from '../records';
import type { ItemResult } from '../types';

const show: ShowWhen = { operation: ['getMany'] };

/** The sidecar's largest page of GET /v1/claims/list (claim.MaxListLimit). */
export const MAX_PAGE_SIZE = 500;

/**
 * Pages one item reads at most: Return All stops with an error past
 * MAX_PAGES × MAX_PAGE_SIZE records rather than reading without end (a
 * record that changes while the list is read moves to its end).
 */
export const MAX_PAGES = 100;

/** Reading is safe to repeat: sent up to 3 times after a connection failure or a 5xx. */
const READ_RETRY: RetryPolicy = { tries: 3, waitMs: 500 };

/** The states GET /v1/claims/list accepts: claims a retry or a person may still act on. */
const STATES = [
	{
		name: 'Dead Lettered (Given Up)',
		value: 'dead_lettered',
		description: 'Failed permanently or too often; waits for a person (Resolve)',
	},
	{
		name: 'Processing (Side Effect Running)',
		value: 'processing',
		description: 'Won by an execution that has not completed or failed it yet',
	},
	{
		name: 'Received (Stored, Not Yet Claimed)',
		value: 'received',
		description: "Stored by the sidecar's ingest, not yet claimed by a workflow",
	},
	{
		name: 'Retryable Failed (Waiting for a Retry)',
		value: 'retryable_failed',
		description: 'Failed; the next delivery may claim it again once its backoff has passed',
	},
	{
		name: 'Unknown (Needs Review)',
		value: 'unknown',
		description:
			'The side effect may or may not have happened; waits for a person to check and Resolve it',
	},
];

export const description: INodeProperties[] = [
	{
		displayName: 'Claims',
		name: 'getManyBy',
		type: 'options',
		noDataExpression: true,
		default: 'state',
		options: [
			{
				name: 'In a State',
				value: 'state',
				description: 'Claims that wait in one state, e.g. unknown claims to review',
			},
			{
				name: 'Won by an Execution',
				value: 'execution',
				description:
					'Claims whose current attempt an execution won, e.g. in an Error Trigger workflow',
			},
		],
		displayOptions: { show },
	},
	{
		displayName: 'State',
		name: 'state',
		type: 'options',
		required: true,
		default: 'unknown',
		options: STATES,
		displayOptions: { show: { ...show, getManyBy: ['state'] } },
	},
	executionIdProperty({ ...show, getManyBy: ['execution'] }, 'list'),
	{
		displayName: 'Return All',
		name: 'returnAll',
		type: 'boolean',
		default: false,
		description: 'Whether to return all results or only up to a given limit',
		displayOptions: { show },
	},
	{
		displayName: 'Limit',
		name: 'limit',
		type: 'number',
		typeOptions: { minValue: 1 },
		default: 50,
		description: 'Max number of results to return',
		displayOptions: { show: { ...show, returnAll: [false] } },
	},
	{
		displayName: 'Filters',
		name: 'filters',
		type: 'collection',
		placeholder: 'Add Filter',
		default: {},
		displayOptions: { show },
		options: [
			{
				displayName: 'Source',
				name: 'source',
				type: 'string',
				default: '',
				placeholder: 'e.g. stripe',
				description: 'Only claims of this source',
			},
			{
				displayName: 'State',
				name: 'state',
				type: 'options',
				default: 'processing',
				options: STATES,
				description: "Only the execution's claims in this state",
				displayOptions: { show: { '/getManyBy': ['execution'] } },
			},
		],
	},
	{
		displayName: 'Simplify',
		name: 'simplify',
		type: 'boolean',
		default: true,
		description:
			'Whether to return only the main fields of each claim (claim_id, source, event_id, action, state, result_ref, attempt, lease_until, updated_at) instead of the whole record',
		displayOptions: { show },
	},
];

/** The query of one item's list, without page size and cursor. */
function listQuery(this: IExecuteFunctions, itemIndex: number): ListClaimsQuery {
	const filters = nodeParameter.call(this, 'filters', itemIndex, {}) as IDataObject;
	const qs: ListClaimsQuery = {};
	const by = nodeParameter.call(this, 'getManyBy', itemIndex, 'state') as string;
	if (by === 'state') {
		qs.state = requiredText(nodeParameter.call(this, 'state', itemIndex), 'State');
	} else if (by === 'execution') {
		qs.execution_id = executionIdOf.call(
			this,
			itemIndex,
			'In an Error Trigger workflow it is {{ $json.execution.id }}.',
		);
		const state = optionalText(filters.state);
		if (state !== undefined) qs.state = state;
	} else {
		throw new FieldError(`Unknown Claims "${String(by)}"`);
	}
	const source = optionalText(filters.source);
	if (source !== undefined) qs.source = source.trim();
	return qs;
}

/** How many records one item wants: Limit, or unbounded with Return All. */
function wanted(this: IExecuteFunctions, itemIndex: number): number {
	if (nodeParameter.call(this, 'returnAll', itemIndex, false) === true) {
		return Number.POSITIVE_INFINITY;
	}
	const limit = Number(nodeParameter.call(this, 'limit', itemIndex, 50));
	if (!Number.isSafeInteger(limit) || limit < 1) {
		throw new FieldError('Limit must be a whole number, at least 1');
	}
	return limit;
}

/**
 * Reads the records of one item's list: GET /v1/claims/list page by page
 * over next_cursor (pages of at most MAX_PAGE_SIZE) until Limit or, with
 * Return All, the end. A record seen on an earlier page (it changed while
 * the list was read) is kept once; more than MAX_PAGES pages is an error.
 */
async function listClaims(this: IExecuteFunctions, itemIndex: number): Promise<ClaimRecord[]> {
	const qs = listQuery.call(this, itemIndex);
	const want = wanted.call(this, itemIndex);
	const records: ClaimRecord[] = [];
	const seen = new Set<unknown>();
	let cursor: string | undefined;
	for (let page = 1; records.length < want; page++) {
		if (page > MAX_PAGES) {
			throw new FieldError(
				`More than ${MAX_PAGES * MAX_PAGE_SIZE} claims match: Return All stops there`,
				'Narrow the list (a Source filter, a state), or turn off Return All and set a Limit.',
			);
		}
		const pageQuery: ListClaimsQuery = {
			...qs,
			limit: Math.min(MAX_PAGE_SIZE, want - records.length),
		};
		if (cursor !== undefined) pageQuery.cursor = cursor;
		const answer = await requestClaimList<ClaimListPage>(this, {
			method: 'GET',
			path: '/v1/claims/list',
			qs: pageQuery,
			itemIndex,
			retry: READ_RETRY,
			notFound: {
				message: 'This Idempotent Claim sidecar cannot list claims',
				description:
					'It does not know GET /v1/claims/list, which Get Many needs: update claimd to a version that has it.',
			},
		});
		for (const record of answer.claims) {
			const id = record.claim_id;
			if (id !== undefined && seen.has(id)) continue;
			seen.add(id);
			if (records.length < want) records.push(record);
		}
		const next = answer.next_cursor;
		if (typeof next !== 'string' || next === '' || next === cursor) break;
		cursor = next;
	}
	return records;
}

/**
 * Lists claims per input item, by state (and source) or by the n8n
 * execution that won them: one output item per record, its fields under
 * `idempotency` as in every other operation's output, so Lookup, Fail and
 * Resolve read its claim ID by default.
 */
export async function execute(
	this: IExecuteFunctions,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	return await eachItem.call(this, items, async (itemIndex) => {
		const simplify = nodeParameter.call(this, 'simplify', itemIndex, true) === true;
		const records = await listClaims.call(this, itemIndex);
		return {
			output: 0,
			many: records.map((record) => {
				const sidecar = recordSidecar(undefined, record);
				return { idempotency: simplify ? simplifiedSidecar(sidecar) : sidecar };
			}),
		};
	});
}
