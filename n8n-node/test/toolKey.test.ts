import { createHash } from 'node:crypto';

import type { IDataObject, INode, INodeExecutionData } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { canonicalJson } from '../nodes/IdempotentClaim/helpers/canonicalJson';
import { toolCallEventId, toolMessage } from '../nodes/IdempotentClaim/helpers/toolKey';
import { NODE, claimResult, createContext, requests, run, type ParamValue } from './helpers';

describe('canonical JSON (RFC 8785)', () => {
	it('writes the RFC 8785 section 3.2.2 sample as the RFC does', () => {
		const input = JSON.parse(
			'{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
				' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",' +
				' "literals": [null, true, false]}',
		) as unknown;
		expect(canonicalJson(input)).toBe(
			'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
				'"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
		);
	});

	it('sorts members by UTF-16 code units (section 3.2.3)', () => {
		const names = ['\u20ac', '\r', '\ufb33', '1', '\ud83d\ude00', '\u0080', '\u00f6'];
		const value = Object.fromEntries(names.map((name, index) => [name, index]));
		const order = ['\r', '1', '\u0080', '\u00f6', '\u20ac', '\ud83d\ude00', '\ufb33'];
		const members = order.map((name) => `${JSON.stringify(name)}:${names.indexOf(name)}`);
		expect(canonicalJson(value)).toBe(`{${members.join(',')}}`);
	});

	it('writes -0 as 0 and nests without whitespace', () => {
		expect(canonicalJson({ b: [-0, { d: 1, c: 'x' }], a: null })).toBe(
			'{"a":null,"b":[0,{"c":"x","d":1}]}',
		);
	});

	it.each([
		['NaN', { a: NaN }, '$.a is NaN'],
		['Infinity', [1, Infinity], '$.1 is Infinity'],
		['undefined', { a: { b: undefined } }, '$.a.b is undefined'],
		['a lone surrogate', { a: 'x\ud800' }, '$.a holds a lone UTF-16 surrogate'],
		['a Date', { when: new Date(0) }, '$.when is not a plain JSON object'],
		['a bigint', { n: BigInt(1) }, '$.n is bigint'],
	])('refuses %s, naming its place', (_name, value, message) => {
		expect(() => canonicalJson(value)).toThrow(message);
	});
});

/** The node as an AI agent's tool, with a derived key over order_id and amount. */
function toolNode(overrides: Partial<INode> = {}, parameters: IDataObject = {}): INode {
	return {
		...NODE,
		id: 'a4c1e0f2-tool-node',
		name: 'Refund Order',
		type: 'n8n-nodes-idempotent-claim.idempotentClaimTool',
		typeVersion: 2,
		parameters: {
			operation: 'claim',
			source: 'agent',
			keyMode: 'toolCall',
			effectArguments: {
				arguments: [
					{ value: "={{ $fromAI('order_id', 'The order to refund', 'string') }}" },
					{ value: "={{ $fromAI('amount', 'Amount in cents', 'number', 0) }}" },
				],
			},
			...parameters,
		},
		...overrides,
	};
}

interface ToolCall {
	/** The tool's arguments as the model gave them ($fromAI values). */
	args: IDataObject;
	/** What n8n adds to the tool's input item: toolCallId and the agent's input item. */
	extra?: IDataObject;
}

const PARAMS: Record<string, ParamValue> = {
	operation: 'claim',
	source: 'agent',
	keyMode: 'toolCall',
	toolKeyScope: 'execution',
	toolSessionId: '',
	eventType: '',
	actionName: '',
	leaseSeconds: 300,
	options: {},
};

/**
 * Runs the tool once per call (one item each, as n8n's AI Agent does) and
 * returns the claim requests sent. $fromAI reads each call's arguments.
 */
async function claimsFor(
	calls: ToolCall[],
	setup: { node?: INode; executionId?: string; params?: Record<string, ParamValue> } = {},
): Promise<IDataObject[]> {
	const sent: IDataObject[] = [];
	for (const [runIndex, call] of calls.entries()) {
		const items: INodeExecutionData[] = [
			{
				json: {
					sessionId: 'chat-1',
					action: 'sendMessage',
					chatInput: 'Please refund my order',
					...call.args,
					toolCallId: `call_${runIndex}`,
					...call.extra,
				},
			},
		];
		const ctx = createContext({
			items,
			params: { ...PARAMS, ...setup.params },
			executionId: setup.executionId ?? 'exec-7',
			runIndex,
		});
		ctx.getNode.mockReturnValue(setup.node ?? toolNode());
		ctx.getWorkflow.mockReturnValue({ id: 'wf-agent', name: 'Agent', active: true });
		// As n8n's: the expression without its "=", which n8n adds.
		ctx.evaluateExpression.mockImplementation((expression: string) => {
			const name = /^\{\{ \$fromAI\("([\w-]+)"\) \}\}$/.exec(expression)?.[1];
			if (name === undefined) throw new Error(`unexpected expression ${expression}`);
			return call.args[name] as ReturnType<typeof ctx.evaluateExpression>;
		});
		ctx.helpers.httpRequestWithAuthentication.mockImplementation(async (_type, options) => {
			const claims = (options.body as { claims: IDataObject[] }).claims;
			return { results: claims.map((claim) => claimResult(String(claim.event_id), 'won')) };
		});
		await run(ctx);
		for (const request of requests(ctx)) {
			sent.push(...(request.body as { claims: IDataObject[] }).claims);
		}
	}
	return sent;
}

async function eventIdsFor(
	calls: ToolCall[],
	setup?: Parameters<typeof claimsFor>[1],
): Promise<string[]> {
	return (await claimsFor(calls, setup)).map((claim) => String(claim.event_id));
}

describe('Key Mode "Derived From the Tool Call"', () => {
	const refund = { order_id: 'ord-1001', amount: 4200 };

	it('is "tool:" and the SHA-256 of the canonical JSON of workflow, node, execution and arguments', async () => {
		const [eventId] = await eventIdsFor([{ args: refund }]);
		const canonical =
			'{"arguments":{"amount":4200,"order_id":"ord-1001"},"execution":"exec-7",' +
			'"node":"a4c1e0f2-tool-node","workflow":"wf-agent"}';
		expect(eventId).toBe(`tool:${createHash('sha256').update(canonical).digest('hex')}`);
		expect(eventId).toMatch(/^tool:[0-9a-f]{64}$/);
	});

	it('is the same for a repeated call: new toolCallId, run index, chat wording or extra arguments', async () => {
		const ids = await eventIdsFor([
			{ args: refund },
			{ args: { amount: 4200, order_id: 'ord-1001' } },
			{ args: refund, extra: { chatInput: 'I said: refund it!', action: 'loadPreviousSession' } },
			{ args: { ...refund, reason: 'made up by the model' } },
		]);
		expect(new Set(ids).size).toBe(1);
	});

	it('differs when an argument differs', async () => {
		const ids = await eventIdsFor([
			{ args: refund },
			{ args: { ...refund, order_id: 'ord-1002' } },
			{ args: { ...refund, amount: 4300 } },
			{ args: { ...refund, amount: '4200' } },
		]);
		expect(new Set(ids).size).toBe(4);
	});

	it('differs by tool node (id, not name) and by execution', async () => {
		const [base] = await eventIdsFor([{ args: refund }]);
		const [otherNode] = await eventIdsFor([{ args: refund }], {
			node: toolNode({ id: 'b7d2-other-tool-node' }),
		});
		const [renamed] = await eventIdsFor([{ args: refund }], {
			node: toolNode({ name: 'Refund Order (renamed)' }),
		});
		const [otherExecution] = await eventIdsFor([{ args: refund }], { executionId: 'exec-8' });
		expect(renamed).toBe(base);
		expect(new Set([base, otherNode, otherExecution]).size).toBe(3);
	});

	it('with Key Scope The Chat Session, is the same across executions of one session', async () => {
		// Session ID at its default, {{ $json.sessionId }}: the agent's input item's.
		const node = toolNode({}, { toolKeyScope: 'session', toolSessionId: '={{ $json.sessionId }}' });
		const setup = (executionId: string) => ({
			node,
			executionId,
			params: { toolKeyScope: 'session' },
		});
		const [first] = await eventIdsFor([{ args: refund }], setup('exec-1'));
		const [resumed] = await eventIdsFor([{ args: refund }], setup('exec-2'));
		const [otherChat] = await eventIdsFor(
			[{ args: refund, extra: { sessionId: 'chat-2' } }],
			setup('exec-1'),
		);
		const [executionScope] = await eventIdsFor([{ args: refund }], { executionId: 'exec-1' });
		expect(resumed).toBe(first);
		expect(new Set([first, otherChat, executionScope]).size).toBe(3);
	});

	it('with Key Scope Every Execution, is the same across executions and sessions', async () => {
		const node = toolNode({}, { toolKeyScope: 'node' });
		const setup = (executionId: string) => ({
			node,
			executionId,
			params: { toolKeyScope: 'node' },
		});
		const [first] = await eventIdsFor([{ args: refund }], setup('exec-1'));
		const [later] = await eventIdsFor(
			[{ args: refund, extra: { sessionId: 'chat-2' } }],
			setup('exec-9'),
		);
		const [otherOrder] = await eventIdsFor(
			[{ args: { ...refund, order_id: 'ord-1002' } }],
			setup('exec-1'),
		);
		const canonical =
			'{"arguments":{"amount":4200,"order_id":"ord-1001"},"node":"a4c1e0f2-tool-node","workflow":"wf-agent"}';
		expect(first).toBe(`tool:${createHash('sha256').update(canonical).digest('hex')}`);
		expect(later).toBe(first);
		expect(otherOrder).not.toBe(first);
	});

	it('takes a left-out argument as its $fromAI default, else null', async () => {
		const [omitted, explicit] = await eventIdsFor([
			{ args: { order_id: 'ord-1001' } },
			{ args: { order_id: 'ord-1001', amount: 0 } },
		]);
		expect(omitted).toBe(explicit);
		const expected = toolCallEventId({
			workflow: 'wf-agent',
			node: 'a4c1e0f2-tool-node',
			scope: { execution: 'exec-7' },
			arguments: { order_id: null },
		});
		const node = toolNode(
			{},
			{ effectArguments: { arguments: [{ value: "={{ $fromAI('order_id') }}" }] } },
		);
		const [noOrder] = await eventIdsFor([{ args: {} }], { node });
		expect(noOrder).toBe(expected);
	});

	it('counts a $fromAI argument outside Effect Arguments too (Event Type)', async () => {
		const node = toolNode({}, { eventType: "={{ $fromAI('kind') }}" });
		const ids = await eventIdsFor(
			[{ args: { ...refund, kind: 'refund' } }, { args: { ...refund, kind: 'refund.partial' } }],
			{ node },
		);
		expect(new Set(ids).size).toBe(2);
	});

	it('sends no payload and names no payload fields', async () => {
		const [claim] = await claimsFor([{ args: refund }], {
			params: { payloadMode: 'fields', payloadFields: 'body' },
		});
		expect(claim.payload).toBeUndefined();
		expect(claim.source).toBe('agent');
	});

	it('is refused when the node does not run as a tool', async () => {
		const node = { ...toolNode(), type: 'n8n-nodes-idempotent-claim.idempotentClaim' };
		await expect(claimsFor([{ args: refund }], { node })).rejects.toThrow(
			'Key Mode "Derived From the Tool Call" works only when an AI agent calls this node as a tool [item 0]',
		);
	});

	it('refuses a session field that is also a tool argument', async () => {
		const node = toolNode(
			{},
			{
				toolKeyScope: 'session',
				toolSessionId: '={{ $json.sessionId }}',
				effectArguments: { arguments: [{ value: "={{ $fromAI('sessionId') }}" }] },
			},
		);
		await expect(
			claimsFor([{ args: { sessionId: 'made-up' } }], {
				node,
				params: { toolKeyScope: 'session', toolSessionId: 'made-up' },
			}),
		).rejects.toThrow('Session ID reads the field "sessionId", which is also a $fromAI argument');
	});

	it('refuses an empty session', async () => {
		const node = toolNode({}, { toolKeyScope: 'session', toolSessionId: '={{ $json.sessionId }}' });
		await expect(
			claimsFor([{ args: refund, extra: { sessionId: ' ' } }], {
				node,
				params: { toolKeyScope: 'session' },
			}),
		).rejects.toThrow('Session ID is empty [item 0]');
	});
});

describe('a tool run refuses a key the agent fills ($fromAI)', () => {
	it.each([
		['Event ID', { keyMode: 'eventId', eventId: "={{ $fromAI('event_id') }}" }],
		[
			'Key Parts',
			{ keyMode: 'composite', keyParts: { parts: [{ value: "={{ $fromai('order') }}" }] } },
		],
		['Fields to Hash', { keyMode: 'hash', keyFields: "={{ $fromAI('fields') }}" }],
		['Source', { source: "={{ $fromAI('source') }}" }],
		['Action Name', { actionName: "={{ 'refund-' + $fromAI ('kind') }}" }],
		['Session ID', { toolKeyScope: 'session', toolSessionId: "={{ $fromAI('session') }}" }],
	])('%s', async (label, parameters) => {
		const node = toolNode({}, parameters);
		const ctx = createContext({
			items: [{ json: { toolCallId: 'call_1' } }],
			params: {
				...PARAMS,
				...parameters,
				eventId: 'x',
				keyParts: { parts: [{ value: 'x' }] },
				keyFields: 'x',
			},
		});
		ctx.getNode.mockReturnValue(node);
		const error = await run(ctx).then(
			() => undefined,
			(thrown: unknown) => thrown as Error & { description?: string },
		);
		expect(error?.message).toBe(
			`${label} must not be filled by the AI agent ($fromAI) when the node runs as a tool [item 0]`,
		);
		expect(error?.description).toContain('Derived From the Tool Call');
		expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('leaves a regular node with $fromAI text alone', async () => {
		const items = [{ json: { id: 'evt_1' } }];
		const ctx = createContext({
			items,
			params: { ...PARAMS, keyMode: 'eventId', eventId: 'evt_1', payloadMode: 'none' },
		});
		ctx.getNode.mockReturnValue({
			...NODE,
			typeVersion: 2,
			parameters: { eventId: "={{ $fromAI('x') }}" },
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		const outputs = await run(ctx);
		expect((outputs[0][0].json.idempotency as IDataObject).message).toBeUndefined();
	});
});

describe('what the agent reads from the tool', () => {
	async function toolOutcome(result: IDataObject): Promise<IDataObject> {
		const ctx = createContext({
			items: [{ json: { order_id: 'ord-1001', amount: 4200, toolCallId: 'call_2' } }],
			params: PARAMS,
		});
		ctx.getNode.mockReturnValue(toolNode());
		ctx.getWorkflow.mockReturnValue({ id: 'wf-agent', name: 'Agent', active: true });
		ctx.evaluateExpression.mockReturnValue('ord-1001');
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({ results: [result] });
		const outputs = await run(ctx);
		expect(outputs).toHaveLength(1);
		return outputs[0][0].json.idempotency as IDataObject;
	}

	it('a duplicate says it is already done and carries the stored result reference', async () => {
		const idempotency = await toolOutcome(
			claimResult('tool:x', 'duplicate', { result_ref: 'refund-77' }),
		);
		expect(idempotency.outcome).toBe('duplicate');
		expect(idempotency.result_ref).toBe('refund-77');
		expect(idempotency.message).toBe(
			'Already done; result_ref refund-77. This effect was completed earlier: do not perform it again, use this result.',
		);
	});

	it('a duplicate without a result reference still says already done', async () => {
		const idempotency = await toolOutcome(claimResult('tool:x', 'duplicate'));
		expect(idempotency.message).toMatch(/^Already done: .*no result reference/);
	});

	it('a won claim says to perform the effect once and complete it', async () => {
		const idempotency = await toolOutcome(claimResult('tool:x', 'won'));
		expect(idempotency.claim_token).toBe('token-tool:x');
		expect(idempotency.message).toMatch(/^Claimed: perform the effect now, once/);
	});

	it.each(['in_progress', 'retry_later', 'unknown', 'dead_lettered', 'stale', 'conflict', 'other'])(
		'%s says not to perform it',
		(outcome) => {
			expect(toolMessage({ outcome })).toMatch(/Do not perform (it|the effect)/);
		},
	);
});
