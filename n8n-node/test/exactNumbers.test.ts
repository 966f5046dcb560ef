import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import {
	needsExactText,
	parseExactJson,
	quoteInexactNumbers,
	sourceAccess,
} from '../nodes/IdempotentClaimTrigger/exactJson';
import { AxiosError, BASE_URL } from './helpers';
import { delivery, event, reply, runTrigger, triggerCalls, triggerContext } from './triggerHelpers';

/** Both ways of parsing: the reviver with source text access, and the rewrite for older runtimes. */
const WAYS = [
	['source text access', true],
	['rewrite', false],
] as const;

// Each number as sent, and what the exact parse gives.
const CASES: Array<[string, unknown]> = [
	['9007199254740993', '9007199254740993'],
	// A double holds it, but also stands for …993: one type for such a field.
	['9007199254740992', '9007199254740992'],
	['9007199254740991', 9007199254740991],
	['-9007199254740991', -9007199254740991],
	['-9007199254740992', '-9007199254740992'],
	['-9223372036854775809', '-9223372036854775809'],
	['18446744073709551617', '18446744073709551617'],
	['123456789012345678901234567890', '123456789012345678901234567890'],
	['0.1000000000000000055511151231257827', '0.1000000000000000055511151231257827'],
	['333333333.33333329', '333333333.33333329'],
	['9007199254740993.0', '9007199254740993.0'],
	['1e400', '1e400'],
	['-1E+400', '-1E+400'],
	['1e-400', '1e-400'],
	// Numbers whose value the double holds stay numbers.
	['0', 0],
	['0.1', 0.1],
	['-1.5', -1.5],
	['1.0', 1],
	['1e2', 100],
	['1E21', 1e21],
	['1.7976931348623157e308', 1.7976931348623157e308],
	['5e-324', 5e-324],
	['0.0e-999', 0],
	['9007199254740992.0', 9007199254740992],
	['4200', 4200],
];

describe('needsExactText', () => {
	it.each(CASES)('%s', (text, want) => {
		expect(needsExactText(text)).toBe(typeof want === 'string');
	});

	it('keeps -0 a number: the same value as 0 (JSON.stringify writes 0), as for claimd keys', () => {
		expect(needsExactText('-0')).toBe(false);
		expect(needsExactText('-0.0')).toBe(false);
		expect(Object.is(parseExactJson('-0'), -0)).toBe(true);
	});
});

describe('parseExactJson', () => {
	it('runs on a runtime with JSON.parse source text access (Node 21+)', () => {
		expect(sourceAccess).toBe(true);
	});

	describe.each(WAYS)('by %s', (_name, way) => {
		it.each(CASES)('%s at top level, in an object and in an array', (text, want) => {
			expect(parseExactJson(text, way)).toEqual(want);
			expect(parseExactJson(`{"n": ${text}}`, way)).toEqual({ n: want });
			expect(parseExactJson(`[1,${text} , [${text}]]`, way)).toEqual([1, want, [want]]);
		});

		it('keeps two orders one apart as two values, nested anywhere', () => {
			const body =
				'{"orders":[{"id":9007199254740993,"lines":[{"sku":18446744073709551617,"qty":2}]},' +
				'{"id":9007199254740992,"lines":[]}],"total":-9223372036854775809,"ok":true,"note":null}';
			expect(parseExactJson(body, way)).toEqual({
				orders: [
					{ id: '9007199254740993', lines: [{ sku: '18446744073709551617', qty: 2 }] },
					{ id: '9007199254740992', lines: [] },
				],
				total: '-9223372036854775809',
				ok: true,
				note: null,
			});
		});

		it('leaves strings, names and escapes as JSON.parse reads them', () => {
			const body =
				'{"9007199254740993":"9007199254740993","s":"a\\"1e400\\\\","u":"\\u0031e400","e":""}';
			expect(parseExactJson(body, way)).toEqual(JSON.parse(body));
		});

		it('refuses what JSON.parse refuses, and says nothing of the text', () => {
			for (const bad of [
				'{1e400: 1}',
				'01',
				'[1,]',
				'+1',
				'1.',
				'.5',
				'"a',
				'',
				'{"a":9007199254740993',
			]) {
				expect(() => parseExactJson(bad, way), bad).toThrow(SyntaxError);
			}
		});
	});

	it('gives the same value by both ways on random documents', () => {
		let seed = 7;
		const rand = (n: number) => {
			seed = (seed * 1103515245 + 12345) % 2 ** 31;
			return seed % n;
		};
		const numbers = CASES.map(([text]) => text).concat(['-0', '12', '3.25e-7']);
		const value = (depth: number): string => {
			const pick = rand(depth > 3 ? 3 : 6);
			if (pick === 0) return numbers[rand(numbers.length)];
			if (pick === 1) return JSON.stringify(`s${rand(1000)}"\\1e400`);
			if (pick === 2) return ['true', 'false', 'null'][rand(3)];
			if (pick === 3)
				return `[${Array.from({ length: rand(4) }, () => value(depth + 1)).join(',')}]`;
			return `{${Array.from({ length: rand(4) }, (_, i) => `"k${i}": ${value(depth + 1)}`).join(',')}}`;
		};
		for (let i = 0; i < 300; i++) {
			const doc = value(0);
			const want = JSON.parse(doc, (_key: string, value: unknown, context?: { source?: string }) =>
				typeof value === 'number' && context?.source !== undefined && needsExactText(context.source)
					? context.source
					: value,
			) as unknown;
			expect(parseExactJson(doc, true), doc).toEqual(want);
			expect(parseExactJson(doc, false), doc).toEqual(want);
		}
	});

	it('finds every number the engine would keep as text (checked against a reviver alone)', () => {
		const reviver = (_key: string, value: unknown, context?: { source?: string }) =>
			typeof value === 'number' && context?.source !== undefined && needsExactText(context.source)
				? context.source
				: value;
		const docs = [
			'{"a":"x\\\\","b":9007199254740993}',
			'["\\"9007199254740993",9007199254740993]',
			'{"e":-1E+400,"f":[0.1000000000000000055511151231257827]}',
			'  9007199254740993  ',
		];
		for (const doc of docs) {
			const want = JSON.parse(doc, reviver as Parameters<typeof JSON.parse>[1]) as unknown;
			expect(parseExactJson(doc), doc).toEqual(want);
			expect(parseExactJson(doc, false), doc).toEqual(want);
		}
	});

	it('rewrites only numbers: quoteInexactNumbers', () => {
		expect(quoteInexactNumbers('{"a":9007199254740993,"b":"9007199254740993","c":1}')).toBe(
			'{"a":"9007199254740993","b":"9007199254740993","c":1}',
		);
	});
});

/** The items of the execution the trigger starts. */
function items(result: { workflowData?: INodeExecutionData[][] }): INodeExecutionData[] {
	expect(result.workflowData).toHaveLength(1);
	return result.workflowData?.[0] ?? [];
}

const ORDERS =
	'{"id":9007199254740993,"amount":0.1000000000000000055511151231257827,"big":1e400,"z":-0}';

describe('the trigger with Options → Exact Numbers', () => {
	it('is off by default: the body is what n8n parsed, as from its Webhook node', async () => {
		const { ctx } = triggerContext({
			request: delivery({ body: ORDERS, parsed: JSON.parse(ORDERS) }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(reply('won', [event('e', 'won')]));
		const [item] = items(await runTrigger(ctx));
		expect(item.json.body).toEqual({ id: 9007199254740992, amount: 0.1, big: Infinity, z: -0 });
		expect(triggerCalls(ctx)[0].encoding).toBeUndefined();
	});

	it('reads the body from its raw bytes: numbers a JavaScript number would change are their digits', async () => {
		const { ctx } = triggerContext({
			params: { options: { exactNumbers: true } },
			request: delivery({ body: `\ufeff${ORDERS}`, parsed: JSON.parse(ORDERS) }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			JSON.stringify(reply('won', [event('9007199254740993', 'won')])),
		);
		const [item] = items(await runTrigger(ctx));
		expect(item.json.body).toEqual({
			id: '9007199254740993',
			amount: '0.1000000000000000055511151231257827',
			big: '1e400',
			z: -0,
		});
		expect((item.json.idempotency as IDataObject).event_id).toBe('9007199254740993');
	});

	it("reads a batch event payload from claimd's reply as text, exactly", async () => {
		const { ctx } = triggerContext({
			params: { options: { exactNumbers: true } },
			request: delivery({
				body: '[{"id":9007199254740993},{"id":9007199254740992}]',
				contentType: 'application/cloudevents-batch+json',
			}),
		});
		const text = JSON.stringify(
			reply('won', [
				event('a', 'won', { payload: { id: '@A' } }),
				event('b', 'won', { payload: { id: '@B' } }),
			]),
		)
			.replace('"@A"', '9007199254740993')
			.replace('"@B"', '9007199254740992');
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(text);
		const run = items(await runTrigger(ctx));
		expect(triggerCalls(ctx)[0].encoding).toBe('text');
		expect(run.map((i) => i.json.body)).toEqual([
			{ id: '9007199254740993' },
			{ id: '9007199254740992' },
		]);
	});

	it("keeps n8n's body for a form, and for a JSON media type whose bytes are not JSON", async () => {
		const form = triggerContext({
			params: { options: { exactNumbers: true } },
			request: delivery({
				body: 'id=9007199254740993',
				parsed: { id: '9007199254740993' },
				contentType: 'application/x-www-form-urlencoded',
			}),
		});
		form.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			JSON.stringify(reply('won', [event('e', 'won')])),
		);
		expect(items(await runTrigger(form.ctx))[0].json.body).toEqual({ id: '9007199254740993' });

		const broken = triggerContext({
			params: { options: { exactNumbers: true } },
			request: delivery({ body: '{"id":', parsed: { kept: 'n8n' } }),
		});
		broken.ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
			JSON.stringify(reply('won', [event('e', 'won')])),
		);
		expect(items(await runTrigger(broken.ctx))[0].json.body).toEqual({ kept: 'n8n' });
	});

	it("maps claimd's refusals read as text as before (no such source: not retried, 503)", async () => {
		const { ctx, res } = triggerContext({
			params: { source: 'nope', options: { exactNumbers: true } },
		});
		ctx.helpers.httpRequestWithAuthentication.mockRejectedValue(
			new AxiosError('Request failed with status code 404', 'ERR_BAD_REQUEST', {
				status: 404,
				data: JSON.stringify({ error: { code: 'not_found', message: 'no such source' } }),
			}),
		);
		expect(await runTrigger(ctx)).toEqual({ noWebhookResponse: true });
		expect(triggerCalls(ctx)).toHaveLength(1);
		expect(triggerCalls(ctx)[0].url).toBe(`${BASE_URL}/v1/trigger/nope`);
		expect(res.statusCode).toBe(503);
		expect(JSON.stringify(ctx.logger.error.mock.calls)).toContain(
			'claimd has no source \\"nope\\" for this API key',
		);
	});

	it("answers 503 when the text at the Base URL is not claimd's reply", async () => {
		const { ctx, res } = triggerContext({ params: { options: { exactNumbers: true } } });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue('<html>hello</html>');
		expect(await runTrigger(ctx)).toEqual({ noWebhookResponse: true });
		expect(res.statusCode).toBe(503);
	});
});
