/*
 * The JSON Canonicalization Scheme (JCS, RFC 8785): one text for one JSON
 * value, whatever order its object members came in and however its numbers
 * and strings were written, so that equal values hash equally.
 *
 * - Object members are sorted by their names compared as arrays of UTF-16
 *   code units (RFC 8785 section 3.2.3), which is what JavaScript's default
 *   string comparison does.
 * - Strings are written as ECMAScript's JSON.stringify writes them (section
 *   3.2.2.2): the shortest escapes, other characters as they are.
 * - Numbers are written as ECMAScript's Number.prototype.toString writes
 *   them (section 3.2.2.3, the same algorithm); -0 is written 0.
 * - No whitespace.
 *
 * Kept here rather than taken from a package: an n8n community node carries
 * no runtime dependencies.
 */

/** Why a value has no canonical JSON text; `path` names the place ("$.a.0"). */
export class CanonicalJsonError extends Error {
	constructor(
		readonly path: string,
		problem: string,
	) {
		super(`${path} ${problem}`);
		this.name = 'CanonicalJsonError';
	}
}

/** A lone UTF-16 surrogate: RFC 8785 takes I-JSON, which refuses them. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function isPlainObject(value: object): boolean {
	const prototype: unknown = Object.getPrototypeOf(value);
	return prototype === Object.prototype || prototype === null;
}

function text(value: string, path: string): string {
	if (LONE_SURROGATE.test(value)) {
		throw new CanonicalJsonError(path, 'holds a lone UTF-16 surrogate, not Unicode text');
	}
	return JSON.stringify(value);
}

function write(value: unknown, path: string): string {
	if (value === null) return 'null';
	switch (typeof value) {
		case 'boolean':
			return value ? 'true' : 'false';
		case 'string':
			return text(value, path);
		case 'number':
			if (!Number.isFinite(value)) {
				throw new CanonicalJsonError(path, `is ${String(value)}, not a JSON number`);
			}
			// JSON.stringify writes -0 as 0 and every other finite number as
			// Number.prototype.toString does.
			return JSON.stringify(value);
		case 'object': {
			if (Array.isArray(value)) {
				// Array.from visits holes as undefined, refused below.
				return `[${Array.from(value, (entry, index) => write(entry, `${path}.${index}`)).join(',')}]`;
			}
			if (!isPlainObject(value)) {
				throw new CanonicalJsonError(path, 'is not a plain JSON object');
			}
			const names = Object.keys(value).sort();
			const members = names.map((name) => {
				const member = (value as Record<string, unknown>)[name];
				return `${text(name, `${path}.${name}`)}:${write(member, `${path}.${name}`)}`;
			});
			return `{${members.join(',')}}`;
		}
		default:
			throw new CanonicalJsonError(path, `is ${typeof value}, not a JSON value`);
	}
}

/**
 * The RFC 8785 canonical JSON text of `value`. Throws a CanonicalJsonError
 * naming the place of the first part that is no JSON value: undefined, a
 * function, a bigint or symbol, NaN or an infinity, an object other than a
 * plain object or array (a Date, a Map), or text with a lone surrogate.
 */
export function canonicalJson(value: unknown): string {
	return write(value, '$');
}
