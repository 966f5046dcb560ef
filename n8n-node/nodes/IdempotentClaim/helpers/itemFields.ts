import type { IExecuteFunctions, INodeExecutionData } from 'n8n-workflow';

/**
 * A parameter default that reads one field of the incoming item,
 * `={{ $json.idempotency.claim_id }}`: the expression as n8n stores it and
 * the field's path in the item's JSON.
 *
 * n8n evaluates every expression in its expression engine; on its default
 * engine (vm, an isolate) each one costs 1 to 5 ms. A parameter left at
 * such a default is read from the item instead (itemFieldParameter): `$json`
 * is the JSON of the node's input item of the same index, so the value is
 * the same.
 */
export interface ItemFieldDefault {
	/** The default value of the parameter, as n8n stores it. */
	readonly expression: string;
	/** The field it reads, e.g. ['idempotency', 'claim_id']. */
	readonly path: readonly string[];
}

/** The default `={{ $json.<path> }}`. */
export function itemFieldDefault(...path: string[]): ItemFieldDefault {
	return { expression: `={{ $json.${path.join('.')} }}`, path };
}

export const CLAIM_ID_DEFAULT = itemFieldDefault('idempotency', 'claim_id');
export const CLAIM_TOKEN_DEFAULT = itemFieldDefault('idempotency', 'claim_token');
export const LEASE_UNTIL_DEFAULT = itemFieldDefault('idempotency', 'lease_until');
/** The Error Trigger's item: the crashed execution. */
export const EXECUTION_ID_DEFAULT = itemFieldDefault('execution', 'id');
export const EXECUTION_ERROR_DEFAULT = itemFieldDefault('execution', 'error', 'message');

/**
 * What reading a field of an item's JSON found, as n8n's evaluation of
 * `$json.<path>` would give it:
 * - text: a string, the value;
 * - absent: undefined or null (a missing key, or a step of the path that
 *   is missing, null or not an object: n8n gives undefined or null, on its
 *   legacy and vm engines alike);
 * - other: anything else (a number, an object, …), left to n8n.
 */
export type ItemFieldRead =
	| { kind: 'text'; value: string }
	| { kind: 'absent' }
	| { kind: 'other' };

const ABSENT: ItemFieldRead = { kind: 'absent' };
const OTHER: ItemFieldRead = { kind: 'other' };

/** Reads the field at `path` of an item's JSON (see ItemFieldRead). */
export function readItemField(json: unknown, path: readonly string[]): ItemFieldRead {
	let current: unknown = json;
	for (const key of path) {
		if (current === undefined || current === null) return ABSENT;
		if (typeof current === 'object') {
			if (Object.prototype.hasOwnProperty.call(current, key)) {
				current = (current as Record<string, unknown>)[key];
				continue;
			}
			// Inherited (e.g. from an array's prototype): left to n8n.
			if (key in current) return OTHER;
			return ABSENT;
		}
		// A string, number or boolean has no such field, unless its
		// prototype does.
		return (Object(current) as Record<string, unknown>)[key] === undefined ? ABSENT : OTHER;
	}
	if (typeof current === 'string') return { kind: 'text', value: current };
	if (current === undefined || current === null) return ABSENT;
	return OTHER;
}

export interface ItemFieldOptions {
	/** As getNodeParameter's fallbackValue. */
	fallback?: unknown;
	/**
	 * Whether an absent field (undefined or null) may be answered with
	 * undefined without asking n8n: only where the caller treats undefined
	 * and null alike and needs no error for them (Lease Until). Otherwise
	 * n8n evaluates the default, so that the value and any error are n8n's.
	 */
	absentIsUndefined?: boolean;
}

/**
 * The node's operations read every parameter with nodeParameter
 * (parameters.ts), which reads these defaults, and any other plain path
 * expression, from the item in the same way (and null as null); this
 * narrower reader is kept for code outside the node that calls it.
 *
 * The value of parameter `name` for one item, as
 * `this.getNodeParameter(name, itemIndex, fallback)` gives it. When the
 * parameter holds its default `field.expression` (n8n's raw value, read
 * with rawExpressions), and the item's field is text, the text is returned
 * without evaluating the expression; likewise an absent field with
 * `absentIsUndefined`. Any other value of the parameter (a fixed value,
 * another expression) and any other field value is evaluated by n8n, as
 * before.
 */
export function itemFieldParameter(
	this: IExecuteFunctions,
	name: string,
	itemIndex: number,
	item: INodeExecutionData | undefined,
	field: ItemFieldDefault,
	options: ItemFieldOptions = {},
): unknown {
	let raw: unknown;
	try {
		raw = this.getNodeParameter(name, itemIndex, options.fallback, { rawExpressions: true });
	} catch {
		// n8n's own error for a missing parameter comes from the call below.
		raw = undefined;
	}
	if (raw === field.expression && item !== undefined) {
		const found = readItemField(item.json, field.path);
		if (found.kind === 'text') return found.value;
		if (found.kind === 'absent' && options.absentIsUndefined === true) return undefined;
	}
	return this.getNodeParameter(name, itemIndex, options.fallback);
}
