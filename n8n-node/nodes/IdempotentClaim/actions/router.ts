import type {
	IExecuteFunctions,
	INodeExecutionData,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';
import { NodeOperationError as OperationError } from 'n8n-workflow';

import { nodeParameter, runNode } from '../helpers/parameters';
import { runsAsTool } from '../helpers/toolKey';
import { operations } from './claim';
import { toNodeError } from './common';
import { claimSeparatesOutcomes, outputLayout, type OutputLayout } from './outputs';
import type { ItemResult } from './types';

/*
 * Run as an AI agent's tool (runsAsTool), every item goes to output 0, the
 * only one n8n hands the agent: Claim's outcomes other than won leave by
 * other outputs, so an agent would get nothing for a duplicate, a conflict
 * or a claim in progress, and could not tell them from "no answer". The
 * agent reads the outcome from idempotency.outcome (only "won" lets it
 * perform the action, then Complete it) and idempotency.message. A failed
 * item stops the run, and n8n hands the agent its error message.
 */
export { runsAsTool };

/** " [item N]", as n8n names an item in its own messages (e.g. the Edit Fields node). */
function itemSuffix(itemIndex: number): string {
	return ` [item ${itemIndex}]`;
}

/**
 * Names the item in the message of an item's error, as n8n's own nodes do,
 * unless it does so already. n8n's editor adds it only where it shows the
 * error itself; the message also reaches an error output, the Error
 * Trigger (execution.error.message) and the execution list.
 */
function namingItem<E extends NodeApiError | NodeOperationError>(error: E): E {
	const itemIndex = error.context.itemIndex;
	if (typeof itemIndex !== 'number') return error;
	const suffix = itemSuffix(itemIndex);
	if (!error.message.includes(suffix.trim())) error.message += suffix;
	return error;
}

/**
 * Runs the selected operation over all input items and lays the results out
 * on the node's outputs. Every output item is paired with its input item;
 * an output item made from its input item keeps its binary data. When the
 * node continues on fail, a failed item carries the error and goes to the
 * operation's error output (Claim version 2: its Error output; n8n moves it
 * to its own Error output under "Continue (using error output)"); otherwise
 * the first failure stops the node.
 *
 * Under either Continue setting nothing may escape as a thrown error: n8n
 * answers a node that throws while continuing on fail by passing its INPUT
 * items on through output 0, which for Claim is Won, and the protected node
 * would run unclaimed. So every failure becomes the failed items' result.
 */
export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const node = runNode.call(this);
	const operationName = nodeParameter.call(this, 'operation', 0) as string;
	const operation = operations[operationName];
	const asTool = runsAsTool(node);
	const separate = operationName === 'claim' && claimSeparatesOutcomes.call(this, node.typeVersion);
	const layout: OutputLayout = asTool
		? { count: 1, errorOutput: 0 }
		: outputLayout(operationName, separate, node.typeVersion);
	const outputs: INodeExecutionData[][] = Array.from({ length: layout.count }, () => []);

	let results: ItemResult[];
	try {
		if (operation === undefined) {
			throw new OperationError(node, `Unsupported operation "${operationName}"`);
		}
		results = await operation.execute.call(this, items);
	} catch (error) {
		const nodeError = namingItem(toNodeError(node, error));
		if (!this.continueOnFail()) throw nodeError;
		results = items.map(() => ({ error: nodeError }));
	}

	results.forEach((result, itemIndex) => {
		const pairedItem = { item: itemIndex };
		if ('error' in result) {
			const error = namingItem(result.error);
			if (!this.continueOnFail()) throw error;
			// n8n itself reduces the JSON of an item carrying `error` to
			// { error: message }; `error` is what sends it to the error output.
			outputs[layout.errorOutput].push({ json: { error: error.message }, error, pairedItem });
			return;
		}
		const output = asTool ? 0 : result.output;
		if ('many' in result) {
			for (const json of result.many) outputs[output].push({ json, pairedItem });
			return;
		}
		const item: INodeExecutionData = { json: result.json, pairedItem };
		const binary = items[itemIndex].binary;
		if (binary !== undefined) item.binary = binary;
		outputs[output].push(item);
	});
	return outputs;
}
