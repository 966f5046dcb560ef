import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { operations } from './claim';
import { toNodeError } from './common';
import { outputLayout, separatesOutcomes } from './outputs';
import type { ItemResult } from './types';

/**
 * Runs the selected operation over all input items and lays the results out
 * on the node's outputs. Every output item is paired with its input item and
 * keeps its binary data. When the node continues on fail, a failed item carries
 * the error and goes to the operation's error output (Claim version 2: its
 * Error output; n8n moves it to its own Error output under "Continue (using
 * error output)"); otherwise the first failure stops the node.
 *
 * Under either Continue setting nothing may escape as a thrown error: n8n
 * answers a node that throws while continuing on fail by passing its INPUT
 * items on through output 0, which for Claim is Won, and the protected node
 * would run unclaimed. So every failure becomes the failed items' result.
 */
export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const operationName = this.getNodeParameter('operation', 0) as string;
	const operation = operations[operationName];
	const separate =
		operationName === 'claim' &&
		separatesOutcomes(
			this.getNode().typeVersion,
			this.getNodeParameter('separateConflictOutputs', 0, false),
		);
	const layout = outputLayout(operationName, separate, this.getNode().typeVersion);
	const outputs: INodeExecutionData[][] = Array.from({ length: layout.count }, () => []);

	let results: ItemResult[];
	try {
		if (operation === undefined) {
			throw new NodeOperationError(this.getNode(), `Unsupported operation "${operationName}"`);
		}
		results = await operation.execute.call(this, items);
	} catch (error) {
		const nodeError = toNodeError(this.getNode(), error);
		if (!this.continueOnFail()) throw nodeError;
		results = items.map(() => ({ error: nodeError }));
	}

	results.forEach((result, itemIndex) => {
		const input = items[itemIndex];
		const pairedItem = { item: itemIndex };
		if ('error' in result) {
			if (!this.continueOnFail()) throw result.error;
			// n8n itself reduces the JSON of an item carrying `error` to
			// { error: message }; `error` is what sends it to the error output.
			outputs[layout.errorOutput].push({
				json: { error: result.error.message },
				error: result.error,
				pairedItem,
			});
			return;
		}
		const output: INodeExecutionData = { json: result.json, pairedItem };
		if (input.binary !== undefined) output.binary = input.binary;
		outputs[result.output].push(output);
	});
	return outputs;
}
