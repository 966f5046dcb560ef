import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { isShadowCopy, recordSidecar, withIdempotency } from '../helpers/idempotency';
import { nodeParameter, runNode } from '../helpers/parameters';
import { NO_RETRY, retriesExhausted, sidecarRequest } from '../transport';
import { unrecordedOutcomeError } from '../transport/errors';
import type { ClaimRecord, CompleteBatchEntry, FailBatchEntry } from '../transport/types';
import { batchResults, planBatch } from './batch';
import {
	SETTLE_WAIT_MS,
	claimIdAndToken,
	settleDeadline,
	settleRetry,
	toNodeError,
	type SettleRetry,
} from './common';
import type { ItemResult } from './types';

/** Whether Claim Token resolves to a non-empty text for the item. */
function tokenGiven(this: IExecuteFunctions, itemIndex: number): boolean {
	try {
		const token: unknown = nodeParameter.call(this, 'claimToken', itemIndex, '');
		return typeof token === 'string' && token.trim() !== '';
	} catch {
		return false;
	}
}

/** Each settle batch route and the schema of one report it takes. */
export interface SettleRoutes {
	complete: { path: '/v1/claims/complete/batch'; entry: CompleteBatchEntry };
	fail: { path: '/v1/claims/fail/batch'; entry: FailBatchEntry };
}

/** A report's fields besides claim_id and claim_token. */
type ReportFields<Op extends keyof SettleRoutes> = Omit<
	SettleRoutes[Op]['entry'],
	'claim_id' | 'claim_token'
>;

/** One report of the batch route of Op, as the node builds it. */
export type SettleEntry<Op extends keyof SettleRoutes> = Pick<
	SettleRoutes[Op]['entry'],
	'claim_id' | 'claim_token'
> &
	ReportFields<Op>;

/** The body of the batch route of Op, as the node builds it (checked in test/wireContract.test.ts). */
export type SettleBody<Op extends keyof SettleRoutes> = {
	claims: Array<SettleEntry<Op>>;
};

/** One report of an effect's outcome, Complete or Fail. */
export interface SettleOperation<Op extends keyof SettleRoutes> {
	operation: Op;
	/** The batch route: POST /v1/claims/complete/batch or /v1/claims/fail/batch. */
	path: SettleRoutes[Op]['path'];
	/** The item's fields besides claim_id and claim_token; throws for a bad parameter. */
	fields(this: IExecuteFunctions, itemIndex: number): ReportFields<Op>;
}

/**
 * Reports the outcome of every item's effect in ONE request (the settle
 * batch route of `op`), and keeps sending it while the sidecar cannot be
 * reached, answers 5xx, or n8n cannot read the credential from its own
 * database: waits of SETTLE_WAIT_MS doubling up to MAX_WAIT_MS, until the
 * latest deadline of the items (settleDeadline: by default the claims'
 * lease end). Sending again is safe: the same token settles a claim once.
 * The deadline is worked out only when a send fails: Lease Until, often an
 * expression that n8n evaluates in milliseconds, is not read for a report
 * that lands at once.
 * When it gives up, every item fails with unrecordedOutcomeError: the
 * outcome is unknown to the sidecar, and the error says what that means
 * and how to settle it.
 *
 * The effects have already run, so an item whose parameters cannot be sent
 * does not stop the others from being reported: it gets its error, the
 * others are sent, and the router then stops the node at the first error
 * unless it continues on fail. Each answer entry (a record, or a per-item
 * error such as lease lost) goes back to its item, paired by position.
 */
export async function settle<Op extends keyof SettleRoutes>(
	this: IExecuteFunctions,
	op: SettleOperation<Op>,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	const node = runNode.call(this);
	const started = Date.now();
	const retries = new Map<number, SettleRetry>();

	const plan = planBatch(
		node,
		items,
		(itemIndex) => {
			const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
			const fields = op.fields.call(this, itemIndex);
			retries.set(itemIndex, settleRetry.call(this, itemIndex));
			const entry: SettleEntry<Op> = {
				claim_id: claimId,
				claim_token: claimToken,
				...fields,
			};
			return entry;
		},
		false,
		// A shadow copy (shadow mode: answered won, would not have won)
		// holds no claim: nothing to report, the item passes through.
		(itemIndex, item) =>
			isShadowCopy(item.json.idempotency) && !tokenGiven.call(this, itemIndex)
				? { output: 0, json: item.json }
				: undefined,
	);
	if (plan.entries.length === 0) return plan.results;

	// The latest deadline of the sent items, counted from `started`; worked
	// out once, when a send fails.
	let until: number | undefined;
	let untilWhat = '';
	let known = false;
	const deadline = (): number | undefined => {
		if (known) return until;
		known = true;
		for (const itemIndex of plan.places) {
			const retry = retries.get(itemIndex) ?? { until: 'off' };
			const own = settleDeadline.call(this, itemIndex, retry, started);
			if (own.until !== undefined && (until === undefined || own.until > until)) {
				until = own.until;
				untilWhat = own.what;
			}
		}
		return until;
	};
	const keepTrying = plan.places.some((itemIndex) => retries.get(itemIndex)?.until !== 'off');

	const body: SettleBody<Op> = { claims: plan.entries };
	let response: unknown;
	try {
		response = await sidecarRequest.call(this, {
			method: 'POST',
			path: op.path,
			body,
			retry: keepTrying
				? { tries: Number.POSITIVE_INFINITY, waitMs: SETTLE_WAIT_MS, deadline }
				: NO_RETRY,
		});
	} catch (error) {
		if (!retriesExhausted(error)) {
			// Refused as a whole (e.g. the API key): one error, naming no item.
			const batchError = toNodeError(node, error);
			for (const itemIndex of plan.places) plan.results[itemIndex] = { error: batchError };
			return plan.results;
		}
		// Known already when the request kept trying; the error names it.
		if (keepTrying) deadline();
		plan.places.forEach((itemIndex, position) => {
			plan.results[itemIndex] = {
				error: unrecordedOutcomeError(node, error as Error, {
					operation: op.operation,
					claimId: String(plan.entries[position].claim_id),
					itemIndex,
					items: plan.places.length,
					since: started,
					until,
					untilWhat,
				}),
			};
		});
		return plan.results;
	}

	return batchResults(
		node,
		response,
		plan,
		{
			noun: 'reports',
			hint: 'Look the claims up (Lookup) to see whether they were recorded.',
		},
		(entry, itemIndex) => {
			const json = items[itemIndex].json;
			return {
				output: 0,
				json: withIdempotency(json, recordSidecar(json.idempotency, entry as ClaimRecord)),
			};
		},
	);
}
