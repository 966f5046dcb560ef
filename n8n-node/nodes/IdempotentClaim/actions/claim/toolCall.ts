import type { IExecuteFunctions, INodeProperties } from 'n8n-workflow';

import { FieldError } from '../../helpers/fields';
import { nodeParameter, runNode } from '../../helpers/parameters';
import {
	TOOL_CALL_KEY_MODE,
	declaredToolArguments,
	refuseAgentChosenKey,
	runsAsTool,
	toolArgumentValues,
	toolCallEventId,
	type KeyParameter,
	type ToolKeyScope,
} from '../../helpers/toolKey';
import { workflowIdOf } from '../../helpers/workflow';
import type { ShowWhen } from '../common';

const show: ShowWhen = { operation: ['claim'], keyMode: [TOOL_CALL_KEY_MODE] };

/** The Claim parameters of Key Mode "Derived From the Tool Call". */
export const toolKeyProperties: INodeProperties[] = [
	{
		displayName:
			"The agent's model cannot choose this key: it is derived from the execution (or chat session), this node's ID and the values of the $fromAI arguments of this node. Give the tool only arguments that name the effect (an order number, an amount), no free text.",
		name: 'toolKeyNotice',
		type: 'notice',
		default: '',
		displayOptions: { show },
	},
	{
		displayName: 'Effect Arguments',
		name: 'effectArguments',
		type: 'fixedCollection',
		placeholder: 'Add Argument',
		typeOptions: { multipleValues: true },
		default: {},
		description:
			"The tool's arguments that name the effect, each a $fromAI() call the agent's model fills. Every $fromAI argument of this node is part of the key; these are where to declare them.",
		displayOptions: { show },
		options: [
			{
				name: 'arguments',
				displayName: 'Argument',
				values: [
					{
						displayName: 'Value',
						name: 'value',
						type: 'string',
						default: '',
						placeholder: "e.g. {{ $fromAI('order_id', 'The order to refund', 'string') }}",
					},
				],
			},
		],
	},
	{
		displayName: 'Key Scope',
		name: 'toolKeyScope',
		type: 'options',
		noDataExpression: true,
		default: 'execution',
		description: 'Where a repeated tool call with the same arguments counts as the same effect',
		options: [
			{
				name: 'This Execution',
				value: 'execution',
				description:
					"Repeats within one execution of the workflow (the agent's retries and re-plans during one chat turn). A new execution, such as the next chat message or a retried execution, may run the effect again.",
			},
			{
				name: 'Every Execution (the Arguments Alone)',
				value: 'node',
				description:
					'Repeats anywhere, in every execution and chat: one effect per set of arguments for this tool node, e.g. one refund per order number. Only where the arguments alone name the effect.',
			},
			{
				name: 'The Chat Session',
				value: 'session',
				description:
					'Repeats within one chat session, across its executions: a resumed or continued conversation does not run the effect again',
			},
		],
		displayOptions: { show },
	},
	{
		displayName: 'Session ID',
		name: 'toolSessionId',
		type: 'string',
		required: true,
		default: '={{ $json.sessionId }}',
		description:
			"The chat session's ID, as the agent's memory keys it: by default the sessionId of the agent's input item (a Chat Trigger's). Must not be a $fromAI argument, and no $fromAI argument may be named like the field it reads.",
		displayOptions: { show: { ...show, toolKeyScope: ['session'] } },
	},
];

/** The key parameters of each key mode that the agent must not fill in a tool run. */
const KEY_PARAMETERS: Record<string, KeyParameter[]> = {
	eventId: [{ name: 'eventId', displayName: 'Event ID' }],
	composite: [{ name: 'keyParts', displayName: 'Key Parts' }],
	hash: [{ name: 'keyFields', displayName: 'Fields to Hash' }],
	[TOOL_CALL_KEY_MODE]: [{ name: 'toolSessionId', displayName: 'Session ID' }],
};

const ALWAYS: KeyParameter[] = [
	{ name: 'source', displayName: 'Source' },
	{ name: 'actionName', displayName: 'Action Name' },
];

/**
 * Checks one Claim's key parameters against the node's run: in a tool run
 * none of them may hold $fromAI (refuseAgentChosenKey); outside one, Key
 * Mode "Derived From the Tool Call" is refused, having no tool call to
 * derive from. Throws a FieldError naming the parameter.
 */
export function checkToolKeyParameters(this: IExecuteFunctions, keyMode: string): void {
	const node = runNode.call(this);
	if (runsAsTool(node)) {
		refuseAgentChosenKey(node, [...ALWAYS, ...(KEY_PARAMETERS[keyMode] ?? [])]);
		return;
	}
	if (keyMode === TOOL_CALL_KEY_MODE) {
		throw new FieldError(
			'Key Mode "Derived From the Tool Call" works only when an AI agent calls this node as a tool',
			'Connect the node to an AI Agent as a tool (Idempotent Claim Tool), or choose another Key Mode.',
		);
	}
}

/** The plain `$json.<field>` (or `$json["<field>"]`) the Session ID reads first, if it is one. */
function sessionField(stored: unknown): string | undefined {
	if (typeof stored !== 'string') return undefined;
	const found = /^=\{\{\s*\$json(?:\.([A-Za-z_$][\w$]*)|\[\s*(["'])([^"'\\]+)\2\s*\])/.exec(stored);
	return found === null ? undefined : (found[1] ?? found[3]);
}

/**
 * The event ID of one item's claim in Key Mode "Derived From the Tool
 * Call" (toolCallEventId): from the workflow, this node's id, the scope
 * (the execution, or the chat session from Session ID) and the values of
 * the node's $fromAI arguments. Throws a FieldError naming what is missing.
 */
export function toolCallKey(
	this: IExecuteFunctions,
	itemIndex: number,
	executionId: string | undefined,
): string {
	const node = runNode.call(this);
	if (typeof node.id !== 'string' || node.id === '') {
		throw new FieldError(
			'This tool node has no node ID to derive the key from',
			'Save the workflow in n8n 1.x or later, which gives every node an ID.',
		);
	}
	const workflow = workflowIdOf(this);
	if (workflow === undefined) {
		throw new FieldError(
			'The workflow has no ID to derive the key from',
			'Save the workflow before running it.',
		);
	}
	const declared = declaredToolArguments(node);
	let scope: ToolKeyScope;
	const scopeName = nodeParameter.call(this, 'toolKeyScope', itemIndex, 'execution') as string;
	if (scopeName === 'session') {
		// The agent's input item and the tool's arguments share one item in
		// a tool run, an argument overriding a field of the same name: an
		// argument named like the session field would let the model choose it.
		const field = sessionField(node.parameters?.toolSessionId ?? '={{ $json.sessionId }}');
		if (field !== undefined && declared.some((argument) => argument.key === field)) {
			throw new FieldError(
				`Session ID reads the field "${field}", which is also a $fromAI argument of this node`,
				"The tool call would set the chat session. Rename the $fromAI argument, or read the session from the trigger, e.g. {{ $('When chat message received').item.json.sessionId }}.",
			);
		}
		const session: unknown = nodeParameter.call(this, 'toolSessionId', itemIndex);
		if (typeof session !== 'string' || session.trim() === '') {
			throw new FieldError(
				`Session ID is empty [item ${itemIndex}]`,
				"Point it at the chat session's ID (a Chat Trigger's sessionId), or choose Key Scope This Execution.",
			);
		}
		scope = { session };
	} else if (scopeName === 'node') {
		scope = {};
	} else if (scopeName === 'execution') {
		if (executionId === undefined) {
			throw new FieldError('This execution has no ID to derive the key from');
		}
		scope = { execution: executionId };
	} else {
		throw new FieldError(
			'Key Scope must be This Execution, The Chat Session or Every Execution (the Arguments Alone)',
		);
	}
	return toolCallEventId({
		workflow,
		node: node.id,
		scope,
		arguments: toolArgumentValues.call(this, declared, itemIndex),
	});
}
