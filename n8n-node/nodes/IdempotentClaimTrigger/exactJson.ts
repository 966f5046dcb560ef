/**
 * JSON parsing that keeps every number a JavaScript number would change.
 *
 * JSON.parse turns every number into an IEEE-754 double: 9007199254740993
 * becomes 9007199254740992 (two order ids one apart read as one),
 * 0.1000000000000000055511151231257827 becomes 0.1, and 1e400 becomes
 * Infinity, which JSON.stringify writes as null. parseExactJson keeps such a
 * number as a string of its digits exactly as sent; every other number stays
 * a number.
 *
 * A number is kept as a string when:
 *  - it is written as an integer (digits only, optional minus) outside the
 *    safe integers, ±(2^53 − 1): even 9007199254740992, which a double holds,
 *    since the double 9007199254740992 also stands for 9007199254740993, so
 *    such a field has one type whatever its value;
 *  - any other spelling that the double gives back (its shortest spelling,
 *    as JSON.stringify writes it) with another value: more significant
 *    digits than a double keeps (0.1000000000000000055511151231257827 comes
 *    back as 0.1), beyond ±1.8e308 (Infinity, written null) or a non-zero
 *    value below 5e-324 (0).
 * Every other number is the double, which gives back the value sent (0.1,
 * 1.5, 1e21, 1.0 as 1). -0 stays the number -0
 * (JSON.stringify writes it 0): the same value as 0, as for claimd's keys.
 *
 * Node 21 and later give a reviver each number's source text
 * (context.source, TC39 "JSON.parse source text access"); on older runtimes
 * the text is rewritten first so that such numbers are JSON strings. A text
 * without such a number (one scan) is parsed by JSON.parse alone.
 */

/** The value of a JSON number's text: sign, significant digits, exponent of the last digit. */
interface Decimal {
	negative: boolean;
	/** Significant digits, no leading or trailing zeros; "" for zero. */
	digits: string;
	exponent: number;
}

const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;
const JSON_INTEGER = /^-?(0|[1-9]\d*)$/;

/** The decimal value of a JSON number (or a JavaScript number's String()), or undefined when text is not one. */
function decimalOf(text: string): Decimal | undefined {
	const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
	if (m === null) return undefined;
	const [, sign, whole, fraction = '', exp = '0'] = m;
	let digits = whole + fraction;
	let exponent = Number(exp) - fraction.length;
	const lead = digits.search(/[^0]/);
	if (lead < 0) return { negative: false, digits: '', exponent: 0 };
	digits = digits.slice(lead);
	const trimmed = digits.replace(/0+$/, '');
	exponent += digits.length - trimmed.length;
	return { negative: sign === '-', digits: trimmed, exponent };
}

/**
 * Whether the JSON number written as text must be kept as a string (see
 * the file's comment). text must match the JSON number grammar.
 */
export function needsExactText(text: string): boolean {
	const value = Number(text);
	if (JSON_INTEGER.test(text)) return !Number.isSafeInteger(value);
	// At most 15 digits and no exponent: a double holds every such decimal
	// (DBL_DIG is 15), and its shortest spelling has the same value.
	if (text.length <= 17 && !/[eE]/.test(text) && text.replace(/[-.]/g, '').length <= 15) {
		return false;
	}
	if (!Number.isFinite(value)) return true;
	const sent = decimalOf(text);
	const held = decimalOf(String(value));
	if (sent === undefined || held === undefined) return true;
	return (
		sent.digits !== held.digits ||
		(sent.digits !== '' && (sent.negative !== held.negative || sent.exponent !== held.exponent))
	);
}

interface ReviverContext {
	source?: string;
}

/** Whether this runtime's JSON.parse gives a reviver the source text of a number. */
function probeSourceAccess(): boolean {
	let seen: unknown;
	JSON.parse('1', function (this: unknown, _key: string, value: unknown, context?: ReviverContext) {
		seen = context?.source;
		return value;
	} as unknown as Parameters<typeof JSON.parse>[1]);
	return seen === '1';
}

const HAS_SOURCE_ACCESS = probeSourceAccess();

function exactReviver(
	this: unknown,
	_key: string,
	value: unknown,
	context?: ReviverContext,
): unknown {
	if (typeof value !== 'number') return value;
	const source = context?.source;
	if (typeof source !== 'string') return value;
	return needsExactText(source) ? source : value;
}

/**
 * A JSON string (with its escapes) or a run of number characters. In JSON
 * text every token outside a string that starts with '-' or a digit is a
 * number.
 */
const TOKENS = /"[^"\\]*(?:\\[\s\S][^"\\]*)*"?|-?[0-9][-+.eE0-9]*/g;

/** Calls fn with each number token of text (a JSON number or not) and its offset. */
function eachNumberToken(text: string, fn: (token: string, at: number) => boolean): void {
	TOKENS.lastIndex = 0;
	for (let m = TOKENS.exec(text); m !== null; m = TOKENS.exec(text)) {
		if (m[0].charCodeAt(0) !== 0x22 /* " */ && fn(m[0], m.index)) return;
	}
}

/** Whether text holds a JSON number that needsExactText. */
function hasInexactNumber(text: string): boolean {
	let found = false;
	eachNumberToken(text, (token) => {
		found = JSON_NUMBER.test(token) && needsExactText(token);
		return found;
	});
	return found;
}

/**
 * text with every JSON number that needsExactText quoted as a JSON string;
 * strings, literals and structure untouched. Only tokens that are JSON
 * numbers are quoted, so text that is not JSON stays not JSON.
 */
export function quoteInexactNumbers(text: string): string {
	let out = '';
	let from = 0;
	eachNumberToken(text, (token, at) => {
		if (JSON_NUMBER.test(token) && needsExactText(token)) {
			out += text.slice(from, at) + '"' + token + '"';
			from = at + token.length;
		}
		return false;
	});
	return out + text.slice(from);
}

/**
 * Parses JSON text as JSON.parse does, except that a number a JavaScript
 * number would change is its text, a string (see the file's comment).
 * Throws as JSON.parse does on text that is not JSON. Text without such a
 * number is parsed by JSON.parse alone (a scan first: the reviver costs
 * about ten times JSON.parse).
 */
export function parseExactJson(text: string, useSourceAccess = HAS_SOURCE_ACCESS): unknown {
	if (!hasInexactNumber(text)) return JSON.parse(text) as unknown;
	if (useSourceAccess) {
		return JSON.parse(text, exactReviver as Parameters<typeof JSON.parse>[1]);
	}
	// Validate the text as it is: quoting makes a number in a key's place
	// ({1e400: 1}) a string, which would turn invalid JSON valid.
	JSON.parse(text);
	return JSON.parse(quoteInexactNumbers(text));
}

/** Whether this runtime's JSON.parse gives revivers the source text (for tests). */
export const sourceAccess = HAS_SOURCE_ACCESS;
