import type { IDataObject, INodeExecutionData } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import {
	type Context,
	type ParamValue,
	claimParams,
	claimResult,
	createContext,
	requests,
	run,
	webhookItems,
} from './helpers';

/*
 * No empty identities: a value that identifies an event (Event ID, a key part,
 * a hashed field) must never be one that many events share, nor a number n8n
 * may already have rounded. Such an item fails before any claim is sent.
 */

/** 2^53: the first integer a double cannot tell from its neighbour (2^53 + 1 arrives as 2^53). */
const UNSAFE = 2 ** 53;

const EMPTY_VALUES: Array<[string, unknown]> = [
	['null', null],
	['undefined', undefined],
	['""', ''],
	['{}', {}],
	['[]', []],
];

const BAD_NUMBERS: Array<[string, number, string]> = [
	['2^53', UNSAFE, 'beyond the integers n8n keeps exact'],
	['-(2^53)', -UNSAFE, 'beyond the integers n8n keeps exact'],
	['1e21', 1e21, 'beyond the integers n8n keeps exact'],
	['NaN', NaN, 'is NaN, not a finite number'],
	['Infinity', Infinity, 'is Infinity, not a finite number'],
	['-Infinity', -Infinity, 'is -Infinity, not a finite number'],
];

/** Two items whose second one carries `bad` at body.order_ref. */
function orderItems(bad: unknown): INodeExecutionData[] {
	return [
		{ json: { body: { order_ref: 'A-1', amount: 10 } } },
		{ json: { body: { order_ref: bad, amount: 99 } } },
	];
}

/** Runs the node, expects it to fail for item 1 before any request, and returns the error. */
async function failureOf(ctx: Context): Promise<NodeOperationError> {
	const failure = await run(ctx).catch((error: unknown) => error);
	expect(failure).toBeInstanceOf(NodeOperationError);
	expect((failure as NodeOperationError).context.itemIndex).toBe(1);
	expect(ctx.helpers.httpRequestWithAuthentication).not.toHaveBeenCalled();
	return failure as NodeOperationError;
}

function hashParams(items: INodeExecutionData[], keyFields = 'body.order_ref') {
	return claimParams(items, { keyMode: 'hash', keyFields });
}

function compositeParams(items: INodeExecutionData[], second: ParamValue) {
	return claimParams(items, {
		keyMode: 'composite',
		keyParts: (index: number) => ({
			parts: [{ value: 'order' }, { value: index === 1 ? second : 'A-1' }],
		}),
	});
}

describe('No empty identities: Event ID', () => {
	for (const [name, value] of [...EMPTY_VALUES, ['only whitespace', '  ']]) {
		it(`refuses an Event ID that is ${name}`, async () => {
			const items = webhookItems(['evt_1', 'evt_2']);
			const ctx = createContext({
				items,
				params: claimParams(items, {
					eventId: (index: number) => (index === 1 ? value : 'evt_1'),
				}),
			});
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(/^Event ID is empty \(.+\) \[item 1\]$/);
			expect(failure.description).toContain("provider's event or delivery ID");
		});
	}

	for (const [name, value, problem] of BAD_NUMBERS) {
		it(`refuses an Event ID that is the number ${name}`, async () => {
			const items = webhookItems(['evt_1', 'evt_2']);
			const ctx = createContext({
				items,
				params: claimParams(items, { eventId: (index: number) => (index === 1 ? value : 1) }),
			});
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(/^Event ID is /);
			expect(failure.message).toContain(problem);
			expect(failure.message).toMatch(/\[item 1\]$/);
		});
	}

	it('refuses an Event ID that is an object, naming its kind', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				eventId: (index: number) => (index === 1 ? { id: 'evt_2' } : 'evt_1'),
			}),
		});
		const failure = await failureOf(ctx);
		expect(failure.message).toBe('Event ID must be text or a number, not an object [item 1]');
	});

	it('sends valid Event IDs unchanged: "0", 0, negative numbers, non-ASCII text', async () => {
		const ids: unknown[] = ['0', 0, -17, Number.MAX_SAFE_INTEGER, 'évt_ü_東京_🚀', ' padded '];
		const items = webhookItems(ids.map((_, index) => `evt_${index}`));
		const ctx = createContext({
			items,
			params: claimParams(items, { eventId: (index: number) => ids[index] }),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: ids.map((_, index) => claimResult(`evt_${index}`, 'won')),
		});
		await run(ctx);
		const claims = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claims.map((claim) => claim.event_id)).toEqual([
			'0',
			'0',
			'-17',
			'9007199254740991',
			'évt_ü_東京_🚀',
			' padded ',
		]);
	});
});

describe('No empty identities: Key Parts', () => {
	for (const [name, value] of EMPTY_VALUES) {
		it(`refuses a key part that is ${name}`, async () => {
			const items = webhookItems(['evt_1', 'evt_2']);
			const ctx = createContext({ items, params: compositeParams(items, value) });
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(/^Key part 2 is empty \(.+\) \[item 1\]$/);
			expect(failure.description).toContain('Every key part must resolve to non-empty text');
		});
	}

	for (const [name, value, problem] of BAD_NUMBERS) {
		it(`refuses a key part that is the number ${name}`, async () => {
			const items = webhookItems(['evt_1', 'evt_2']);
			const ctx = createContext({ items, params: compositeParams(items, value) });
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(/^Key part 2 is /);
			expect(failure.message).toContain(problem);
			expect(failure.message).toMatch(/\[item 1\]$/);
		});
	}

	it('tells the user to key on the text form of a rounded integer', async () => {
		// 9007199254740993 cannot be held by a double: it arrives as 9007199254740992,
		// the same number as a different order's 9007199254740992.
		const rounded = Number('9007199254740993');
		expect(rounded).toBe(9007199254740992);
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: compositeParams(items, rounded) });
		const failure = await failureOf(ctx);
		expect(failure.message).toBe(
			`Key part 2 is the number 9007199254740992, beyond the integers n8n keeps exact (±${Number.MAX_SAFE_INTEGER}) [item 1]`,
		);
		expect(failure.description).toContain('Key on its text form instead');
		expect(failure.description).toContain('Options → Exact Numbers');
		expect(failure.description).toContain('raw request body');
	});

	it('refuses a key part that is a non-empty list, naming its kind', async () => {
		const items = webhookItems(['evt_1', 'evt_2']);
		const ctx = createContext({ items, params: compositeParams(items, ['a']) });
		const failure = await failureOf(ctx);
		expect(failure.message).toBe('Key part 2 must be text or a number, not a list [item 1]');
	});

	it('sends valid key parts as text: 0, false, "0", negative numbers, non-ASCII text', async () => {
		const values: unknown[] = [
			0,
			false,
			'0',
			-5,
			-0.25,
			true,
			Number.MAX_SAFE_INTEGER,
			-Number.MAX_SAFE_INTEGER,
			'Zürich · 東京 · 🚀',
			' ',
		];
		const items = webhookItems(['evt_1']);
		const ctx = createContext({
			items,
			params: claimParams(items, {
				keyMode: 'composite',
				keyParts: { parts: values.map((value) => ({ value })) },
			}),
		});
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('x', 'won')],
		});
		await run(ctx);
		const [claim] = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claim.key_parts).toEqual([
			'0',
			'false',
			'0',
			'-5',
			'-0.25',
			'true',
			'9007199254740991',
			'-9007199254740991',
			'Zürich · 東京 · 🚀',
			' ',
		]);
	});
});

describe('No empty identities: Fields to Hash', () => {
	for (const [name, value] of EMPTY_VALUES) {
		it(`refuses a hashed field that is ${name}`, async () => {
			const items = orderItems(value);
			const ctx = createContext({ items, params: hashParams(items) });
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(
				/^Fields to Hash: field "body\.order_ref" is empty \(.+\) \[item 1\]$/,
			);
			expect(failure.description).toContain('Choose fields every event fills');
		});
	}

	it('refuses a field missing from the item, naming the item', async () => {
		const items: INodeExecutionData[] = [
			{ json: { body: { order_ref: 'A-1' } } },
			{ json: { body: {} } },
		];
		const ctx = createContext({ items, params: hashParams(items) });
		const failure = await failureOf(ctx);
		expect(failure.message).toBe(
			'Fields to Hash: field "body.order_ref" is missing from the item [item 1]',
		);
	});

	it('refuses a null nested inside an object field, naming the field and the path inside it', async () => {
		const items = orderItems({ customer: { id: null, name: 'Ann' }, lines: 2 });
		const ctx = createContext({ items, params: hashParams(items) });
		const failure = await failureOf(ctx);
		expect(failure.message).toBe(
			'Fields to Hash: field "body.order_ref" at "body.order_ref.customer.id" is empty (null) [item 1]',
		);
	});

	const nested: Array<[string, unknown, string]> = [
		['"" in an object', { code: '' }, '"body.order_ref.code" is empty ("")'],
		['{} in an object', { meta: {} }, '"body.order_ref.meta" is empty ({})'],
		['[] in an object', { tags: [] }, '"body.order_ref.tags" is empty ([])'],
		['null in a list', ['a', null], '"body.order_ref.1" is empty (null)'],
		[
			'undefined in an object',
			{ id: 'x', extra: undefined },
			'"body.order_ref.extra" is empty (undefined)',
		],
		[
			'a hole in a sparse list',
			Object.assign(new Array<unknown>(3), { 0: 'a', 2: 'c' }),
			'"body.order_ref.1" is empty (undefined)',
		],
		[
			'an unsafe integer in an object',
			{ id: UNSAFE },
			'"body.order_ref.id" is the number 9007199254740992',
		],
		['NaN in a list', [1, NaN], '"body.order_ref.1" is NaN, not a finite number'],
	];
	for (const [name, value, expected] of nested) {
		it(`refuses ${name} inside a hashed field`, async () => {
			const items = orderItems(value);
			const ctx = createContext({ items, params: hashParams(items) });
			const failure = await failureOf(ctx);
			expect(failure.message).toContain(`Fields to Hash: field "body.order_ref" at ${expected}`);
			expect(failure.message).toMatch(/\[item 1\]$/);
		});
	}

	for (const [name, value, problem] of BAD_NUMBERS) {
		it(`refuses a hashed field that is the number ${name}`, async () => {
			const items = orderItems(value);
			const ctx = createContext({ items, params: hashParams(items) });
			const failure = await failureOf(ctx);
			expect(failure.message).toMatch(/^Fields to Hash: field "body\.order_ref" is /);
			expect(failure.message).toContain(problem);
		});
	}

	it('sends valid values unchanged: 0, false, "0", negative numbers, non-ASCII text, nested', async () => {
		const body = {
			zero: 0,
			no: false,
			text_zero: '0',
			negative: -42,
			fraction: -0.5,
			biggest: Number.MAX_SAFE_INTEGER,
			name: 'Zoë Müller · 東京 · 🚀',
			nested: { a: 0, b: [false, '0', -1], c: { d: 'é' } },
		};
		const items: INodeExecutionData[] = [{ json: { body } }];
		const paths = Object.keys(body).map((name) => `body.${name}`);
		const ctx = createContext({ items, params: hashParams(items, paths.join(', ')) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('sha256:00', 'won')],
		});
		await run(ctx);
		const [claim] = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claim.key_fields).toStrictEqual(
			Object.fromEntries(Object.entries(body).map(([name, value]) => [`body.${name}`, value])),
		);
	});
});

describe('No empty identities: item errors', () => {
	it('with continue on fail, claims the other items and sends the refused one to the error output', async () => {
		const items: INodeExecutionData[] = [
			{ json: { body: { order_ref: 'A-1' } } },
			{ json: { body: { order_ref: null } } },
			{ json: { body: { order_ref: 'C-3' } } },
		];
		const ctx = createContext({ items, params: hashParams(items), continueOnFail: true });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('a', 'won'), claimResult('c', 'won')],
		});
		const outputs = await run(ctx);

		expect(ctx.helpers.httpRequestWithAuthentication).toHaveBeenCalledTimes(1);
		const claims = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claims.map((claim) => claim.key_fields)).toEqual([
			{ 'body.order_ref': 'A-1' },
			{ 'body.order_ref': 'C-3' },
		]);
		expect(outputs[0].map((item) => item.pairedItem)).toEqual([{ item: 0 }, { item: 2 }]);
		expect(outputs[1]).toHaveLength(1);
		const [failed] = outputs[1];
		expect(failed.pairedItem).toEqual({ item: 1 });
		expect(failed.error).toBeInstanceOf(NodeOperationError);
		expect(failed.json).toEqual({
			error: 'Fields to Hash: field "body.order_ref" is empty (null) [item 1]',
		});
	});

	it('keeps sending a null inside the payload for conflict detection (only identities are refused)', async () => {
		const items: INodeExecutionData[] = [
			{ json: { body: { id: 'evt_1', description: null, discounts: [] } } },
		];
		const ctx = createContext({ items, params: claimParams(items) });
		ctx.helpers.httpRequestWithAuthentication.mockResolvedValue({
			results: [claimResult('evt_1', 'won')],
		});
		await run(ctx);
		const [claim] = (requests(ctx)[0].body as { claims: IDataObject[] }).claims;
		expect(claim.payload).toEqual({ body: { id: 'evt_1', description: null, discounts: [] } });
	});
});
