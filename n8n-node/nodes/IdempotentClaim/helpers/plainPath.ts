import { isSafeObjectProperty } from 'n8n-workflow';

/*
 * A plain path expression names one field of the item, and nothing else:
 * `={{ $json.body.id }}`, `={{ $json["body"]["id"] }}`, `={{$json.items[0].id}}`.
 * n8n evaluates every expression in its expression engine (n8n 2.x's
 * default, vm, runs it in an isolate: 1 to 5 ms each), although for such a
 * path the value is the field of the item's JSON (`$json` is the JSON of
 * the node's input item of the same index). The node reads such a field
 * itself (parameters.ts), and only where the result is certainly the one
 * n8n's evaluation gives, on its legacy, vm and quickjs engines alike (read
 * from n8n-workflow 2.41's Expression and WorkflowDataProxy, and compared on
 * its three engines in test/plainPath*.test.ts):
 *
 * - the parameter value is `={{`, optional whitespace, `$json`, then one or
 *   more steps `.name` (an ASCII identifier) or `[0]` (a whole number) or
 *   `["key"]` / `['key']` (a key without backslashes, quotes of its own
 *   kind, braces or line breaks), optional whitespace, `}}`: nothing before
 *   or after (text around an expression makes n8n join it into a string);
 * - no step names a key n8n refuses (`__proto__`, `constructor`,
 *   `prototype`, … : n8n throws "Cannot access … due to security
 *   concerns") or a key every object inherits (`toString`, `valueOf`, …:
 *   the vm engine resolves those to the inherited function even where the
 *   item has its own field of that name), and the text has no
 *   `.constructor` anywhere (n8n refuses the whole expression);
 * - the value found is a string, a number (NaN, Infinity and -0 included:
 *   n8n returns them as they are), a boolean, null, or undefined: n8n
 *   returns these unchanged, never converted to text, for a parameter of
 *   type string as for any other (a string with a lone surrogate excepted:
 *   n8n's quickjs engine returns it with U+FFFD in its place);
 * - a step that meets undefined or null gives undefined, as n8n does (its
 *   evaluation turns the TypeError into undefined); a key the object does
 *   not have gives undefined;
 * - only plain objects and arrays are stepped into; on an array, only an
 *   index or `length`.
 *
 * Anything else (other syntax, optional chaining, functions, `$node` or
 * `$('Name')`, `$json` itself, an object or array found, a string or a
 * number stepped into, a Date, …) is left to n8n: the caller then asks
 * getNodeParameter, which evaluates it as before.
 */

/** The keys of one plain path, in order: `$json.items[0].id` is ['items', '0', 'id']. */
export type PlainPath = readonly string[];

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*/;
const INDEX = /^\[[ \t]*(0|[1-9][0-9]{0,8})[ \t]*\]/;
const DOUBLE_QUOTED = /^\[[ \t]*"([^"\\{}]*)"[ \t]*\]/;
const SINGLE_QUOTED = /^\[[ \t]*'([^'\\{}]*)'[ \t]*\]/;
const CONSTRUCTOR = /\.\s*constructor/;
/** Spaces, tabs and line breaks at either end of the text between the braces. */
const EDGE_SPACE = /^[ \t\r\n]+|[ \t\r\n]+$/g;
const ARRAY_INDEX = /^(0|[1-9][0-9]*)$/;
/** A high surrogate not followed by a low one, or a low one not after a high one. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?:^|[^\ud800-\udbff])[\udc00-\udfff]/;

/**
 * The keys n8n 2.41 refuses to read in an expression (n8n-workflow's
 * unsafe object properties), kept here as well in case the n8n running the
 * node lacks isSafeObjectProperty; a newer n8n's own list is asked too.
 */
const REFUSED_KEYS = new Set([
	'__proto__',
	'prototype',
	'constructor',
	'getPrototypeOf',
	'setPrototypeOf',
	'getOwnPropertyDescriptor',
	'getOwnPropertyDescriptors',
	'defineProperty',
	'defineProperties',
	'mainModule',
	'binding',
	'_linkedBinding',
	'_load',
	'prepareStackTrace',
	'__lookupGetter__',
	'__lookupSetter__',
	'__defineGetter__',
	'__defineSetter__',
	'caller',
	'callee',
	'arguments',
	'getBuiltinModule',
	'dlopen',
	'execve',
	'loadEnvFile',
]);

/** Whether a quoted key holds what a JavaScript string literal cannot hold as it is. */
function hasLineBreakOrControl(key: string): boolean {
	for (let i = 0; i < key.length; i++) {
		const code = key.charCodeAt(i);
		if (code < 0x20 || code === 0x2028 || code === 0x2029 || code === 0x7f) return true;
	}
	return false;
}

/** Whether n8n's evaluation of `.key` may differ from reading the item's own field. */
function leftToN8n(key: string): boolean {
	if (REFUSED_KEYS.has(key) || key in Object.prototype) return true;
	return typeof isSafeObjectProperty === 'function' && !isSafeObjectProperty(key);
}

/**
 * The path of a parameter value that is a plain path expression (see the
 * rules above), or undefined when n8n must evaluate it.
 */
export function plainPathOf(raw: unknown): PlainPath | undefined {
	if (typeof raw !== 'string' || !raw.startsWith('={{') || !raw.endsWith('}}')) return undefined;
	if (CONSTRUCTOR.test(raw)) return undefined;
	let rest = raw.slice(3, -2).replace(EDGE_SPACE, '');
	if (rest.includes('{') || rest.includes('}') || !rest.startsWith('$json')) return undefined;
	rest = rest.slice('$json'.length);
	const path: string[] = [];
	while (rest !== '') {
		let key: string;
		let length: number;
		if (rest.startsWith('.')) {
			const name = IDENTIFIER.exec(rest.slice(1));
			if (name === null) return undefined;
			key = name[0];
			length = 1 + key.length;
		} else {
			const step = INDEX.exec(rest) ?? DOUBLE_QUOTED.exec(rest) ?? SINGLE_QUOTED.exec(rest);
			if (step === null) return undefined;
			key = step[1];
			if (hasLineBreakOrControl(key)) return undefined;
			length = step[0].length;
		}
		if (leftToN8n(key)) return undefined;
		path.push(key);
		rest = rest.slice(length);
	}
	return path.length > 0 ? path : undefined;
}

function isPlainObject(value: object): boolean {
	const prototype: unknown = Object.getPrototypeOf(value);
	return prototype === Object.prototype || prototype === null;
}

/** What reading a plain path found: the value n8n's evaluation gives, or undefined when n8n must decide. */
export type PlainRead = { value: unknown } | undefined;

const NOTHING: PlainRead = { value: undefined };

/**
 * Reads `path` in an item's JSON: `{ value }` with the value n8n's
 * evaluation of the path gives, or undefined when that is not certain (see
 * the rules above) and n8n must evaluate it.
 */
export function readPlainPath(json: unknown, path: PlainPath): PlainRead {
	let current: unknown = json;
	for (const key of path) {
		if (current === undefined || current === null) return NOTHING;
		if (typeof current !== 'object') return undefined;
		if (Array.isArray(current)) {
			if (key !== 'length' && !ARRAY_INDEX.test(key)) return undefined;
		} else if (!isPlainObject(current)) {
			return undefined;
		}
		current = Object.prototype.hasOwnProperty.call(current, key)
			? (current as Record<string, unknown>)[key]
			: undefined;
	}
	switch (typeof current) {
		case 'string':
			return LONE_SURROGATE.test(current) ? undefined : { value: current };
		case 'number':
		case 'boolean':
		case 'undefined':
			return { value: current };
		default:
			return current === null ? { value: null } : undefined;
	}
}
