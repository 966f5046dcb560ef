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
 *  - any other spelling whose value the double does not hold: more
 *    significant digits than a double keeps, beyond ±1.8e308 (Infinity) or a
 *    non-zero value below 5e-324 (0).
 * Every other number is the double, whose shortest spelling has the same
 * value as the text (0.1, 1.5, 1e21, 1.0 as 1). -0 stays the number -0
 * (JSON.stringify writes it 0): the same value as 0, as for claimd's keys.
 *
 * Node 21 and later give a reviver each number's source text
 * (context.source, TC39 "JSON.parse source text access"); on older runtimes
 * the text is rewritten first so that such numbers are JSON strings.
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
 * text with every JSON number that needsExactText quoted as a JSON string;
 * strings, literals and structure untouched. Only tokens that are JSON
 * numbers are quoted, so text that is not JSON stays not JSON.
 */
export function quoteInexactNumbers(text: string): string {
	let out = '';
	let from = 0;
	let i = 0;
	while (i < text.length) {
		const c = text.charCodeAt(i);
		if (c === 0x22 /* " */) {
			i++;
			while (i < text.length) {
				const d = text.charCodeAt(i);
				if (d === 0x5c /* \ */) i += 2;
				else if (d === 0x22) {
					i++;
					break;
				} else i++;
			}
			continue;
		}
		if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
			let end = i + 1;
			while (end < text.length && /[-+.eE0-9]/.test(text[end])) end++;
			const token = text.slice(i, end);
			if (JSON_NUMBER.test(token) && needsExactText(token)) {
				out += text.slice(from, i) + '"' + token + '"';
				from = end;
			}
			i = end;
			continue;
		}
		i++;
	}
	return out + text.slice(from);
}

/**
 * Parses JSON text as JSON.parse does, except that a number a JavaScript
 * number would change is its text, a string (see the file's comment).
 * Throws as JSON.parse does on text that is not JSON.
 */
export function parseExactJson(text: string, useSourceAccess = HAS_SOURCE_ACCESS): unknown {
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
