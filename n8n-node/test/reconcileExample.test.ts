/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals --
 * The community-node rules are for code that runs inside n8n; this test reads an example file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { FilterValue, IDataObject, INode, INodeParameters } from 'n8n-workflow';
import { executeFilter } from 'n8n-workflow';
import { afterAll, describe, expect, it } from 'vitest';

import { ENGINES, n8nContext, stopEngines, type Engine } from './n8nParameters';

/**
 * examples/reconcile-by-key.json decides the verdict of an unknown claim
 * from the destination's answer to a search by idempotency key. A wrong
 * Not Done runs the effect a second time, so only a well-formed empty
 * result may lead there; these tests route answers of every shape through
 * the workflow's own conditions, evaluated by n8n's expression engines.
 */

interface Workflow {
	settings: IDataObject;
	nodes: INode[];
	connections: Record<string, { main: Array<Array<{ node: string }>> }>;
}

const wf = JSON.parse(
	readFileSync(join(__dirname, '..', 'examples', 'reconcile-by-key.json'), 'utf8'),
) as Workflow;

const byName = (name: string): INode => {
	const node = wf.nodes.find((n) => n.name === name);
	if (node === undefined) throw new Error(`no node ${name}`);
	return node;
};
const next = (name: string, output: number): string[] =>
	(wf.connections[name]?.main[output] ?? []).map((target) => target.node);

const SEARCH = 'Search Destination';
const ROUTE = 'Found?';

interface Rule {
	conditions: FilterValue;
	outputKey?: string;
}

const route = byName(ROUTE);
const rules = ((route.parameters.rules as { values?: Rule[] } | undefined)?.values ?? []) as Rule[];
const routeOptions = (route.parameters.options ?? {}) as IDataObject;

afterAll(async () => {
	await stopEngines();
});

describe('reconcile-by-key.json routes the destination answer', () => {
	it('through a Switch whose unmatched answers go to an extra output, and a search that fails on a non-2xx', () => {
		expect(route.type).toBe('n8n-nodes-base.switch');
		expect(route.typeVersion).toBe(3.2);
		expect(route.parameters.mode ?? 'rules').toBe('rules');
		expect(routeOptions.fallbackOutput).toBe('extra');
		// One output per item: the first rule that matches.
		expect(routeOptions.allMatchingOutputs ?? false).toBe(false);
		expect(rules.map((rule) => rule.outputKey)).toEqual(['Found', 'None Found']);
		for (const rule of rules) {
			expect(rule.conditions.combinator).toBe('and');
			expect(rule.conditions.options).toMatchObject({ typeValidation: 'strict' });
			expect(rule.conditions.conditions).toHaveLength(1);
			expect(rule.conditions.conditions[0].operator).toMatchObject({
				type: 'boolean',
				operation: 'true',
			});
		}
		// Only a well-formed empty result means Not Done.
		expect(rules[1].conditions.conditions[0].leftValue).toBe(
			'={{ Array.isArray($json.body?.data) && $json.body.data.length === 0 }}',
		);

		expect(next(SEARCH, 0)).toEqual([ROUTE]);
		expect(next(ROUTE, 0)).toEqual(['Answer Done']);
		expect(next(ROUTE, 1)).toEqual(['Answer Not Done']);
		expect(next(ROUTE, rules.length)).toEqual(['Answer Still Unknown']);
		expect(wf.connections[ROUTE].main).toHaveLength(rules.length + 1);

		// A non-2xx answer, a timeout, invalid JSON: the error output.
		const search = byName(SEARCH);
		expect(search.onError).toBe('continueErrorOutput');
		expect(next(SEARCH, 1)).toEqual(['Answer Still Unknown']);
		const response = (search.parameters.options as IDataObject).response as {
			response: IDataObject;
		};
		expect(response.response.neverError ?? false).toBe(false);
		// The whole answer in one item: a top-level JSON array is not split into items.
		expect(response.response.fullResponse).toBe(true);

		// No other way leads to Not Done.
		const intoNotDone = Object.entries(wf.connections).flatMap(([from, { main }]) =>
			main.flatMap((targets, output) =>
				targets.filter((t) => t.node === 'Answer Not Done').map(() => `${from}#${output}`),
			),
		);
		expect(intoNotDone).toEqual([`${ROUTE}#1`]);
	});

	it('ships with successful production executions not saved (their webhook item holds the Header Auth token)', () => {
		expect(wf.settings).toMatchObject({ saveDataSuccessExecution: 'none' });
		// Failed executions stay saved, for diagnosis.
		expect(wf.settings.saveDataErrorExecution).toBeUndefined();
	});

	/** The HTTP Request node's item for a 2xx answer with a JSON body (Full Response on). */
	const json = (body: unknown): IDataObject => ({
		body: body as IDataObject,
		headers: { 'content-type': 'application/json' },
		statusCode: 200,
		statusMessage: 'OK',
	});

	const cases: Array<[string, IDataObject, string]> = [
		[
			'one payment found',
			json({ data: [{ id: 'pay_1', idempotency_key: 'ik_1' }] }),
			'Answer Done',
		],
		['two found: the first', json({ data: [{ id: 'pay_1' }, { id: 'pay_2' }] }), 'Answer Done'],
		['a well-formed empty result', json({ data: [] }), 'Answer Not Done'],
		[
			'a 200 HTML page (n8n reads it as text)',
			{ data: '<html><body>Sign in</body></html>', headers: {}, statusCode: 200 },
			'Answer Still Unknown',
		],
		['an HTML string as the body', json('<html></html>'), 'Answer Still Unknown'],
		['an empty body', json({}), 'Answer Still Unknown'],
		['no body', { statusCode: 204, headers: {} }, 'Answer Still Unknown'],
		['a null body', json(null), 'Answer Still Unknown'],
		['data null', json({ data: null }), 'Answer Still Unknown'],
		['data an object', json({ data: { id: 'pay_1' } }), 'Answer Still Unknown'],
		['data a string', json({ data: '[]' }), 'Answer Still Unknown'],
		['data zero', json({ data: 0 }), 'Answer Still Unknown'],
		['an error member', json({ error: { message: 'search unavailable' } }), 'Answer Still Unknown'],
		['a top-level empty array', json([]), 'Answer Still Unknown'],
		['a top-level array holding data', json([{ data: [] }]), 'Answer Still Unknown'],
		['found without an id', json({ data: [{}] }), 'Answer Still Unknown'],
		['found with an empty id', json({ data: [{ id: '' }] }), 'Answer Still Unknown'],
		['found with a blank id', json({ data: [{ id: '  ' }] }), 'Answer Still Unknown'],
		['found with a number id', json({ data: [{ id: 42 }] }), 'Answer Still Unknown'],
		['found with a null entry', json({ data: [null] }), 'Answer Still Unknown'],
		['found with a string entry', json({ data: ['pay_1'] }), 'Answer Still Unknown'],
	];

	/** The node that the Switch sends item to, as n8n's Switch 3 does: the first rule that matches, else the fallback. */
	async function routeOf(engine: Engine, item: IDataObject): Promise<string[]> {
		const { evaluate, release } = await n8nContext({}, [{ json: item }], engine);
		try {
			let output = rules.length;
			for (const [index, rule] of rules.entries()) {
				const resolved = evaluate(`rule${index}`, 0, rule.conditions) as FilterValue;
				if (executeFilter(resolved)) {
					output = index;
					break;
				}
			}
			return next(ROUTE, output);
		} finally {
			await release();
		}
	}

	describe.each(ENGINES)("on n8n's %s expression engine", (engine) => {
		it.each(cases)('%s', async (_name, item, target) => {
			expect(await routeOf(engine, item)).toEqual([target]);
		});

		it('answers Done with the found id as the result reference', async () => {
			const { evaluate, release } = await n8nContext(
				{},
				[{ json: json({ data: [{ id: ' pay_1 ' }, { id: 'pay_2' }] }) }],
				engine,
			);
			try {
				const resultRef = byName('Answer Done').parameters.resultRef as INodeParameters[string];
				expect(evaluate('resultRef', 0, resultRef)).toBe('pay_1');
			} finally {
				await release();
			}
		});
	});
});
