import type {
	IDataObject,
	INode,
	INodeExecutionData,
	INodeTypes,
	IRunExecutionData,
} from 'n8n-workflow';
import { Workflow } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { claimResult, createContext, requests, run } from './helpers';

/*
 * The derived tool key read through n8n's own expression resolution: the
 * tool's arguments where n8n 2.41 puts them for a tool run (the run data's
 * inputOverride.ai_tool, which $fromAI reads), and evaluateExpression as
 * n8n-core 2.41 implements it (NodeExecutionContext.evaluateExpression:
 * resolveSimpleParameterValue of "=" + the expression).
 */

const nodeType = new IdempotentClaim();
const nodeTypes = {
	getByName: () => nodeType,
	getByNameAndVersion: () => nodeType,
	getKnownTypes: () => ({}),
} as unknown as INodeTypes;

const TOOL_NODE: INode = {
	id: '0d3f6c2a-tool',
	name: 'Claim Refund',
	type: 'n8n-nodes-idempotent-claim.idempotentClaimTool',
	typeVersion: 2,
	position: [0, 0],
	parameters: {
		operation: 'claim',
		source: 'agent-refunds',
		keyMode: 'toolCall',
		effectArguments: {
			arguments: [
				{ value: "={{ $fromAI('order_id', 'The order', 'string') }}" },
				{ value: "={{ $fromAI('amount_cents', 'Cents', 'number') }}" },
				{ value: "={{ $fromAI('lines', 'Order lines', 'json') }}" },
			],
		},
		leaseSeconds: 300,
		options: {},
	},
};

/** The claim the tool sends for one tool call, $fromAI read by n8n from the run data. */
async function claimOf(args: IDataObject, runIndex: number): Promise<IDataObject> {
	const workflow = new Workflow({
		id: 'wf-agent',
		nodes: [TOOL_NODE],
		connections: {},
		active: false,
		nodeTypes,
		settings: { executionOrder: 'v1' },
	});
	const node = workflow.getNode(TOOL_NODE.name) as INode;
	// n8n's AI Agent 3: the tool node's run data holds the call's arguments,
	// and its input item the agent's input item with the arguments and toolCallId.
	const runData = Array.from({ length: runIndex + 1 }, () => ({
		startTime: 0,
		executionTime: 0,
		executionIndex: 0,
		source: [],
		inputOverride: { ai_tool: [[{ json: args }]] },
	}));
	const runExecutionData = {
		resultData: { runData: { [node.name]: runData } },
	} as unknown as IRunExecutionData;
	const items: INodeExecutionData[] = [
		{ json: { chatInput: 'refund it', sessionId: 's-1', ...args, toolCallId: `call_${runIndex}` } },
	];
	const ctx = createContext({
		items,
		params: {
			operation: 'claim',
			source: 'agent-refunds',
			keyMode: 'toolCall',
			toolKeyScope: 'execution',
			eventType: '',
			actionName: '',
			leaseSeconds: 300,
			options: {},
		},
		executionId: 'exec-1',
		runIndex,
	});
	ctx.getNode.mockReturnValue(node);
	ctx.getWorkflow.mockReturnValue({ id: 'wf-agent', name: 'Agent', active: true });
	ctx.evaluateExpression.mockImplementation(
		(expression: string, itemIndex: number) =>
			workflow.expression.resolveSimpleParameterValue(
				`=${expression}`,
				{},
				runExecutionData,
				runIndex,
				itemIndex,
				node.name,
				items,
				'webhook',
				{},
			) as ReturnType<typeof ctx.evaluateExpression>,
	);
	ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
		results: [claimResult('tool', 'won')],
	});
	await run(ctx);
	const [request] = requests(ctx);
	return (request.body as { claims: IDataObject[] }).claims[0];
}

describe('a derived tool key, $fromAI resolved by n8n', () => {
	const args = { order_id: 'ord-1001', amount_cents: 4200, lines: [{ sku: 'a', qty: 2 }] };

	it('reads each argument as the value the model gave (a number stays a number)', async () => {
		const { createHash } = await import('node:crypto');
		const claim = await claimOf(args, 0);
		const canonical =
			'{"arguments":{"amount_cents":4200,"lines":[{"qty":2,"sku":"a"}],"order_id":"ord-1001"},' +
			'"execution":"exec-1","node":"0d3f6c2a-tool","workflow":"wf-agent"}';
		expect(claim.event_id).toBe(`tool:${createHash('sha256').update(canonical).digest('hex')}`);
	});

	it('is the same for a repeated call (next run index, new toolCallId)', async () => {
		const first = await claimOf(args, 0);
		const repeat = await claimOf(
			{ lines: [{ qty: 2, sku: 'a' }], amount_cents: 4200, order_id: 'ord-1001' },
			3,
		);
		expect(repeat.event_id).toBe(first.event_id);
		const other = await claimOf({ ...args, amount_cents: 4300 }, 1);
		expect(other.event_id).not.toBe(first.event_id);
	});
});
