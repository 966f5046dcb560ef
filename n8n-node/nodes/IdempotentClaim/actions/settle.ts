import type { IDataObject, IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

import { recordSidecar, withIdempotency } from '../helpers/idempotency';
import { NO_RETRY, retriesExhausted, sidecarRequest } from '../transport';
import { sidecarEntryError, unrecordedOutcomeError } from '../transport/errors';
import type { ClaimRecord, SidecarErrorBody } from '../transport/types';
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

function isErrorEntry(entry: unknown): entry is { error: SidecarErrorBody } {
	return (
		typeof entry === 'object' &&
		entry !== null &&
		typeof (entry as { error?: unknown }).error === 'object' &&
		(entry as { error?: unknown }).error !== null
	);
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
	const results: ItemResult[] = new Array(items.length);
	const claims: IDataObject[] = [];
	const sent: number[] = [];
	let until: number | undefined;
	let untilWhat = '';

	for (let itemIndex = 0; itemIndex < items.length; itemIndex++) {
		try {
			const { claimId, claimToken } = claimIdAndToken.call(this, itemIndex);
			const fields = op.fields.call(this, itemIndex);
			const deadline = settleDeadline.call(this, itemIndex, started);
			if (deadline.until !== undefined && (until === undefined || deadline.until > until)) {
				until = deadline.until;
				untilWhat = deadline.what;
			}
			claims.push({ claim_id: claimId, claim_token: claimToken, ...fields });
			sent.push(itemIndex);
		} catch (error) {
			results[itemIndex] = { error: toNodeError(node, error, itemIndex) };
		}
	}
	if (claims.length === 0) return results;

	let response: { results?: unknown };
	try {
		response = (await sidecarRequest.call(this, {
			method: 'POST',
			path: op.path,
			body: { claims },
			retry:
				until === undefined
					? NO_RETRY
					: { tries: Number.POSITIVE_INFINITY, waitMs: SETTLE_WAIT_MS, deadline: until },
		})) as { results?: unknown };
	} catch (error) {
		const gaveUp = retriesExhausted(error);
		sent.forEach((itemIndex, position) => {
			results[itemIndex] = {
				error: gaveUp
					? unrecordedOutcomeError(node, error as Error, {
							operation: op.operation,
							claimId: String(claims[position].claim_id),
							itemIndex,
							items: sent.length,
							since: started,
							until,
							untilWhat,
						})
					: toNodeError(node, error, itemIndex),
			};
		});
		return results;
	}

	const entries = response?.results;
	if (!Array.isArray(entries) || entries.length !== claims.length) {
		const nodeError = new NodeApiError(
			node,
			{},
			{
				message: 'Unexpected answer from the Idempotent Claim sidecar',
				description: `Sent ${claims.length} reports, received ${
					Array.isArray(entries) ? entries.length : 'no'
				} results. Look the claims up (Lookup) to see whether they were recorded.`,
			},
		);
		for (const itemIndex of sent) results[itemIndex] = { error: nodeError };
		return results;
	}
	entries.forEach((entry: unknown, position) => {
		const itemIndex = sent[position];
		if (isErrorEntry(entry)) {
			results[itemIndex] = { error: sidecarEntryError(node, entry.error, { itemIndex }) };
			return;
		}
		const json = items[itemIndex].json;
		results[itemIndex] = {
			output: 0,
			json: withIdempotency(json, recordSidecar(json.idempotency, entry as ClaimRecord)),
		};
	});
	return results;
}
