import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

import { recordSidecar, withIdempotency } from '../helpers/idempotency';
import { NO_RETRY, retriesExhausted, sidecarRequest } from '../transport';
import { unrecordedOutcomeError } from '../transport/errors';
import type { ClaimRecord } from '../transport/types';
import { batchResults, planBatch } from './batch';
import { SETTLE_WAIT_MS, claimIdAndToken, settleDeadline, toNodeError } from './common';
import type { ItemResult } from './types';

/** One report of an effect's outcome, Complete or Fail. */
export interface SettleOperation {
	operation: 'complete' | 'fail';
	/** The batch route: POST /v1/claims/complete/batch or /v1/claims/fail/batch. */
	path: string;
	/** The item's fields besides claim_id and claim_token; throws for a bad parameter. */
	fields(this: IExecuteFunctions, itemIndex: number): IDataObject;
}

/**
 * Reports the outcome of every item's effect in ONE request (the settle
 * batch route of `op`), and keeps sending it while the sidecar cannot be
 * reached, answers 5xx, or n8n cannot read the credential from its own
 * database: waits of SETTLE_WAIT_MS doubling up to MAX_WAIT_MS, until the
 * latest deadline of the items (settleDeadline: by default the claims'
 * lease end). Sending again is safe: the same token settles a claim once.
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
export async function settle(
	this: IExecuteFunctions,
	op: SettleOperation,
	items: INodeExecutionData[],
): Promise<ItemResult[]> {
	const node = this.getNode();
	const started = Date.now();
	let until: number | undefined;
	let untilWhat = '';

	const plan = planBatch<IDataObject>(
		node,
		items,
		(itemIndex) => {
			const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
			const fields = op.fields.call(this, itemIndex);
			const deadline = settleDeadline.call(this, itemIndex, started);
			if (deadline.until !== undefined && (until === undefined || deadline.until > until)) {
				until = deadline.until;
				untilWhat = deadline.what;
			}
			return { claim_id: claimId, claim_token: claimToken, ...fields };
		},
		false,
	);
	if (plan.entries.length === 0) return plan.results;

	let response: unknown;
	try {
		response = await sidecarRequest.call(this, {
			method: 'POST',
			path: op.path,
			body: { claims: plan.entries },
			retry:
				until === undefined
					? NO_RETRY
					: { tries: Number.POSITIVE_INFINITY, waitMs: SETTLE_WAIT_MS, deadline: until },
		});
	} catch (error) {
		if (!retriesExhausted(error)) {
			// Refused as a whole (e.g. the API key): one error, naming no item.
			const batchError = toNodeError(node, error);
			for (const itemIndex of plan.places) plan.results[itemIndex] = { error: batchError };
			return plan.results;
		}
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
