/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals --
 * The community-node rules are for code that runs inside n8n; this test reads an example file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type {
	INode,
	INodeParameters,
	INodeProperties,
	INodeTypes,
	IWebhookDescription,
} from 'n8n-workflow';
import {
	NodeHelpers,
	resolveWebhookDescriptionField,
	WEBHOOK_RESOLVERS,
	webhookDescriptionIsNativelyResolvable,
	Workflow,
} from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { IdempotentClaimApi } from '../credentials/IdempotentClaimApi.credentials';
import codex from '../nodes/IdempotentClaimTrigger/IdempotentClaimTrigger.node.json';
import { IdempotentClaimTrigger } from '../nodes/IdempotentClaimTrigger/IdempotentClaimTrigger.node';
import pkg from '../package.json';
import { TRIGGER_NODE } from './triggerHelpers';

const nodeType = new IdempotentClaimTrigger();
const { description } = nodeType;
const { properties } = description;

function byName(list: INodeProperties[], name: string): INodeProperties {
	const found = list.find((p) => p.name === name);
	if (found === undefined) throw new Error(`no parameter ${name}`);
	return found;
}

/** Parameters n8n keeps for the node: visible ones with their defaults, then `values`. */
function resolved(values: INodeParameters): INodeParameters {
	return (
		NodeHelpers.getNodeParameters(
			properties,
			values,
			true,
			false,
			{ typeVersion: 1 },
			description,
		) ?? {}
	);
}

/** Evaluates a field of a webhook description the way n8n does, for the node's parameters. */
function evaluate(webhook: IWebhookDescription, field: string, values: INodeParameters): unknown {
	const nodeTypes = {
		getByName: () => nodeType,
		getByNameAndVersion: () => nodeType,
		getKnownTypes: () => ({}),
	} as unknown as INodeTypes;
	const workflow = new Workflow({
		nodes: [{ ...TRIGGER_NODE, parameters: values }],
		connections: {},
		active: false,
		nodeTypes,
	});
	const node = workflow.getNode(TRIGGER_NODE.name);
	if (node === null) throw new Error('node missing');
	return workflow.expression.getComplexParameterValue(
		node,
		webhook[field] as string,
		'internal',
		{},
		undefined,
		undefined,
	);
}

const webhook = (name: string): IWebhookDescription => {
	const found = description.webhooks?.find((w) => w.name === name);
	if (found === undefined) throw new Error(`no webhook ${name}`);
	return found;
};

describe('trigger description', () => {
	it('is a trigger with the Idempotent Claim API credential, no inputs and one output', () => {
		expect(description.name).toBe('idempotentClaimTrigger');
		expect(description.displayName).toBe('Idempotent Claim Trigger');
		expect(description.group).toEqual(['trigger']);
		expect(description.inputs).toEqual([]);
		expect(description.outputs).toEqual(['main']);
		expect(description.credentials).toEqual([
			{ name: new IdempotentClaimApi().name, required: true },
		]);
		expect(description.sensitiveOutputFields).toEqual(['headers.authorization', 'headers.cookie']);
	});

	it('has the parameters and defaults of a Webhook node replacement', () => {
		expect(resolved({})).toEqual({
			triggerNotice: '',
			path: '',
			source: '',
			responseMode: 'onReceived',
			options: {},
		});
		expect(resolved({ responseMode: 'lastNode' })).toMatchObject({
			responseCode: 200,
			responseData: 'firstEntryJson',
		});
		expect(resolved({ responseMode: 'lastNode', responseData: 'firstEntryBinary' })).toMatchObject({
			responseBinaryPropertyName: 'data',
		});
		expect(resolved({ responseMode: 'responseNode' })).toHaveProperty('respondNotice');
		// POST only: claimd's ingest door decides POST deliveries alone.
		expect(properties.some((p) => p.name === 'httpMethod')).toBe(false);
		expect(byName(properties, 'source').required).toBe(true);
	});

	it('offers the options named in the README, with safe defaults', () => {
		const options = byName(properties, 'options').options as INodeProperties[];
		expect(options.map((o) => o.name).sort()).toEqual(
			[
				'answers',
				'exactNumbers',
				'inProgress',
				'onExecutionError',
				'rawBody',
				'shadow',
				'waitSeconds',
			].sort(),
		);
		// Off: a trigger enforces unless asked to only observe.
		expect(byName(options, 'shadow')).toMatchObject({ type: 'boolean', default: false });
		expect(byName(options, 'inProgress').default).toBe('answer');
		expect(byName(options, 'waitSeconds')).toMatchObject({
			default: 5,
			typeOptions: { minValue: 1, maxValue: 25 },
			displayOptions: { show: { inProgress: ['wait'] } },
		});
		expect(byName(options, 'onExecutionError').default).toBe('unknown');
		expect(
			(byName(options, 'onExecutionError').options ?? []).map(
				(o) => (o as { value: string }).value,
			),
		).toEqual(['unknown', 'retryable', 'permanent']);
		expect(byName(options, 'rawBody').default).toBe(false);
		// Off: existing workflows keep the numbers n8n's Webhook node gives.
		expect(byName(options, 'exactNumbers')).toMatchObject({ type: 'boolean', default: false });

		const answers = byName(options, 'answers').options as Array<{
			name: string;
			values: INodeProperties[];
		}>;
		expect(answers.map((a) => a.name)).toEqual([
			'won',
			'duplicate',
			'conflict',
			'inProgress',
			'refused',
		]);
		const inProgressCodes = byName(
			answers.find((a) => a.name === 'inProgress')?.values ?? [],
			'statusCode',
		).options?.map((o) => (o as { value: number }).value);
		expect(inProgressCodes).toEqual([409, 503]);
		const refused = byName(answers.find((a) => a.name === 'refused')?.values ?? [], 'statusCode');
		expect(refused.typeOptions).toEqual({ minValue: 400, maxValue: 599 });
	});

	it('declares the delivery webhook and a GET/HEAD webhook on the same path', () => {
		expect(description.webhooks?.map((w) => w.name)).toEqual(['default', 'setup']);
		const deliveries = webhook('default');
		const setup = webhook('setup');
		expect(deliveries.isFullPath).toBe(true);
		expect(setup.isFullPath).toBe(true);
		expect(setup.path).toBe(deliveries.path);
		expect(setup.httpMethod).toBe('GET,HEAD');
		expect(setup.ndvHideUrl).toBe(true);
		expect(deliveries.httpMethod).toBe('POST');
		expect(evaluate(deliveries, 'path', { path: 'stripe-events' })).toBe('stripe-events');
	});

	it("lets n8n answer a won delivery 200 with the node's body when Respond is Immediately", () => {
		const deliveries = webhook('default');
		for (const values of [{}, { responseMode: 'onReceived' }]) {
			expect(evaluate(deliveries, 'responseMode', values)).toBe('onReceived');
			expect(evaluate(deliveries, 'responseCode', values)).toBe(200);
			// Falsy: n8n then sends the webhookResponse the node returns.
			expect(evaluate(deliveries, 'responseData', values)).toBeFalsy();
		}
		const last = { responseMode: 'lastNode', responseCode: 201, responseData: 'allEntries' };
		expect(evaluate(deliveries, 'responseMode', last)).toBe('lastNode');
		expect(evaluate(deliveries, 'responseCode', last)).toBe(201);
		expect(evaluate(deliveries, 'responseData', last)).toBe('allEntries');
		expect(evaluate(deliveries, 'responseData', { responseMode: 'lastNode' })).toBe(
			'firstEntryJson',
		);
		expect(evaluate(deliveries, 'responseMode', { responseMode: 'responseNode' })).toBe(
			'responseNode',
		);
	});

	it('resolves every webhook field without the expression engine, to what the engine returns', () => {
		// n8n resolves a field natively only while the resolver is stored
		// under its key and still carries the field's template.
		for (const w of description.webhooks ?? []) {
			expect(webhookDescriptionIsNativelyResolvable(w), w.name).toBe(true);
			expect(Object.keys(w[WEBHOOK_RESOLVERS] ?? {}).length, w.name).toBeGreaterThan(0);
		}
		const parameterSets: INodeParameters[] = [
			{},
			{ path: 'stripe-events' },
			{ responseMode: 'onReceived' },
			{ responseMode: 'lastNode' },
			{ responseMode: 'lastNode', responseCode: 201, responseData: 'allEntries' },
			{ responseMode: 'lastNode', responseData: 'firstEntryBinary' },
			{
				responseMode: 'lastNode',
				responseData: 'firstEntryBinary',
				responseBinaryPropertyName: 'file',
			},
			{ responseMode: 'lastNode', responseData: 'noData' },
			{ responseMode: 'responseNode' },
			{ path: 'a/b/:id', responseMode: 'responseNode' },
		];
		for (const values of parameterSets) {
			const node = { ...TRIGGER_NODE, parameters: resolved(values) };
			for (const w of description.webhooks ?? []) {
				for (const [field, value] of Object.entries(w)) {
					if (typeof value !== 'string' || !value.startsWith('=')) continue;
					const native = resolveWebhookDescriptionField(node, w, field);
					const label = `${w.name}.${field} for ${JSON.stringify(values)}`;
					expect(native.resolved, label).toBe(true);
					if (native.resolved) {
						expect(native.value, label).toEqual(evaluate(w, field, node.parameters));
					}
				}
			}
		}
		// A parameter holding an expression: n8n falls back to the engine.
		const dynamic = { ...TRIGGER_NODE, parameters: resolved({ path: '={{ "x" }}' }) };
		expect(resolveWebhookDescriptionField(dynamic, webhook('default'), 'path').resolved).toBe(
			false,
		);
	});

	it('has webhook lifecycle methods that register nothing', async () => {
		const methods = nodeType.webhookMethods.default;
		expect(Object.keys(methods).sort()).toEqual(['checkExists', 'create', 'delete']);
	});

	it('is registered in package.json with a codex file that has resources', () => {
		expect(pkg.n8n.nodes).toContain(
			'dist/nodes/IdempotentClaimTrigger/IdempotentClaimTrigger.node.js',
		);
		expect(codex.node).toBe(`${pkg.name}.${description.name}`);
		expect(codex.resources).toBeTypeOf('object');
		expect(codex.resources.primaryDocumentation[0].url).toContain('#idempotent-claim-trigger');
	});

	it('tells the user that only a won delivery starts an execution and what the Test URL does', () => {
		const notice = byName(properties, 'triggerNotice').displayName;
		expect(notice).toMatch(/only a <b>won<\/b> event starts an execution/);
		expect(notice).toMatch(/duplicate/);
		expect(notice).toMatch(/Test URL<\/b> claims nothing/);
		const panel = description.triggerPanel as { executionsHelp: { inactive: string } };
		expect(panel.executionsHelp.inactive).toMatch(/claims <b>nothing<\/b>/);
		expect(description.hints?.[0]?.message).toMatch(/a duplicate, .* started none/);
	});
});

describe('examples/trigger.json', () => {
	const wf = JSON.parse(
		readFileSync(join(__dirname, '..', 'examples', 'trigger.json'), 'utf8'),
	) as {
		id: string;
		nodes: INode[];
		connections: Record<string, { main: Array<Array<{ node: string }>> }>;
	};
	const trigger = wf.nodes.find((node) => node.type === TRIGGER_NODE.type);

	it('is the trigger on source stripe, straight to the protected call, with no Claim or Complete node', () => {
		expect(trigger).toBeDefined();
		const node = trigger as INode;
		expect(node.typeVersion).toBe(description.defaultVersion);
		expect(node.parameters.source).toBe('stripe');
		expect(node.parameters.path).toBeTruthy();
		expect(node.webhookId).toBeTruthy();
		expect(node.credentials?.idempotentClaimApi?.id).toBe('__CREDENTIAL_ID__');
		// Every parameter it sets is one the node shows (n8n would drop the others).
		const shown = resolved(node.parameters);
		for (const [name, value] of Object.entries(node.parameters)) {
			expect(shown[name], name).toEqual(value);
		}
		expect(wf.nodes.some((n) => n.type === 'n8n-nodes-idempotent-claim.idempotentClaim')).toBe(
			false,
		);
		const next = wf.connections[node.name]?.main[0]?.[0]?.node;
		const effect = wf.nodes.find((n) => n.name === next);
		expect(effect?.type).toBe('n8n-nodes-base.httpRequest');
		expect(effect?.parameters.url).toBe('__EFFECT_URL__');
		expect(JSON.stringify(effect?.parameters)).toContain('$json.idempotency.key');
	});

	it('has the GET probe webhook the end-to-end harness polls, on another path', () => {
		const probe = wf.nodes.find(
			(node) => node.type === 'n8n-nodes-base.webhook' && node.parameters.httpMethod === 'GET',
		);
		expect(probe?.parameters.responseMode).toBe('onReceived');
		expect(probe?.parameters.path).not.toBe(trigger?.parameters.path);
		expect(wf.id).toHaveLength(16);
	});
});
