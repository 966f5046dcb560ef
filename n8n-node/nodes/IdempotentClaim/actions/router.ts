import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { operations } from './claim';
import { outputLayout } from './outputs';

/**
 * Runs the selected operation over all input items and lays the results out
 * on the node's outputs. Every output item is paired with its input item and
 * keeps its binary data. When the node continues on fail, a failed item carries
 * the error and goes to the operation's error output (n8n moves it to the
 * Error output under "Continue (using error output)"); otherwise the first
 * failure stops the node.
 */
export async function router(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
	const items = this.getInputData();
	const operationName = this.getNodeParameter('operation', 0) as string;
	const operation = operations[operationName];
	if (operation === undefined) {
		throw new NodeOperationError(this.getNode(), `Unsupported operation "${operationName}"`);
	}
	const separate =
		operationName === 'claim' &&
		this.getNodeParameter('separateConflictOutputs', 0, false) === true;
	const layout = outputLayout(operationName, separate);
	const outputs: INodeExecutionData[][] = Array.from({ length: layout.count }, () => []);

	const results = await operation.execute.call(this, items);

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
