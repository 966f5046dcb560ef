import type { IDataObject } from 'n8n-workflow';

import { FieldError, getField } from './fields';

/*
 * The values that identify an event (Event ID, Key Parts, Fields to Hash) must
 * never let two different events share a key: the second one would silently
 * never run. So a value is refused for its item, before any claim is sent, when
 * it is empty (null, undefined, "", {} or [], anywhere inside a hashed field),
 * when it is a number that is not finite (JSON would send it as null), or when
 * it is an integer beyond Number.MAX_SAFE_INTEGER (n8n parsed it from JSON as a
 * double and may have rounded it: 9007199254740993 arrives as 9007199254740992).
 * Every message names the parameter or field and the item ("[item 0]", as n8n
 * numbers items).
 */

const UNSAFE_NUMBER_HINT =
	'n8n parsed this number from JSON as a double and may have rounded it, so different values (9007199254740993 and 9007199254740992) arrive as the same number. Key on its text form instead: a string ID field the provider also sends (such as id_str), Options → Exact Numbers of the Idempotent Claim Trigger (such numbers become strings of their digits), or the digits taken from the raw request body (Webhook node option Raw Body and a Code node: the recipe in the idempotent-claim repository, sidecar/docs/ingest.md#numbers-beyond-253-in-the-forwarded-body).';

const NOT_FINITE_HINT =
	'NaN and Infinity are not JSON values: they would be sent as null, the same value for every such item. Correct the expression or field so that it yields the identifier itself.';

const EVENT_ID_HINT =
	'The Event ID expression resolved to an empty value for this item. Point it at the provider\'s event or delivery ID (e.g. {{ $json.headers["x-github-delivery"] }}); an item without one is not claimed, so that it can never be taken for another event.';

const KEY_PART_HINT =
	'Every key part must resolve to non-empty text or a number for every item: two events that both lack a part would otherwise share one key. Correct the expression, or leave out a part the events do not always carry.';

const KEY_FIELD_HINT =
	'Every value of a hashed field must be present, anywhere inside it: two events whose field is null or empty would otherwise share one key. Choose fields every event fills (such as its ID), or a narrower path that leaves optional sub-fields out.';

interface Fault {
	problem: string;
	hint: string;
}

function itemSuffix(itemIndex: number): string {
	return ` [item ${itemIndex}]`;
}

/** How an empty value is shown in messages; undefined when the value is not empty. */
function emptiness(value: unknown): string | undefined {
	if (value === undefined) return 'undefined';
	if (value === null) return 'null';
	if (value === '') return '""';
	if (Array.isArray(value)) return value.length === 0 ? '[]' : undefined;
	if (value instanceof Date) return Number.isNaN(value.getTime()) ? 'an invalid date' : undefined;
	if (typeof value === 'object' && Object.keys(value).length === 0) return '{}';
	return undefined;
}

/** Why a number cannot identify an event exactly; undefined when it can. */
function numberFault(value: number): Fault | undefined {
	if (!Number.isFinite(value)) {
		return { problem: `is ${String(value)}, not a finite number`, hint: NOT_FINITE_HINT };
	}
	if (Number.isInteger(value) && !Number.isSafeInteger(value)) {
		return {
			problem: `is the number ${String(value)}, beyond the integers n8n keeps exact (±${Number.MAX_SAFE_INTEGER})`,
			hint: UNSAFE_NUMBER_HINT,
		};
	}
	return undefined;
}

/** Why one value (not its contents) cannot be part of a key; undefined when it can. */
function fault(value: unknown, emptyHint: string): Fault | undefined {
	const empty = emptiness(value);
	if (empty !== undefined) return { problem: `is empty (${empty})`, hint: emptyHint };
	if (typeof value === 'number') return numberFault(value);
	if (typeof value === 'bigint' || typeof value === 'function' || typeof value === 'symbol') {
		return { problem: `is a ${typeof value}, not a JSON value`, hint: emptyHint };
	}
	return undefined;
}

/** The first value inside `value` (itself included) that cannot be part of a key, with its path. */
function firstFault(
	value: unknown,
	path: string,
	emptyHint: string,
): { path: string; fault: Fault } | undefined {
	const own = fault(value, emptyHint);
	if (own !== undefined) return { path, fault: own };
	if (typeof value !== 'object' || value === null || value instanceof Date) return undefined;
	// Array.from visits the holes of a sparse array (sent as null) as undefined.
	const children: Array<[string, unknown]> = Array.isArray(value)
		? Array.from(value, (child, index): [string, unknown] => [String(index), child])
		: Object.entries(value);
	for (const [name, child] of children) {
		const found = firstFault(child, `${path}.${name}`, emptyHint);
		if (found !== undefined) return found;
	}
	return undefined;
}

/**
 * Turns one identifying value (Event ID, a key part) into the text the sidecar
 * keys on: text as it is, a finite number within the exact integer range as
 * its decimal form, a boolean as "true"/"false" when `booleans` is set.
 * Throws a FieldError naming `label` and the item otherwise.
 */
function identityText(
	value: unknown,
	label: string,
	itemIndex: number,
	options: { hint: string; booleans: boolean; blankIsEmpty: boolean },
): string {
	const suffix = itemSuffix(itemIndex);
	if (typeof value === 'string') {
		if (value === '' || (options.blankIsEmpty && value.trim() === '')) {
			const shown = value === '' ? '""' : 'only whitespace';
			throw new FieldError(`${label} is empty (${shown})${suffix}`, options.hint);
		}
		return value;
	}
	if (typeof value === 'boolean' && options.booleans) return String(value);
	const found = fault(value, options.hint);
	if (found !== undefined) throw new FieldError(`${label} ${found.problem}${suffix}`, found.hint);
	if (typeof value === 'number') return String(value);
	const kind = Array.isArray(value)
		? 'a list'
		: typeof value === 'object'
			? 'an object'
			: typeof value;
	throw new FieldError(`${label} must be text or a number, not ${kind}${suffix}`, options.hint);
}

/** The Event ID of one item, as sent in `event_id`. */
export function eventIdText(value: unknown, itemIndex: number): string {
	return identityText(value, 'Event ID', itemIndex, {
		hint: EVENT_ID_HINT,
		booleans: false,
		blankIsEmpty: true,
	});
}

/** One key part (position counted from 1) of one item, as sent in `key_parts`. */
export function keyPartText(value: unknown, position: number, itemIndex: number): string {
	return identityText(value, `Key part ${position}`, itemIndex, {
		hint: KEY_PART_HINT,
		booleans: true,
		blankIsEmpty: false,
	});
}

/**
 * Builds `key_fields` of one item: the chosen fields keyed by their path, their
 * values unchanged. Throws a FieldError naming the field, the faulty value's
 * path inside it and the item when a field is missing or anything in its value
 * cannot identify an event (see the rule at the top of this file).
 */
export function keyFieldValues(json: IDataObject, paths: string[], itemIndex: number): IDataObject {
	const suffix = itemSuffix(itemIndex);
	const picked: IDataObject = {};
	for (const path of paths) {
		const { found, value } = getField(json, path);
		if (!found) {
			throw new FieldError(
				`Fields to Hash: field "${path}" is missing from the item${suffix}`,
				KEY_FIELD_HINT,
			);
		}
		const bad = firstFault(value, path, KEY_FIELD_HINT);
		if (bad !== undefined) {
			const where = bad.path === path ? '' : ` at "${bad.path}"`;
			throw new FieldError(
				`Fields to Hash: field "${path}"${where} ${bad.fault.problem}${suffix}`,
				bad.fault.hint,
			);
		}
		picked[path] = value as IDataObject[keyof IDataObject];
	}
	return picked;
}
