import type { IDataObject, INodeExecutionData, INodeParameters } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { nodeParameter } from '../nodes/IdempotentClaim/helpers/parameters';
import { plainPathOf, readPlainPath } from '../nodes/IdempotentClaim/helpers/plainPath';
import { n8nContext, type Engine } from './n8nParameters';

/*
 * nodeParameter compared with n8n's own evaluation (n8n-workflow's
 * Expression, as n8n-core's getNodeParameter calls it) for a table of
 * expressions and items, on the engines given: the same value or error for
 * every pair, and n8n asked exactly where the item cannot be read.
 */

/** Runs fn, for its value or its error's message and description. */
export function outcome(fn: () => unknown): { value?: unknown; error?: string } {
	try {
		return { value: fn() };
	} catch (error) {
		const { message, description } = error as { message: string; description?: string };
		return { error: `${message} | ${description ?? ''}` };
	}
}

/** Whether two outcomes are the same: values by Object.is for primitives (NaN, -0), deeply otherwise. */
export function sameOutcome(
	a: { value?: unknown; error?: string },
	b: { value?: unknown; error?: string },
) {
	if (a.error !== undefined || b.error !== undefined) return a.error === b.error;
	if (typeof a.value !== 'object' || a.value === null) return Object.is(a.value, b.value);
	try {
		expect(a.value).toStrictEqual(b.value);
		return true;
	} catch {
		return false;
	}
}

/** Item JSON of many shapes, one item each. */
function shapes(): Array<[string, IDataObject]> {
	class Custom {
		id = 'custom';
	}
	const nullPrototype = Object.create(null) as IDataObject;
	nullPrototype.id = 'np-1';
	return [
		['text id', { body: { id: 'evt_1' } }],
		['empty id', { body: { id: '' } }],
		['blank id', { body: { id: '  ' } }],
		['id with braces', { body: { id: '{{ 1 + 1 }}' } }],
		['id starting with =', { body: { id: '={{ 7 }}' } }],
		['lone surrogate', { body: { id: '\ud800x' } }],
		['number id', { body: { id: 42 } }],
		['zero', { body: { id: 0 } }],
		['negative zero', { body: { id: -0 } }],
		['NaN', { body: { id: Number.NaN } }],
		['Infinity', { body: { id: Number.POSITIVE_INFINITY } }],
		['unsafe integer', { body: { id: 2 ** 60 } }],
		['boolean id', { body: { id: true } }],
		['false id', { body: { id: false } }],
		['null id', { body: { id: null } }],
		['undefined id', { body: { id: undefined } }],
		['no id', { body: {} }],
		['no body', {}],
		['null body', { body: null }],
		['text body', { body: 'raw text' }],
		['number body', { body: 7 }],
		['array body', { body: ['a'] }],
		['object id', { body: { id: { nested: 'x' } } }],
		['array id', { body: { id: ['x'] } }],
		['empty object id', { body: { id: {} } }],
		['date id', { body: { id: new Date(0) } }],
		['null-prototype body', { body: nullPrototype }],
		['class instance body', { body: new Custom() as unknown as IDataObject }],
		['arrays', { items: [{ id: 'first' }, { id: 2 }, null], list: ['a', 'b'], matrix: [['m00']] }],
		[
			'odd keys',
			{
				'a.b': 'dotted key',
				a: { b: 'nested' },
				headers: { 'x-github-delivery': 'gh-1' },
				'with space': { é: 'accent' },
				'': 'empty key',
				$: 'dollar',
				obj: {
					isProxy: 'ip',
					then: 'th',
					toJSON: 'tj',
					map: 'mp',
					length: 'own length',
					0: 'zero',
				},
				default: { class: 'reserved words' },
				_id: { $oid: 'oid' },
			},
		],
		[
			'keys objects inherit, as own fields',
			JSON.parse(
				'{"obj":{"toString":"ts","valueOf":"vo","hasOwnProperty":"hop","constructor":"c","__proto__":"p"}}',
			) as IDataObject,
		],
		['empty object', { obj: {} }],
	];
}

const EXPRESSIONS = [
	// Plain paths.
	'={{ $json.body.id }}',
	'={{$json.body.id}}',
	'={{ $json["body"]["id"] }}',
	"={{ $json['body'].id }}",
	'={{\n\t$json.body.id\n}}',
	'={{ $json.body }}',
	'={{ $json.body.id.nested }}',
	'={{ $json.body.length }}',
	'={{ $json.body[0] }}',
	'={{ $json.items[0].id }}',
	'={{ $json.items[1].id }}',
	'={{ $json.items[2].id }}',
	'={{ $json.items[9].id }}',
	'={{ $json.items.length }}',
	'={{ $json.items.map }}',
	'={{ $json.list[1] }}',
	'={{ $json.matrix[0][0] }}',
	'={{ $json["a.b"] }}',
	'={{ $json.a.b }}',
	'={{ $json.headers["x-github-delivery"] }}',
	'={{ $json["with space"]["é"] }}',
	'={{ $json[""] }}',
	'={{ $json.$ }}',
	'={{ $json.obj.isProxy }}',
	'={{ $json.obj.then }}',
	'={{ $json.obj.toJSON }}',
	'={{ $json.obj.map }}',
	'={{ $json.obj.length }}',
	'={{ $json.obj[0] }}',
	'={{ $json.obj.missing }}',
	'={{ $json.default.class }}',
	'={{ $json._id.$oid }}',
	// Left to n8n.
	'={{ $json.body.id.toString() }}',
	'={{ $json.body?.id }}',
	'={{ $json.body.id || "none" }}',
	'=id-{{ $json.body.id }}',
	'={{ $json.body.id }} ',
	'={{ $json }}',
	'={{ $json.obj.toString }}',
	'={{ $json.obj.valueOf }}',
	'={{ $json.obj.constructor }}',
	'={{ $json.obj.__proto__ }}',
	'={{ $json.obj["__proto__"] }}',
	'={{ $json.caller }}',
	'fixed-id',
];

export function nodeParameterAgainstN8n(engines: Engine[]): void {
	describe.each(engines)("nodeParameter against n8n's %s engine", (engine) => {
		const table = shapes();
		const items: INodeExecutionData[] = table.map(([, json]) => ({ json }));

		it.each(EXPRESSIONS)(
			'%s: the value or error n8n gives, for every item; n8n asked only where the item cannot be read',
			async (expression) => {
				const n8n = await n8nContext(
					{ operation: 'claim', keyMode: 'eventId', eventId: expression },
					items,
					engine,
				);
				try {
					const path = plainPathOf(expression);
					const mismatches: string[] = [];
					table.forEach(([shape, json], itemIndex) => {
						const expected = outcome(() => n8n.evaluate('eventId', itemIndex));
						n8n.reads.length = 0;
						const actual = outcome(() => nodeParameter.call(n8n.ctx, 'eventId', itemIndex));
						const asked = n8n.evaluated().includes('eventId');
						const readable =
							expression === 'fixed-id' ||
							(path !== undefined && readPlainPath(json, path) !== undefined);
						if (!sameOutcome(actual, expected)) {
							mismatches.push(`${shape}: got ${String(actual.value)} ${actual.error ?? ''}`);
						}
						if (asked === readable) mismatches.push(`${shape}: asked n8n ${String(asked)}`);
					});
					expect(mismatches).toEqual([]);
				} finally {
					await n8n.release();
				}
			},
		);

		it('reads the everyday paths without n8n: text, numbers, booleans, null and a missing field', () => {
			const read = (json: IDataObject) => readPlainPath(json, ['body', 'id']);
			expect(read({ body: { id: 'evt_1' } })).toEqual({ value: 'evt_1' });
			expect(read({ body: { id: 42 } })).toEqual({ value: 42 });
			expect(read({ body: { id: false } })).toEqual({ value: false });
			expect(read({ body: { id: null } })).toEqual({ value: null });
			expect(read({ body: {} })).toEqual({ value: undefined });
			expect(read({})).toEqual({ value: undefined });
			expect(read({ body: null })).toEqual({ value: undefined });
			expect(readPlainPath({ items: [{ id: 'a' }] }, ['items', '0', 'id'])).toEqual({ value: 'a' });
			// Left to n8n: an object, a string stepped into, a Date.
			expect(read({ body: { id: { a: 1 } } })).toBeUndefined();
			expect(read({ body: 'text' })).toBeUndefined();
			expect(read({ body: { id: new Date(0) } })).toBeUndefined();
		});

		it('an item the input does not have is left to n8n (its own error)', async () => {
			const one = [{ json: { body: { id: 'evt_1' } } }];
			const n8n = await n8nContext(
				{ operation: 'claim', keyMode: 'eventId', eventId: '={{ $json.body.id }}' },
				one,
				engine,
			);
			try {
				const expected = outcome(() => n8n.evaluate('eventId', 3));
				expect(expected.error).toBeDefined();
				n8n.reads.length = 0;
				expect(outcome(() => nodeParameter.call(n8n.ctx, 'eventId', 3))).toEqual(expected);
				expect(n8n.evaluated()).toEqual(['eventId']);
			} finally {
				await n8n.release();
			}
		});

		it('Key Parts: plain paths and fixed values read without n8n, any other part sends the whole list to n8n', async () => {
			const partSets: unknown[][] = [
				['={{ $json.body.type }}', '={{ $json["body"]["data"]["id"] }}'],
				['fixed', '={{ $json.body.version }}', 3],
				['={{ $json.body.type }}', '={{ $json.body.type.toUpperCase() }}'],
				// An object found is n8n's (items 0), a missing field is not (items 1, 2).
				['={{ $json.body.data }}'],
			];
			/** Whether n8n must resolve a part for an item: not a plain path, or not readable. */
			const n8nPart = (value: unknown, json: IDataObject) => {
				if (typeof value !== 'string' || !value.startsWith('=')) return false;
				const path = plainPathOf(value);
				return path === undefined || readPlainPath(json, path) === undefined;
			};
			const partItems: INodeExecutionData[] = [
				{ json: { body: { type: 'invoice.paid', data: { id: 'in_1' }, version: 4 } } },
				{ json: { body: { type: 'invoice.paid', version: null } } },
				{ json: {} },
			];
			for (const values of partSets) {
				const stored: INodeParameters = {
					operation: 'claim',
					keyMode: 'composite',
					keyParts: { parts: values.map((value) => ({ value })) } as unknown as INodeParameters,
				};
				const n8n = await n8nContext(stored, partItems, engine);
				try {
					partItems.forEach((_, itemIndex) => {
						const expected = outcome(() => n8n.evaluate('keyParts', itemIndex, {}));
						n8n.reads.length = 0;
						const actual = outcome(() => nodeParameter.call(n8n.ctx, 'keyParts', itemIndex, {}));
						expect(actual, JSON.stringify(values)).toStrictEqual(expected);
						const asked = n8n.evaluated().includes('keyParts');
						expect(asked, `${JSON.stringify(values)} item ${itemIndex}`).toBe(
							values.some((value) => n8nPart(value, partItems[itemIndex].json)),
						);
					});
				} finally {
					await n8n.release();
				}
			}
		});

		it('a stored value without expressions is that value, without n8n; one with an expression inside is resolved', async () => {
			const options = {
				objectId: 'order-1',
				objectVersion: 3,
				leasePolicy: 'review',
				waitSeconds: 5,
			};
			const mapped = { objectId: '={{ $json.body.id }}', objectVersion: 3 };
			const evaluated = { objectId: '={{ $json.body.id + "-x" }}' };
			const one = [{ json: { body: { id: 'evt_1' } } }];
			for (const [value, asked] of [
				[options, false],
				[mapped, false],
				[evaluated, true],
			] as const) {
				const n8n = await n8nContext(
					{ operation: 'claim', source: 'stripe', leaseSeconds: 120, options: value },
					one,
					engine,
				);
				try {
					for (const [name, fallback] of [
						['options', {}],
						['source', undefined],
						['leaseSeconds', undefined],
						['operation', undefined],
					] as const) {
						const expected = n8n.evaluate(name, 0, fallback);
						n8n.reads.length = 0;
						expect(nodeParameter.call(n8n.ctx, name, 0, fallback), name).toStrictEqual(expected);
						expect(n8n.evaluated().length > 0, name).toBe(name === 'options' && asked);
					}
				} finally {
					await n8n.release();
				}
			}
		});

		it('a parameter the node does not store is n8n’s: its fallback, or its error', async () => {
			const one = [{ json: {} }];
			const n8n = await n8nContext({ operation: 'claim' }, one, engine);
			try {
				expect(nodeParameter.call(n8n.ctx, 'notAParameter', 0, 'fb')).toBe('fb');
				expect(() => nodeParameter.call(n8n.ctx, 'notAParameter', 0)).toThrow(
					'Could not get parameter "notAParameter"',
				);
				expect(n8n.reads.map((read) => read.name)).toEqual(['notAParameter', 'notAParameter']);
			} finally {
				await n8n.release();
			}
		});
	});
}
