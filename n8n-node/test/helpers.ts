import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestOptions,
	INode,
	INodeExecutionData,
	IWorkflowDataProxyData,
} from 'n8n-workflow';
import { mockDeep, type DeepMockProxy } from 'vitest-mock-extended';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';

export const NODE: INode = {
	id: 'node-1',
	name: 'Idempotent Claim',
	type: 'n8n-nodes-idempotent-claim.idempotentClaim',
	typeVersion: 1,
	position: [0, 0],
	parameters: {},
};

export const BASE_URL = 'http://127.0.0.1:8080';

/** A parameter value, or a function of the item index for per-item values. */
export type ParamValue = unknown | ((itemIndex: number) => unknown);

export interface ContextOptions {
	params: Record<string, ParamValue>;
	items: INodeExecutionData[];
	continueOnFail?: boolean;
	executionId?: string;
	/** The node's run index in the execution ($thisRunIndex); default 0. */
	runIndex?: number;
	baseUrl?: string;
}

export type Context = DeepMockProxy<IExecuteFunctions>;

/**
 * A mocked execute context: parameters come from `params` (a missing one
 * without fallback throws, as n8n does), credentials hold the base URL, and
 * httpRequestWithAuthentication is a mock the test programs.
 */
export function createContext(options: ContextOptions): Context {
	const ctx = mockDeep<IExecuteFunctions>();
	ctx.getInputData.mockReturnValue(options.items);
	ctx.getNode.mockReturnValue(NODE);
	ctx.continueOnFail.mockReturnValue(options.continueOnFail ?? false);
	ctx.getExecutionId.mockReturnValue(options.executionId ?? 'exec-42');
	ctx.getWorkflowDataProxy.mockReturnValue({
		$thisRunIndex: options.runIndex ?? 0,
	} as unknown as IWorkflowDataProxyData);
	ctx.getExecutionCancelSignal.mockReturnValue(undefined);
	ctx.getCredentials.mockResolvedValue({
		baseUrl: options.baseUrl ?? BASE_URL,
		apiKey: 'test-key',
	});
	(
		ctx.getNodeParameter as unknown as { mockImplementation: (fn: unknown) => void }
	).mockImplementation((name: string, itemIndex: number, fallback?: unknown) => {
		if (!Object.prototype.hasOwnProperty.call(options.params, name)) {
			if (fallback !== undefined) return fallback;
			throw new Error(`Parameter "${name}" not set in test`);
		}
		const value = options.params[name];
		return typeof value === 'function' ? (value as (index: number) => unknown)(itemIndex) : value;
	});
	return ctx;
}

/** Runs the node's execute() with the mocked context. */
export async function run(ctx: Context): Promise<INodeExecutionData[][]> {
	return await new IdempotentClaim().execute.call(ctx);
}

/** The request options of every sidecar call, in order. */
export function requests(ctx: Context): IHttpRequestOptions[] {
	return ctx.helpers.httpRequestWithAuthentication.mock.calls.map(
		(call) => call[1] as IHttpRequestOptions,
	);
}

/** Freezes an object graph so that any mutation of input items throws in strict mode. */
export function deepFreeze<T>(value: T): T {
	if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
		Object.freeze(value);
		for (const child of Object.values(value as object)) deepFreeze(child);
	}
	return value;
}

/** Webhook-shaped items with one event each; headers differ per delivery. */
export function webhookItems(ids: string[]): INodeExecutionData[] {
	return ids.map((id, index) => ({
		json: {
			headers: { 'x-delivery-attempt': String(index + 1), 'stripe-signature': `t=${index},v1=abc` },
			body: { id, type: 'invoice.paid', data: { object: { id: `in_${id}`, amount: 100 + index } } },
		} as IDataObject,
	}));
}

/** A claim result as the sidecar answers it for one event. */
export function claimResult(
	eventId: string,
	outcome: string,
	extra: IDataObject = {},
): IDataObject {
	return {
		outcome,
		claim_id: `claim-${eventId}`,
		idempotency_key: `stripe:${eventId}`,
		source: 'stripe',
		event_id: eventId,
		action: '',
		attempt: 1,
		state: outcome === 'won' ? 'processing' : 'completed',
		payload_hash: 'ab'.repeat(32),
		// As claimd: an open record's earliest date, a finished one's exact date.
		key_expires_at: outcome === 'won' ? '2028-01-10T12:00:00Z' : '2028-01-09T12:00:00Z',
		key_expiry: outcome === 'won' ? 'not_before' : 'fixed',
		...(outcome === 'won'
			? { claim_token: `token-${eventId}`, lease_until: '2030-01-01T00:00:00Z' }
			: {}),
		...extra,
	};
}

/** Parameters of a Claim with the provider event ID taken from each item's body. */
export function claimParams(
	items: INodeExecutionData[],
	overrides: Record<string, ParamValue> = {},
): Record<string, ParamValue> {
	return {
		operation: 'claim',
		source: 'stripe',
		keyMode: 'eventId',
		eventId: (index: number) => (items[index].json.body as IDataObject).id,
		eventType: '',
		actionName: '',
		payloadMode: 'fields',
		payloadFields: 'body',
		leaseSeconds: 300,
		separateConflictOutputs: false,
		options: {},
		...overrides,
	};
}

/** An error shaped like the HTTP client's (axios) error for a failed request. */
export class AxiosError extends Error {
	constructor(
		message: string,
		readonly code?: string,
		readonly response?: { status: number; data?: unknown },
		readonly config?: IDataObject,
	) {
		super(message);
		this.name = 'AxiosError';
	}

	get status(): number | undefined {
		return this.response?.status;
	}
}
