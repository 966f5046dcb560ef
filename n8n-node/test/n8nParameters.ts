import type {
	IGetNodeParameterOptions,
	INode,
	INodeExecutionData,
	INodeParameters,
	INodeTypes,
} from 'n8n-workflow';
import { Expression, Workflow } from 'n8n-workflow';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { NODE, createContext, type Context } from './helpers';

/**
 * n8n's expression engines: legacy (in process), vm (an isolate; n8n 2.x's
 * default) and quickjs (N8N_EXPRESSION_ENGINE=quickjs).
 */
export type Engine = 'legacy' | 'vm' | 'quickjs';
/** The engines most tests compare on; quickjs has a test file of its own (one isolated engine per process). */
export const ENGINES: Engine[] = ['legacy', 'vm'];

let started: Engine | undefined;

/**
 * Selects n8n's expression engine for this test file (vm or quickjs:
 * started once, as n8n does at startup; n8n starts one of them per
 * process, so a test file uses at most one).
 */
export async function useEngine(engine: Engine): Promise<void> {
	if (engine !== 'legacy' && started === undefined) {
		await Expression.initExpressionEngine({
			engine,
			bridgeTimeout: 5000,
			bridgeMemoryLimit: 128,
			poolSize: 1,
			maxCodeCacheSize: 100,
		});
		started = engine;
	} else if (engine !== 'legacy' && started !== engine) {
		throw new Error(
			`n8n's ${String(started)} engine runs already: ${engine} needs a test file of its own`,
		);
	}
	Expression.setExpressionEngine(engine);
	if (Expression.getActiveImplementation() !== engine) {
		throw new Error(`n8n's ${engine} expression engine is not active`);
	}
}

/** Stops the vm or quickjs engine, if started, and goes back to legacy. */
export async function stopEngines(): Promise<void> {
	Expression.setExpressionEngine('legacy');
	if (started !== undefined) await Expression.disposeExpressionEngine();
	started = undefined;
}

const nodeType = new IdempotentClaim();
const nodeTypes = {
	getByName: () => nodeType,
	getByNameAndVersion: () => nodeType,
	getKnownTypes: () => ({}),
} as unknown as INodeTypes;

/** One parameter read of the node: its name, and whether n8n evaluated it (not raw). */
export interface ParameterRead {
	name: string;
	itemIndex: number;
	raw: boolean;
}

export interface N8nContext {
	ctx: Context;
	/** The node as n8n runs it: the stored parameters with the defaults n8n adds. */
	node: INode;
	/** Every getNodeParameter call, in order. */
	reads: ParameterRead[];
	/** Names of the parameters n8n evaluated (calls without rawExpressions), in order. */
	evaluated(): string[];
	/** What n8n's getNodeParameter gives, evaluating always (the value before the shortcut). */
	evaluate(name: string, itemIndex: number, fallback?: unknown): unknown;
	release(): Promise<void>;
}

/**
 * An execute context whose getNodeParameter works as n8n-core's does
 * (node-execution-context.js _getNodeParameter): the node's parameters are
 * the stored ones with the defaults n8n's Workflow adds; a missing one
 * without fallback throws; with rawExpressions the stored value comes back
 * as it is; otherwise n8n's Expression evaluates it for the item, `$json`
 * being the JSON of the input item of that index. The rest is the mocked
 * context of helpers.ts.
 */
export async function n8nContext(
	stored: INodeParameters,
	items: INodeExecutionData[],
	engine: Engine,
	options: {
		continueOnFail?: boolean;
		/**
		 * Answers raw reads with a value that is no parameter's default, and
		 * hides the stored parameters from getNode(), so the node evaluates
		 * every parameter, as it did before it read any without n8n: the
		 * reference to compare with.
		 */
		evaluateAll?: boolean;
	} = {},
): Promise<N8nContext> {
	await useEngine(engine);
	const workflow = new Workflow({
		nodes: [{ ...NODE, typeVersion: 2, parameters: stored }],
		connections: {},
		active: false,
		nodeTypes,
		settings: { executionOrder: 'v1' },
	});
	const node = workflow.getNode(NODE.name) as INode;
	const acquired = engine !== 'legacy' ? await workflow.expression.acquireIsolate() : false;
	const reads: ParameterRead[] = [];
	const evaluate = (name: string, itemIndex: number, fallback?: unknown): unknown => {
		const value = node.parameters[name] ?? fallback;
		if (value === undefined) throw new Error(`Could not get parameter "${name}"`);
		return workflow.expression.getParameterValue(
			value as INodeParameters[string],
			null,
			0,
			itemIndex,
			node.name,
			items,
			'manual',
			{},
			undefined,
			false,
			{},
		);
	};
	const ctx = createContext({ items, params: {}, continueOnFail: options.continueOnFail });
	// With evaluateAll the node sees no stored parameters either (what it
	// reads without n8n's evaluation), so it asks getNodeParameter for each.
	ctx.getNode.mockReturnValue(options.evaluateAll === true ? { ...node, parameters: {} } : node);
	(
		ctx.getNodeParameter as unknown as { mockImplementation: (fn: unknown) => void }
	).mockImplementation(
		(name: string, itemIndex: number, fallback?: unknown, opts?: IGetNodeParameterOptions) => {
			const raw = opts?.rawExpressions === true;
			reads.push({ name, itemIndex, raw });
			if (raw) {
				if (options.evaluateAll === true) return '=(raw reads off)';
				const value = node.parameters[name] ?? fallback;
				if (value === undefined) throw new Error(`Could not get parameter "${name}"`);
				return value;
			}
			return evaluate(name, itemIndex, fallback);
		},
	);
	return {
		ctx,
		node,
		reads,
		evaluated: () => reads.filter((read) => !read.raw).map((read) => read.name),
		evaluate,
		release: async () => {
			if (acquired) await workflow.expression.releaseIsolate();
		},
	};
}
