import type { IExecuteFunctions, INode, INodeExecutionData, INodeParameters } from 'n8n-workflow';

import { plainPathOf, readPlainPath, type PlainPath } from './plainPath';

/*
 * What n8n's getNodeParameter(name, itemIndex, fallback) does (n8n-core
 * 2.41, NodeExecutionContext._getNodeParameter): it takes the node's stored
 * value (the saved parameters with the defaults n8n adds), lets n8n-workflow's
 * Expression resolve it for the item, then cleans up Luxon dates and checks
 * the value against the node's description. Resolving a value that holds no
 * expression returns it as it is (objects and lists copied, every string in
 * them that starts with "=" resolved); so does the clean-up for the values
 * this node reads, and this node's description declares no validateType,
 * resource mapper or other checked parameter (test/plainPath.test.ts keeps
 * it so). Every call still builds n8n's additional keys and searches the
 * node's description; an expression costs its evaluation besides (1 to 5 ms
 * in n8n 2.x's default engine).
 *
 * nodeParameter gives the same value without n8n where that is certain:
 * - a stored value without expressions: the value itself (once per node
 *   run: it is the same for every item);
 * - a plain path expression (plainPath.ts), alone or in an object or list
 *   of such values (Key Parts): read from the item's JSON, when the value
 *   found is one n8n returns unchanged.
 * Everything else, and every parameter the stored parameters lack (n8n
 * then answers with the fallback, or its own error), is n8n's
 * getNodeParameter, called as before.
 */

/** How a stored value becomes its value for an item. */
type Plan =
	| { kind: 'value'; value: unknown }
	| { kind: 'path'; path: PlainPath }
	| { kind: 'list'; entries: Plan[] }
	| { kind: 'fields'; entries: Array<[string, Plan]> };

function isPlainObject(value: object): boolean {
	const prototype: unknown = Object.getPrototypeOf(value);
	return prototype === Object.prototype || prototype === null;
}

/** The plan of a stored value, or undefined when n8n resolves it. */
function planOf(stored: unknown): Plan | undefined {
	if (typeof stored === 'string') {
		if (!stored.startsWith('=')) return { kind: 'value', value: stored };
		const path = plainPathOf(stored);
		return path === undefined ? undefined : { kind: 'path', path };
	}
	if (
		stored === null ||
		stored === undefined ||
		typeof stored === 'number' ||
		typeof stored === 'boolean'
	) {
		return { kind: 'value', value: stored };
	}
	if (Array.isArray(stored)) {
		const entries: Plan[] = [];
		for (const entry of stored) {
			const plan = planOf(entry);
			if (plan === undefined) return undefined;
			entries.push(plan);
		}
		return { kind: 'list', entries };
	}
	if (typeof stored === 'object' && isPlainObject(stored)) {
		const entries: Array<[string, Plan]> = [];
		for (const [key, entry] of Object.entries(stored)) {
			// n8n would assign it as the copy's prototype.
			if (key === '__proto__') return undefined;
			const plan = planOf(entry);
			if (plan === undefined) return undefined;
			entries.push([key, plan]);
		}
		return { kind: 'fields', entries };
	}
	return undefined;
}

/** The value of a plan for an item ({ value }), or undefined when n8n must resolve it. */
function valueOf(plan: Plan, item: INodeExecutionData | undefined): { value: unknown } | undefined {
	switch (plan.kind) {
		case 'value':
			return { value: plan.value };
		case 'path':
			// No such item: n8n's own error.
			return item === undefined ? undefined : readPlainPath(item.json, plan.path);
		case 'list': {
			const list: unknown[] = [];
			for (const entry of plan.entries) {
				const found = valueOf(entry, item);
				if (found === undefined) return undefined;
				list.push(found.value);
			}
			return { value: list };
		}
		case 'fields': {
			const fields: Record<string, unknown> = {};
			for (const [key, entry] of plan.entries) {
				const found = valueOf(entry, item);
				if (found === undefined) return undefined;
				fields[key] = found.value;
			}
			return { value: fields };
		}
	}
}

/** What one node run knows about its parameters. */
interface RunParameters {
	/** this.getNode(), once per run (n8n hands out a deep copy on each call). */
	node: INode;
	/** The node's stored parameters (this.getNode().parameters). */
	stored: INodeParameters;
	items: INodeExecutionData[];
	/** The plan of each parameter read so far; null: n8n resolves it. */
	plans: Map<string, Plan | null>;
}

/** Keyed by the execute context: one entry per node run. */
const runs = new WeakMap<object, RunParameters>();

function runOf(context: IExecuteFunctions): RunParameters {
	let run = runs.get(context);
	if (run === undefined) {
		const node = context.getNode();
		run = {
			node,
			stored: node.parameters ?? {},
			items: context.getInputData(),
			plans: new Map(),
		};
		runs.set(context, run);
	}
	return run;
}

/**
 * The node of this node run, as this.getNode() gives it (a deep copy of
 * n8n's), read once per run: not to be changed.
 */
export function runNode(this: IExecuteFunctions): INode {
	return runOf(this).node;
}

/**
 * The value of parameter `name` for one item, as
 * `this.getNodeParameter(name, itemIndex, fallback)` gives it: the same
 * value and the same errors, read without n8n's expression engine where
 * that is certain (see above), and otherwise from getNodeParameter itself.
 */
export function nodeParameter(
	this: IExecuteFunctions,
	name: string,
	itemIndex: number,
	fallback?: unknown,
): unknown {
	const run = runOf(this);
	let plan = run.plans.get(name);
	if (plan === undefined) {
		const stored = Object.prototype.hasOwnProperty.call(run.stored, name)
			? run.stored[name]
			: undefined;
		// A parameter the node does not store is n8n's: its fallback or its error.
		plan = (stored === undefined ? undefined : planOf(stored)) ?? null;
		run.plans.set(name, plan);
	}
	if (plan !== null) {
		const found = valueOf(plan, run.items[itemIndex]);
		if (found !== undefined) return found.value;
	}
	return this.getNodeParameter(name, itemIndex, fallback);
}
