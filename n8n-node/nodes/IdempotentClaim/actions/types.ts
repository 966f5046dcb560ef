import type {
	IDataObject,
	IExecuteFunctions,
	INodeExecutionData,
	INodeProperties,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';

/** What an operation made of one input item: an output item, or its error. */
export type ItemResult =
	| { output: number; json: IDataObject }
	| { error: NodeApiError | NodeOperationError };

/** One operation: its parameters (each scoped to it) and how it runs a batch of items. */
export interface Operation {
	description: INodeProperties[];
	/**
	 * Returns one result per input item, in input order. Throws instead of
	 * returning an error when the node is not set to continue on fail.
	 */
	execute(this: IExecuteFunctions, items: INodeExecutionData[]): Promise<ItemResult[]>;
}
