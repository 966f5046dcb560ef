import { createHash } from 'node:crypto';

import {
	traverseNodeParameters,
	type FromAIArgument,
	type IDataObject,
	type IExecuteFunctions,
	type INode,
	type INodeParameters,
} from 'n8n-workflow';

import { CanonicalJsonError, canonicalJson } from './canonicalJson';
import { FieldError } from './fields';

/*
 * Keys an AI agent cannot change.
 *
 * n8n's AI Agent calls this node as a tool (idempotentClaimTool) with the
 * arguments its model chose: every $fromAI('name', …) in the node's
 * parameters is one argument of the tool's schema, and n8n fills it from
 * the model's tool call. A model repeats a call (a retry, a re-plan after
 * an error, a resumed conversation), and a model asked to "try again" may
 * make up a new event ID. So in a tool run the key must not be the
 * model's to choose:
 *
 * - No parameter that names the claim (Source, Event ID, Key Parts, Fields
 *   to Hash, Action Name, Session ID) may hold $fromAI: refused, naming
 *   the parameter (toolKeyRefusals).
 * - Key Mode "Derived From the Tool Call" makes the event ID the node's:
 *   "tool:" and the SHA-256 (hex) of the RFC 8785 canonical JSON of
 *     {"arguments": {<name>: <value> for every $fromAI argument of the
 *                    node's parameters},
 *      "node": <the tool node's id>,
 *      "workflow": <the workflow's id>,
 *      "execution": <the execution's id>}      (scope: this execution)
 *   or with "session": <the chat session's ID> in place of "execution"
 *   (scope: the chat session), or with neither (scope: every execution,
 *   the arguments alone).
 *
 * The arguments are the values the model gave the tool's declared
 * arguments, as the node's own $fromAI expressions read them (an argument
 * the model left out is its $fromAI default, else null). Nothing else of
 * the tool's input item is in the key: not n8n's toolCallId (new on every
 * call), not the agent's input item (a chat trigger's chatInput, sessionId,
 * action: a re-worded chat message is the same effect), not an argument
 * the model adds beyond the schema. So the same call with the same
 * arguments is the same key whatever its tool-call id and run index, and
 * two calls that differ in any argument the model fills have different
 * keys: an argument that does not name the effect (a free-text note) must
 * therefore not be one of the tool's $fromAI arguments. The node's id (not
 * its name, which a rename changes) keeps two tool nodes of one workflow
 * apart; the execution or session keeps two chats apart.
 */

/**
 * Whether the node runs as an AI agent's tool. n8n offers a node marked
 * usableAsTool to agents as a second node type, named after it with "Tool"
 * appended (idempotentClaimTool), whose only output is the tool connection;
 * it then runs this same execute() and hands the agent the JSON of the
 * items of the FIRST output only (nodes-as-tools in n8n-core: result[0]).
 * With n8n's AI Agent version 3 the tool node runs as a node of the
 * execution (isToolExecution() is false there); with the LangChain path
 * (supplyData) inside the agent. Both run this type.
 */
export function runsAsTool(node: INode): boolean {
	return /(^|\.)idempotentClaimTool$/.test(node.type);
}

/** The key mode whose event ID the node derives from the tool call. */
export const TOOL_CALL_KEY_MODE = 'toolCall';

/** A parameter that must not hold $fromAI in a tool run: its stored name and display name. */
export interface KeyParameter {
	name: string;
	displayName: string;
}

/** Any mention of $fromAI, as n8n finds it (any case; $fromai is the same function). */
const FROM_AI = /\$fromai\b/i;

function mentionsFromAi(stored: unknown): boolean {
	if (typeof stored === 'string') return FROM_AI.test(stored);
	if (Array.isArray(stored)) return stored.some(mentionsFromAi);
	if (typeof stored === 'object' && stored !== null) {
		return Object.values(stored).some(mentionsFromAi);
	}
	return false;
}

/**
 * Refuses, in a tool run, a parameter among `parameters` whose stored
 * value mentions $fromAI: the agent's model would choose the key, and
 * could dodge deduplication with a new one. Throws a FieldError naming the
 * parameter; its value is not repeated.
 */
export function refuseAgentChosenKey(node: INode, parameters: readonly KeyParameter[]): void {
	const stored: INodeParameters = node.parameters ?? {};
	for (const parameter of parameters) {
		if (!Object.prototype.hasOwnProperty.call(stored, parameter.name)) continue;
		if (!mentionsFromAi(stored[parameter.name])) continue;
		throw new FieldError(
			`${parameter.displayName} must not be filled by the AI agent ($fromAI) when the node runs as a tool`,
			`The agent's model would choose the idempotency key, and a repeated call with a new ${parameter.displayName} would run the effect again. Use Key Mode "Derived From the Tool Call", which derives the key from the execution, this node and the tool's arguments, and put the $fromAI arguments that name the effect under Effect Arguments.`,
		);
	}
}

/**
 * The $fromAI arguments declared in the node's parameters, once each by
 * name (n8n refuses one name declared twice with different types), in
 * name order.
 */
export function declaredToolArguments(node: INode): FromAIArgument[] {
	if (typeof traverseNodeParameters !== 'function') {
		throw new FieldError(
			'Key Mode "Derived From the Tool Call" needs n8n 1.x or later with $fromAI support',
		);
	}
	const found: FromAIArgument[] = [];
	let readable = true;
	try {
		traverseNodeParameters(node.parameters ?? {}, found);
	} catch {
		readable = false;
	}
	if (!readable) {
		throw new FieldError(
			'A $fromAI() call of this node cannot be read',
			'Correct the $fromAI() expressions of this node; n8n cannot offer the tool to the agent either.',
		);
	}
	const byName = new Map<string, FromAIArgument>();
	for (const argument of found) if (!byName.has(argument.key)) byName.set(argument.key, argument);
	return [...byName.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** Argument names n8n allows in $fromAI: safe to place inside an expression. */
const ARGUMENT_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * The values of the tool's arguments for one item, by name: each read as
 * the node's own $fromAI expressions read it (from the tool call n8n hands
 * the node), an argument the model left out as its declared default, else
 * null.
 */
export function toolArgumentValues(
	this: Pick<IExecuteFunctions, 'evaluateExpression'>,
	declared: readonly FromAIArgument[],
	itemIndex: number,
): IDataObject {
	const values: IDataObject = {};
	for (const argument of declared) {
		if (!ARGUMENT_NAME.test(argument.key)) {
			throw new FieldError(
				'A $fromAI() argument of this node has an invalid name',
				'n8n takes 1 to 64 letters, digits, underscores and hyphens.',
			);
		}
		// evaluateExpression adds the "=" that marks an expression.
		const value: unknown = this.evaluateExpression(`{{ $fromAI("${argument.key}") }}`, itemIndex);
		values[argument.key] = (value ?? argument.defaultValue ?? null) as IDataObject[string];
	}
	return values;
}

/**
 * Where a derived key holds: one execution, one chat session, or every
 * execution of the workflow ({}: the tool node and arguments alone).
 */
export type ToolKeyScope = { execution: string } | { session: string } | Record<string, never>;

/** What a derived event ID is made of. */
export interface ToolKeyInput {
	/** The workflow's id. */
	workflow: string;
	/** The tool node's id (getNode().id), not its name. */
	node: string;
	scope: ToolKeyScope;
	/** The tool's argument values by name (toolArgumentValues). */
	arguments: IDataObject;
}

/**
 * The event ID of a tool call: "tool:" and 64 lowercase hex digits, the
 * SHA-256 of the RFC 8785 canonical JSON of {arguments, node, workflow}
 * with execution or session (see the top of this file). Throws a
 * FieldError naming the argument whose value is no JSON value.
 */
export function toolCallEventId(input: ToolKeyInput): string {
	const key = {
		arguments: input.arguments,
		node: input.node,
		workflow: input.workflow,
		...input.scope,
	};
	let text: string | undefined;
	let badPath = '';
	try {
		text = canonicalJson(key);
	} catch (error) {
		// Only an argument can be no JSON value: the rest is text.
		if (error instanceof CanonicalJsonError) badPath = error.path;
	}
	if (text === undefined) {
		const name = badPath.split('.')[2];
		throw new FieldError(
			`Tool argument ${name === undefined ? '' : `"${name}" `}is not a JSON value the key can be made of`,
			'A tool argument must be text, a number, true or false, null, or a list or object of these.',
		);
	}
	return `tool:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
}

function refText(value: unknown): string | undefined {
	return typeof value === 'string' && value !== '' ? value : undefined;
}

/**
 * One plain sentence for the agent's model about a claim's outcome, set as
 * idempotency.message in a tool run: the model reads the tool's output as
 * JSON and acts on it. A duplicate says the effect is already done and
 * carries its result reference (what Complete recorded), so the agent can
 * go on with it instead of doing the effect again.
 */
export function toolMessage(idempotency: IDataObject): string {
	const ref = refText(idempotency.result_ref);
	switch (idempotency.outcome) {
		case 'won':
			return 'Claimed: perform the effect now, once; then record it as completed with this claim_id and claim_token and its result reference.';
		case 'duplicate':
			return ref === undefined
				? 'Already done: this effect was completed earlier (no result reference was recorded). Do not perform it again.'
				: `Already done; result_ref ${ref}. This effect was completed earlier: do not perform it again, use this result.`;
		case 'in_progress':
			return 'In progress: another run holds this effect now. Do not perform it; ask again later.';
		case 'retry_later':
			return 'Failed earlier and may be retried later, not now. Do not perform it now.';
		case 'unknown':
			return 'Outcome unknown: this effect may or may not have happened, and a person must review it. Do not perform it.';
		case 'dead_lettered':
			return 'Given up: this effect failed for good and waits for a person. Do not perform it.';
		case 'stale':
			return 'Stale: a newer change of this object was already processed. Do not perform it.';
		case 'conflict':
			return 'Conflict: this key was claimed earlier with different data. Do not perform it.';
		default:
			return 'Not claimed. Do not perform the effect.';
	}
}
