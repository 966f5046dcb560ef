import type {
	IDataObject,
	INodeExecutionData,
	INodeParameters,
	INodeTypes,
	NodeHint,
} from 'n8n-workflow';
import { NodeApiError, NodeHelpers, NodeOperationError, Workflow } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import {
	CLAIM_V2_OUTPUT_NAMES,
	ERROR,
	IN_PROGRESS,
	outputLayout,
} from '../nodes/IdempotentClaim/actions/outputs';
import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import {
	NODE,
	claimParams,
	claimResult,
	createContext,
	requests,
	run,
	webhookItems,
	type ContextOptions,
} from './helpers';

const nodeType = new IdempotentClaim();
const { description } = nodeType;

function workflowWith(values: INodeParameters, typeVersion: number) {
	const nodeTypes = {
		getByName: () => nodeType,
		getByNameAndVersion: () => nodeType,
		getKnownTypes: () => ({}),
	} as unknown as INodeTypes;
	const workflow = new Workflow({
		nodes: [{ ...NODE, typeVersion, parameters: values }],
		connections: {},
		active: false,
		nodeTypes,
	});
	const node = workflow.getNode(NODE.name);
	if (node === null) throw new Error('node missing');
	return { workflow, node };
}

/** The node's output names as n8n computes them for the parameters and version. */
function outputNames(values: INodeParameters, typeVersion: number): string[] {
	const { workflow, node } = workflowWith(values, typeVersion);
	return NodeHelpers.getNodeOutputs(workflow, node, description).map((output) =>
		typeof output === 'string' ? output : (output.displayName ?? ''),
	);
}

/** The hints n8n's editor shows: those whose display condition holds. */
function shownHints(values: INodeParameters, typeVersion: number): NodeHint[] {
	const { workflow, node } = workflowWith(values, typeVersion);
	return (description.hints ?? []).filter((hint) => {
		if (hint.displayCondition === undefined) return true;
		const shown = workflow.expression.getSimpleParameterValue(
			node,
			hint.displayCondition,
			'internal',
			{},
		);
		expect(typeof shown, hint.message).toBe('boolean');
		return shown === true;
	});
}

/** Parameters n8n stores for a node of a version: visible ones with their defaults. */
function storedParameters(values: INodeParameters, typeVersion: number): INodeParameters {
	const node = { ...NODE, typeVersion, parameters: values };
	return (
		NodeHelpers.getNodeParameters(description.properties, values, true, false, node, description) ??
		{}
	);
}

/** A context for a node of typeVersion. */
function contextV(typeVersion: number, options: ContextOptions) {
	const ctx = createContext(options);
	ctx.getNode.mockReturnValue({ ...NODE, typeVersion });
	return ctx;
}

const OUTCOMES = [
	'won',
	'duplicate',
	'in_progress',
	'retry_later',
	'conflict',
	'stale',
	'dead_lettered',
	'unknown',
];

function eventIds(output: INodeExecutionData[]): string[] {
	return output.map((item) => (item.json.idempotency as IDataObject).event_id as string);
}

describe('versions', () => {
	it('are 1 and 2; new nodes get 2', () => {
		expect(description.version).toEqual([1, 2]);
		expect(description.defaultVersion).toBe(2);
	});

	it('version 2 separates in-progress from duplicate by default, with an Error output', () => {
		expect(outputNames({}, 2)).toEqual([...CLAIM_V2_OUTPUT_NAMES]);
		expect(outputNames({ operation: 'claim' }, 2)).toEqual([
			'Won',
			'Duplicate',
			'Conflict',
			'In Progress',
			'Error',
		]);
		// A toggle value carried over from version 1 changes nothing.
		expect(outputNames({ operation: 'claim', separateConflictOutputs: false }, 2)).toEqual([
			...CLAIM_V2_OUTPUT_NAMES,
		]);
		for (const operation of [
			'complete',
			'fail',
			'extendLease',
			'lookup',
			'resolve',
			'reconcileAnswer',
		]) {
			expect(outputNames({ operation }, 2)).toHaveLength(1);
			expect(outputLayout(operation, true, 2).count).toBe(1);
		}
		expect(outputLayout('claim', true, 2)).toEqual({ count: 5, errorOutput: ERROR });
	});

	it('version 1 keeps its outputs, so saved workflows behave as before', () => {
		// A saved version 1 node whose toggle was left at its default: n8n did
		// not store it, and it still reads as off.
		expect(storedParameters({ operation: 'claim' }, 1).separateConflictOutputs).toBe(false);
		expect(outputNames({ operation: 'claim' }, 1)).toEqual(['Won', 'Duplicate']);
		expect(outputNames({ operation: 'claim', separateConflictOutputs: true }, 1)).toEqual([
			'Won',
			'Duplicate',
			'Conflict',
			'In Progress',
		]);
		expect(outputLayout('claim', false, 1).errorOutput).toBe(1);
		expect(outputLayout('claim', true, 1).errorOutput).toBe(IN_PROGRESS);
	});

	it('shows the separate-outputs toggle in version 1 only', () => {
		expect(storedParameters({ operation: 'claim' }, 2)).not.toHaveProperty(
			'separateConflictOutputs',
		);
		const toggle = description.properties.find((p) => p.name === 'separateConflictOutputs');
		expect(toggle?.displayOptions?.show?.['@version']).toEqual([1]);
	});
});

describe('hints', () => {
	it('say which HTTP answer each output of a version 2 Claim gives', () => {
		const hints = shownHints({ operation: 'claim' }, 2);
		expect(hints).toHaveLength(1);
		const [hint] = hints;
		expect(hint.location).toBe('outputPane');
		for (const name of CLAIM_V2_OUTPUT_NAMES) expect(hint.message).toContain(`<b>${name}</b>`);
		expect(hint.message).toMatch(
			/<b>In Progress<\/b>: 409 \(in_progress\) or 503 \(retry_later\) with Retry-After/,
		);
		expect(hint.message).toMatch(/<b>Error<\/b>[^<]*: 503 with Retry-After, never 2xx/);
		expect(hint.message).toContain('<b>Duplicate</b> (also stale, dead-lettered, unknown): 2xx');
	});

	it('warn a version 1 Claim whose in-progress claims leave by Duplicate', () => {
		const [warning, ...rest] = shownHints({ operation: 'claim' }, 1);
		expect(rest).toHaveLength(0);
		expect(warning.type).toBe('warning');
		expect(warning.message).toContain('Never answer them 2xx');
		const separated = shownHints({ operation: 'claim', separateConflictOutputs: true }, 1);
		expect(separated).toHaveLength(1);
		expect(separated[0].type).toBe('info');
		expect(separated[0].message).toContain('<b>In Progress</b>: 409');
	});

	it('are not shown for the other operations', () => {
		for (const version of [1, 2]) {
			expect(shownHints({ operation: 'complete' }, version)).toHaveLength(0);
			expect(shownHints({ operation: 'lookup' }, version)).toHaveLength(0);
		}
	});
});

describe('version 2 Claim routing', () => {
	const ids = OUTCOMES.map((outcome) => `evt_${outcome}`);

	it('sends in_progress and retry_later to In Progress, never to Duplicate, by default', async () => {
		const items = webhookItems(ids);
		// No separate-outputs parameter at all: a version 2 node never has one.
		const params = claimParams(items);
		delete params.separateConflictOutputs;
		const ctx = contextV(2, { items, params });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: OUTCOMES.map((outcome, index) =>
				claimResult(
					ids[index],
					outcome,
					outcome === 'in_progress' || outcome === 'retry_later' ? { retry_after_seconds: 2 } : {},
				),
			),
		});
		const outputs = await run(ctx);
		expect(outputs).toHaveLength(5);
		expect(eventIds(outputs[0])).toEqual(['evt_won']);
		expect(eventIds(outputs[1])).toEqual([
			'evt_duplicate',
			'evt_stale',
			'evt_dead_lettered',
			'evt_unknown',
		]);
		expect(eventIds(outputs[2])).toEqual(['evt_conflict']);
		expect(eventIds(outputs[3])).toEqual(['evt_in_progress', 'evt_retry_later']);
		expect(outputs[4]).toHaveLength(0);
	});
});

describe('errors never leave by an outcome output', () => {
	const unreachable = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8080'), {
		code: 'ECONNREFUSED',
	});

	it('version 2: an unreachable sidecar sends every item to Error', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = contextV(2, {
			items,
			params: claimParams(items, { sidecarWaitBetweenTries: 0 }),
			continueOnFail: true,
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(unreachable);
		const outputs = await run(ctx);
		expect(outputs.slice(0, ERROR).flat()).toHaveLength(0);
		expect(outputs[ERROR].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(outputs[ERROR][0].error).toBeInstanceOf(NodeApiError);
		expect(outputs[ERROR][0].json.error).toMatch(/Cannot reach the Idempotent Claim sidecar/);
	});

	it('version 2: a bad item and an error entry go to Error, the others by their outcome', async () => {
		const items = webhookItems(['evt_1', '', 'evt_3', 'evt_4']);
		const ctx = contextV(2, { items, params: claimParams(items), continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [
				claimResult('evt_1', 'won'),
				{ error: { code: 'invalid', message: 'unknown source', field: 'claims[1].source' } },
				claimResult('evt_4', 'in_progress', { retry_after_seconds: 1 }),
			],
		});
		const outputs = await run(ctx);
		expect(eventIds(outputs[0])).toEqual(['evt_1']);
		expect(eventIds(outputs[IN_PROGRESS])).toEqual(['evt_4']);
		expect(outputs[ERROR].map((item) => item.pairedItem)).toEqual([{ item: 1 }, { item: 2 }]);
		expect(outputs[1]).toHaveLength(0);
	});

	it('an unexpected failure while continuing on fail never becomes a throw (n8n would pass the input on through Won)', async () => {
		for (const version of [1, 2]) {
			const items = webhookItems(['evt_1']);
			const ctx = contextV(version, { items, params: claimParams(items), continueOnFail: true });
			ctx.getExecutionId.mockImplementation(() => {
				throw new Error('engine hiccup');
			});
			const outputs = await run(ctx);
			expect(outputs[0], `version ${version}`).toHaveLength(0);
			const errorOutput = outputLayout('claim', version >= 2, version).errorOutput;
			expect(outputs[errorOutput][0].json.error).toBe('engine hiccup');
			expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
		}
	});

	it('without continue on fail, the node fails instead', async () => {
		const items = webhookItems(['evt_1']);
		const ctx = contextV(2, { items, params: claimParams(items) });
		ctx.getExecutionId.mockImplementation(() => {
			throw new Error('engine hiccup');
		});
		await expect(run(ctx)).rejects.toThrow(NodeOperationError);
	});
});

describe('Wait for a Concurrent Holder', () => {
	async function sent(options: IDataObject) {
		const items = webhookItems(['evt_1']);
		const ctx = contextV(2, { items, params: claimParams(items, { options }) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await run(ctx);
		return (requests(ctx)[0].body as { claims: IDataObject[] }).claims[0];
	}

	it('sends wait_seconds when set, nothing when absent or 0', async () => {
		expect((await sent({ waitSeconds: 5 })).wait_seconds).toBe(5);
		expect(await sent({})).not.toHaveProperty('wait_seconds');
		expect(await sent({ waitSeconds: 0 })).not.toHaveProperty('wait_seconds');
	});

	it('refuses a wait the sidecar would refuse', async () => {
		for (const waitSeconds of [26, -1, 2.5]) {
			await expect(sent({ waitSeconds })).rejects.toThrow(
				'Wait for a Concurrent Holder must be a whole number of seconds from 0 to 25',
			);
		}
	});

	it('is an option of Claim, absent unless added', () => {
		const options = description.properties.find((p) => p.name === 'options');
		const wait = (options?.options ?? []).find(
			(option) => 'name' in option && option.name === 'waitSeconds',
		);
		expect(wait).toMatchObject({ type: 'number', typeOptions: { minValue: 0, maxValue: 25 } });
		expect(storedParameters({ operation: 'claim' }, 2).options).toEqual({});
	});
});
