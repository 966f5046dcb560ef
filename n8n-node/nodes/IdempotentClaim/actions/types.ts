import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';

/**
 * What an operation made of one input item: an output item, several (Get
 * Many, and Fail for all claims of an execution: one per record, none when
 * there is no record), or its error.
 */
export type ItemResult =
	| { output: number; json: IDataObject }
	| { output: number; many: IDataObject[] }
	| { error: NodeApiError | NodeOperationError };

/** One operation: its parameters (each scoped to it) and how it runs a batch of items. */
export interface Operation {
	description: INodeProperties[];
	/**
	 * Returns one result per input item, in input order. An item's failure
	 * is its result (the router then stops at the first one unless the node
	 * continues on fail), or is thrown at once when nothing else may happen
	 * first (e.g. Claim: no claim is sent after a bad item).
	 */
	execute(this: IExecuteFunctions, items: INodeExecutionData[]): Promise<ItemResult[]>;
}
