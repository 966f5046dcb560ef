import type { INode, INodeExecutionData } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

import { sidecarEntryError } from '../transport/errors';
import type { SidecarErrorBody } from '../transport/types';
import { toNodeError } from './common';
import type { ItemResult } from './types';

/*
 * The batch routes (claim, complete, fail) take {"claims": [...]}, one entry
 * per item, and answer {"results": [...]} in the same order, each entry a
 * record or {"error": {...}} for that item alone. These helpers build the
 * entries from the items, check the answer and hand each entry back to its
 * item, for Claim and for Complete / Fail alike.
 */

/** The entries of one batch request and the items they were built from. */
export interface BatchPlan<T> {
	/** One result per input item; filled for the items whose entry could not be built. */
	results: ItemResult[];
	/** The entries to send, in item order. */
	entries: T[];
	/** The item index of each entry. */
	places: number[];
}

/**
 * Builds the entry of every item. An item whose entry cannot be built gets
 * its error as its result, and the others are still built; with
 * `stopAtFirstError` the first such error is thrown instead, before
 * anything is sent (Claim without continue on fail: no claim is held for
 * the other items of a run that stops).
 */
export function planBatch<T>(
	node: INode,
	items: INodeExecutionData[],
	build: (itemIndex: number, item: INodeExecutionData) => T,
	stopAtFirstError: boolean,
	skip?: (itemIndex: number, item: INodeExecutionData) => ItemResult | undefined,
): BatchPlan<T> {
	const plan: BatchPlan<T> = { results: new Array(items.length), entries: [], places: [] };
	for (let itemIndex = 0; itemIndex < items.length; itemIndex++) {
		// An item with nothing to send (a shadow copy at Complete or Fail)
		// has its result at once.
		const skipped = skip?.(itemIndex, items[itemIndex]);
		if (skipped !== undefined) {
			plan.results[itemIndex] = skipped;
			continue;
		}
		try {
			plan.entries.push(build(itemIndex, items[itemIndex]));
			plan.places.push(itemIndex);
		} catch (error) {
			const nodeError = toNodeError(node, error, itemIndex);
			if (stopAtFirstError) throw nodeError;
			plan.results[itemIndex] = { error: nodeError };
		}
	}
	return plan;
}

function isErrorEntry(entry: unknown): entry is { error: SidecarErrorBody } {
	return (
		typeof entry === 'object' &&
		entry !== null &&
		typeof (entry as { error?: unknown }).error === 'object' &&
		(entry as { error?: unknown }).error !== null
	);
}

/** What was sent, for the error about an answer that does not match it. */
export interface BatchNoun {
	/** "claims" or "reports". */
	noun: string;
	/** Appended to the description, e.g. what to do about the items. */
	hint?: string;
}

/**
 * Hands every entry of the batch answer back to its item: an error entry
 * becomes that item's error (lease lost, not found, invalid field), any
 * other entry goes to `ok`. An answer whose results do not match the
 * entries sent one to one fails every sent item.
 */
export function batchResults<T>(
	node: INode,
	response: unknown,
	plan: BatchPlan<T>,
	what: BatchNoun,
	ok: (entry: Record<string, unknown>, itemIndex: number) => ItemResult,
): ItemResult[] {
	const entries = (response as { results?: unknown } | undefined)?.results;
	if (!Array.isArray(entries) || entries.length !== plan.entries.length) {
		const nodeError = new NodeApiError(
			node,
			{},
			{
				message: 'Unexpected answer from the Idempotent Claim sidecar',
				description: `Sent ${plan.entries.length} ${what.noun}, received ${
					Array.isArray(entries) ? entries.length : 'no'
				} results.${what.hint ? ` ${what.hint}` : ''}`,
			},
		);
		for (const itemIndex of plan.places) plan.results[itemIndex] = { error: nodeError };
		return plan.results;
	}
	entries.forEach((entry: unknown, position) => {
		const itemIndex = plan.places[position];
		plan.results[itemIndex] = isErrorEntry(entry)
			? { error: sidecarEntryError(node, entry.error, { itemIndex }) }
			: ok(entry as Record<string, unknown>, itemIndex);
	});
	return plan.results;
}
