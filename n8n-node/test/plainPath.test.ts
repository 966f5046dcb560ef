import type {
	IDataObject,
	IHttpRequestOptions,
	INodeParameters,
	INodeProperties,
	NodeApiError,
} from 'n8n-workflow';
import { afterAll, describe, expect, it } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { plainPathOf } from '../nodes/IdempotentClaim/helpers/plainPath';
import { BASE_URL, requests, run, type Context } from './helpers';
import { ENGINES, n8nContext, stopEngines } from './n8nParameters';
import { nodeParameterAgainstN8n } from './plainPathCases';

afterAll(async () => {
	await stopEngines();
});

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

nodeParameterAgainstN8n(ENGINES);

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
