import type {
	IDataObject,
	IHttpRequestOptions,
	INodeExecutionData,
	INodeParameters,
	INodeProperties,
	NodeApiError,
} from 'n8n-workflow';
import { afterAll, describe, expect, it } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { nodeParameter } from '../nodes/IdempotentClaim/helpers/parameters';
import { plainPathOf, readPlainPath } from '../nodes/IdempotentClaim/helpers/plainPath';
import { BASE_URL, requests, run, type Context } from './helpers';
import { ENGINES, n8nContext, stopEngines } from './n8nParameters';

afterAll(async () => {
	await stopEngines();
});

/** Runs fn, for its value or its error's message and description. */
function outcome(fn: () => unknown): { value?: unknown; error?: string } {
	try {
		return { value: fn() };
	} catch (error) {
		const { message, description } = error as { message: string; description?: string };
		return { error: `${message} | ${description ?? ''}` };
	}
}

/** Whether two outcomes are the same: values by Object.is for primitives (NaN, -0), deeply otherwise. */
function sameOutcome(
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

describe('plainPathOf', () => {
	it('accepts a plain path of $json, in every spelling n8n reads the same way', () => {
		const accepted: Array<[string, string[]]> = [
			['={{ $json.body.id }}', ['body', 'id']],
			['={{$json.body.id}}', ['body', 'id']],
			['={{   $json.body.id   }}', ['body', 'id']],
			['={{\n\t$json.body.id\r\n}}', ['body', 'id']],
			['={{ $json["body"]["id"] }}', ['body', 'id']],
			["={{ $json['body']['id'] }}", ['body', 'id']],
			['={{ $json[ "body" ].id }}', ['body', 'id']],
			['={{$json.idempotency.claim_token}}', ['idempotency', 'claim_token']],
			['={{ $json.items[0].id }}', ['items', '0', 'id']],
			['={{ $json.items[ 12 ].id }}', ['items', '12', 'id']],
			['={{ $json.items.length }}', ['items', 'length']],
			['={{ $json.headers["x-github-delivery"] }}', ['headers', 'x-github-delivery']],
			['={{ $json["a.b"] }}', ['a.b']],
			['={{ $json["with space"]["é"] }}', ['with space', 'é']],
			['={{ $json[""] }}', ['']],
			['={{ $json.$ }}', ['$']],
			['={{ $json._id.$oid }}', ['_id', '$oid']],
			['={{ $json.default.class }}', ['default', 'class']],
		];
		for (const [expression, path] of accepted) {
			expect(plainPathOf(expression), expression).toEqual(path);
		}
	});

	it('leaves everything else to n8n', () => {
		const refused: unknown[] = [
			// Not an expression, or more than one field.
			'$json.body.id',
			'{{ $json.body.id }}',
			'={{ $json }}',
			'={{ $json.a }}{{ $json.b }}',
			// Text around the expression: n8n joins it into a string.
			'=id {{ $json.body.id }}',
			'={{ $json.body.id }} ',
			'= {{ $json.body.id }}',
			'={{ $json.body.id }}\n',
			// Other syntax.
			'={{ $json.body.id.trim() }}',
			'={{ $json.body?.id }}',
			'={{ $json.body.id || "none" }}',
			'={{ $json . body }}',
			'={{ $json.body. id }}',
			'={{ $json [0] }}',
			'={{ $json[`body`] }}',
			'={{ $json[body] }}',
			'={{ $json[01] }}',
			'={{ $json[-1] }}',
			'={{ $json[1.5] }}',
			'={{ $json[1e0] }}',
			'={{ $json[12345678901] }}',
			'={{ $json["a\\"b"] }}',
			'={{ $json["a\\u0041"] }}',
			"={{ $json['it''s'] }}",
			'={{ $json["a}}b"] }}',
			'={{ $json["a{b"] }}',
			'={{ $json["a\tb"] }}',
			'={{ $json.é }}',
			'={{ $json.1a }}',
			'={{ $jsonx.a }}',
			'={{ $data.body.id }}',
			'={{ $node["Webhook"].json.body.id }}',
			"={{ $('Webhook').item.json.body.id }}",
			'={{ $input.item.json.body.id }}',
			'={{\u00a0$json.body.id }}',
			// Keys n8n refuses, or that every object inherits.
			'={{ $json.__proto__ }}',
			'={{ $json.body.constructor }}',
			'={{ $json["x.constructor"] }}',
			'={{ $json.prototype }}',
			'={{ $json.caller }}',
			'={{ $json.arguments }}',
			'={{ $json.binding }}',
			'={{ $json.toString }}',
			'={{ $json.body["valueOf"] }}',
			'={{ $json.hasOwnProperty }}',
			// Not text.
			5,
			null,
			undefined,
			{ value: '={{ $json.body.id }}' },
		];
		for (const value of refused) {
			expect(plainPathOf(value), JSON.stringify(value)).toBeUndefined();
		}
	});
});

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
		['unsafe integer', { body: { id: 9007199254740993 } }],
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

describe.each(ENGINES)("nodeParameter against n8n's %s engine", (engine) => {
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

describe("the node's parameters", () => {
	it("declare nothing n8n's getNodeParameter checks or converts after evaluating (so nodeParameter's value is n8n's)", () => {
		const found: string[] = [];
		const visit = (properties: unknown[], where: string) => {
			for (const property of properties as Array<INodeProperties & { values?: unknown[] }>) {
				const at = `${where}${property.name}`;
				if (property.validateType !== undefined) found.push(`${at}: validateType`);
				if (['resourceMapper', 'filter', 'assignmentCollection'].includes(property.type)) {
					found.push(`${at}: ${property.type}`);
				}
				for (const option of (property.options ?? []) as Array<{ values?: unknown[] }>) {
					if (typeof option === 'object' && 'name' in option && 'type' in option) {
						visit([option], `${at}.`);
					}
					if (Array.isArray(option.values)) visit(option.values, `${at}.`);
				}
			}
		};
		visit(new IdempotentClaim().description.properties, '');
		expect(found).toEqual([]);
	});
});

/** Answers Claim and Complete requests with a plausible success. */
function answer(ctx: Context): void {
	ctx.helpers.httpRequestWithAuthentication.mockImplementation(async (_type, options) => {
		const url = String((options as IHttpRequestOptions).url);
		const claims = (((options as IHttpRequestOptions).body as IDataObject)?.claims ??
			[]) as IDataObject[];
		if (url === `${BASE_URL}/v1/claims/batch`) {
			return {
				results: claims.map((claim, index) => ({
					outcome: 'won',
					claim_id: `c-${index}`,
					claim_token: `t-${index}`,
					idempotency_key: JSON.stringify(claim.event_id ?? claim.key_parts),
					state: 'processing',
				})),
			};
		}
		return {
			results: claims.map((claim) => ({ claim_id: claim.claim_id, state: 'completed' })),
		};
	});
}

/** What one node run did: its outputs or its error, and its requests. */
async function runOnce(ctx: Context) {
	answer(ctx);
	let result: { outputs?: unknown; error?: string };
	try {
		result = { outputs: (await run(ctx)).map((output) => output.map((item) => item.json)) };
	} catch (error) {
		const { message, description } = error as NodeApiError;
		result = { error: `${message} | ${description ?? ''}` };
	}
	return { ...result, sent: requests(ctx).map((options) => options.body) };
}

const CLAIMS: Array<[string, INodeParameters]> = [
	['Event ID ={{ $json.body.id }}', { eventId: '={{ $json.body.id }}' }],
	['Event ID ={{ $json["body"]["id"] }}', { eventId: '={{ $json["body"]["id"] }}' }],
	['Event ID ={{ $json.body.id.toString() }}', { eventId: '={{ $json.body.id.toString() }}' }],
	[
		'Key Parts',
		{
			keyMode: 'composite',
			keyParts: {
				parts: [{ value: '={{ $json.body.type }}' }, { value: '={{ $json.body.id }}' }],
			} as unknown as INodeParameters,
		},
	],
	[
		'Event Type and Action Name mapped',
		{
			eventId: '={{ $json.body.id }}',
			eventType: '={{ $json.body.type }}',
			actionName: '={{ $json.action }}',
			options: { objectId: '={{ $json.body.id }}', objectVersion: 2 },
		},
	],
];

const CLAIM_ITEMS: Array<[string, IDataObject]> = [
	['text', { body: { id: 'evt_1', type: 'invoice.paid' }, action: 'mail' }],
	['number', { body: { id: 42, type: 'invoice.paid' }, action: 'mail' }],
	['null', { body: { id: null, type: null }, action: null }],
	['missing', { body: {} }],
	['no body', {}],
	['object', { body: { id: { a: 1 }, type: ['x'] }, action: { a: 1 } }],
	['boolean', { body: { id: true, type: false }, action: true }],
	['blank', { body: { id: ' ', type: '' }, action: ' ' }],
];

describe.each(ENGINES)("the node, on n8n's %s engine", (engine) => {
	for (const [label, stored] of CLAIMS) {
		for (const [shape, json] of CLAIM_ITEMS) {
			it(`Claim, ${label}, item ${shape}: the same requests, outputs and errors as when n8n evaluates every parameter`, async () => {
				const parameters: INodeParameters = {
					operation: 'claim',
					source: 'stripe',
					payloadMode: 'none',
					...stored,
				};
				const items = () => [{ json: structuredClone(json) }, { json: { body: { id: 'evt_2' } } }];
				const fast = await n8nContext(parameters, items(), engine, { continueOnFail: true });
				const reference = await n8nContext(parameters, items(), engine, {
					continueOnFail: true,
					evaluateAll: true,
				});
				try {
					expect(await runOnce(fast.ctx)).toStrictEqual(await runOnce(reference.ctx));
				} finally {
					await fast.release();
					await reference.release();
				}
			});
		}
	}

	it('Claim with a plain Event ID and fixed settings asks n8n to evaluate nothing', async () => {
		const items = [{ json: { body: { id: 'evt_1' } } }, { json: { body: { id: 'evt_2' } } }];
		const n8n = await n8nContext(
			{ operation: 'claim', source: 'stripe', eventId: '={{ $json.body.id }}' },
			items,
			engine,
		);
		try {
			const got = await runOnce(n8n.ctx);
			expect((got.sent[0] as IDataObject).claims).toMatchObject([
				{ source: 'stripe', event_id: 'evt_1', payload: { body: { id: 'evt_1' } } },
				{ source: 'stripe', event_id: 'evt_2', payload: { body: { id: 'evt_2' } } },
			]);
			expect(n8n.reads.map((read) => read.name)).toEqual([]);
		} finally {
			await n8n.release();
		}
	});

	it('Complete and Fail with mapped Claim ID, Token, Result Reference and Error Message ask n8n nothing', async () => {
		const items = [
			{ json: { claim: { id: 'c-1', token: 't-1' }, invoice: 'in_1', why: 'smtp 451' } },
			{ json: { claim: { id: 'c-2', token: 't-2' }, invoice: 'in_2', why: 'smtp 451' } },
		];
		for (const stored of [
			{ operation: 'complete', resultRef: '={{ $json.invoice }}' },
			{ operation: 'fail', errorMessage: '={{ $json["why"] }}' },
		]) {
			const n8n = await n8nContext(
				{
					...stored,
					claimId: '={{ $json.claim.id }}',
					claimToken: '={{$json.claim.token}}',
				},
				items,
				engine,
			);
			try {
				const got = await runOnce(n8n.ctx);
				expect((got.sent[0] as IDataObject).claims).toEqual(
					stored.operation === 'complete'
						? [
								{ claim_id: 'c-1', claim_token: 't-1', result_ref: 'in_1' },
								{ claim_id: 'c-2', claim_token: 't-2', result_ref: 'in_2' },
							]
						: [
								{ claim_id: 'c-1', claim_token: 't-1', error: 'smtp 451', retry: 'retryable' },
								{ claim_id: 'c-2', claim_token: 't-2', error: 'smtp 451', retry: 'retryable' },
							],
				);
				expect(n8n.reads.map((read) => read.name)).toEqual([]);
			} finally {
				await n8n.release();
			}
		}
	});
});
