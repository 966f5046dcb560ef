import type { IDataObject } from 'n8n-workflow';

import type { ProviderResponse, TriggerEvent } from './transport';

/** An answer to the provider: status, headers and the exact body bytes (or text). */
export interface Answer {
	status: number;
	headers: Record<string, string>;
	body: string | Buffer;
}

/** The groups of Options → Answers. */
export type AnswerKind = 'won' | 'duplicate' | 'conflict' | 'inProgress' | 'refused';

/** One configured answer: a status code and a body ('' keeps claimd's body). */
export interface ConfiguredAnswer {
	statusCode: number;
	body: string;
}

/** The status codes each configured answer may have, and how a wrong one is named. */
const ALLOWED: Record<AnswerKind, { ok: (code: number) => boolean; words: string; label: string }> =
	{
		won: { ok: (c) => c >= 200 && c <= 299, words: '2xx', label: 'Won (Respond Immediately)' },
		duplicate: { ok: (c) => c >= 200 && c <= 599, words: '200 to 599', label: 'Duplicate' },
		conflict: { ok: (c) => c >= 200 && c <= 599, words: '200 to 599', label: 'Conflict' },
		inProgress: {
			ok: (c) => c === 409 || c === 503,
			words: '409 or 503 (never 2xx: the event is not done and must be delivered again)',
			label: 'In Progress',
		},
		refused: {
			ok: (c) => c >= 400 && c <= 599,
			words:
				"400 to 599 (never 2xx: a delivery that was not authenticated is not taken; a 2xx is the source's own unauthenticated_status in claimd)",
			label: 'Refused',
		},
	};

/** Status when claimd could not decide: the provider delivers again later. */
export const UNAVAILABLE_STATUS = 503;
/** Retry-After, in seconds, of that answer. */
export const UNAVAILABLE_RETRY_AFTER = '5';

/**
 * The answer to a delivery claimd did not decide (unreachable, refused the
 * call, or n8n failed before the call): 503 with Retry-After, never 2xx,
 * and nothing about the cause.
 */
export function unavailableAnswer(): Answer {
	return {
		status: UNAVAILABLE_STATUS,
		headers: {
			'Content-Type': 'application/json',
			'Retry-After': UNAVAILABLE_RETRY_AFTER,
		},
		body: JSON.stringify({
			error: {
				code: 'unavailable',
				message: 'the delivery was not accepted; deliver it again later',
			},
		}),
	};
}

/** claimd's `response` as an answer: its body as text, or the bytes of body_base64. */
export function claimdAnswer(response: ProviderResponse): Answer {
	const headers: Record<string, string> = {};
	for (const [name, value] of Object.entries(response.headers ?? {})) {
		if (typeof value === 'string') headers[name] = value;
		else if (typeof value === 'number') headers[name] = String(value);
	}
	let body: string | Buffer = '';
	if (typeof response.body === 'string') body = response.body;
	else if (typeof response.body_base64 === 'string' && response.body_base64 !== '') {
		body = Buffer.from(response.body_base64, 'base64');
	}
	return { status: response.status, headers, body };
}

/** Which configured answer a decision takes, if any (handshakes, filters and refusals of the content keep claimd's). */
export function answerKind(decision: string): AnswerKind | undefined {
	switch (decision) {
		case 'won':
			return 'won';
		case 'duplicate':
		case 'stale':
		case 'dead_lettered':
		case 'unknown':
			return 'duplicate';
		case 'conflict':
			return 'conflict';
		case 'in_progress':
		case 'retry_later':
			return 'inProgress';
		case 'unauthenticated':
			return 'refused';
		default:
			return undefined;
	}
}

/** Whether an event is not done yet and another delivery must bring it: in_progress or retry_later. */
export function isUnfinished(event: TriggerEvent): boolean {
	return event.outcome === 'in_progress' || event.outcome === 'retry_later';
}

function isObject(value: unknown): value is IDataObject {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The configured answers of Options → Answers, and a sentence for each one
 * whose status code is not allowed (those are left out, so claimd's own
 * answer is sent instead: an in-progress event is never answered 2xx).
 */
export function configuredAnswers(value: unknown): {
	answers: Partial<Record<AnswerKind, ConfiguredAnswer>>;
	problems: string[];
} {
	const answers: Partial<Record<AnswerKind, ConfiguredAnswer>> = {};
	const problems: string[] = [];
	if (!isObject(value)) return { answers, problems };
	for (const kind of Object.keys(ALLOWED) as AnswerKind[]) {
		const entry = value[kind];
		if (!isObject(entry)) continue;
		const code = typeof entry.statusCode === 'string' ? Number(entry.statusCode) : entry.statusCode;
		const rule = ALLOWED[kind];
		if (typeof code !== 'number' || !Number.isInteger(code) || !rule.ok(code)) {
			problems.push(
				`Options → Answers → ${rule.label}: Status Code ${String(entry.statusCode)} is not allowed; use ${rule.words}`,
			);
			continue;
		}
		answers[kind] = { statusCode: code, body: typeof entry.body === 'string' ? entry.body : '' };
	}
	return { answers, problems };
}

/** Headers that describe claimd's body or its connection, not the answer. */
const BODY_HEADERS = new Set(['content-type', 'content-length']);

/**
 * base with a configured answer laid over it: the configured status, and
 * the configured body when it is not empty (as application/json when it is
 * JSON, else text/plain). claimd's other headers stay (Retry-After).
 */
export function withConfigured(base: Answer, configured: ConfiguredAnswer | undefined): Answer {
	if (configured === undefined) return base;
	if (configured.body === '') return { ...base, status: configured.statusCode };
	const headers: Record<string, string> = {};
	for (const [name, value] of Object.entries(base.headers)) {
		if (!BODY_HEADERS.has(name.toLowerCase())) headers[name] = value;
	}
	headers['Content-Type'] = isJson(configured.body)
		? 'application/json'
		: 'text/plain; charset=utf-8';
	return { status: configured.statusCode, headers, body: configured.body };
}

function isJson(text: string): boolean {
	try {
		JSON.parse(text);
		return true;
	} catch {
		return false;
	}
}

/** A header of an answer, by name in any case. */
export function headerOf(answer: Answer, name: string): string | undefined {
	const wanted = name.toLowerCase();
	for (const [key, value] of Object.entries(answer.headers)) {
		if (key.toLowerCase() === wanted) return value;
	}
	return undefined;
}

/**
 * The answer for events another delivery holds (in_progress) or whose
 * retry is not due (retry_later): the configured In Progress answer or
 * claimd's, never 2xx, always with Retry-After (claimd's, else the
 * soonest retry_after_seconds of the events, else 5 s).
 */
export function inProgressAnswer(
	base: Answer,
	events: TriggerEvent[],
	configured: ConfiguredAnswer | undefined,
): Answer {
	let answer = withConfigured(base, configured);
	if (answer.status >= 200 && answer.status < 300) {
		// claimd never answers an unfinished event 2xx; should it, the event
		// would be lost.
		answer = { ...answer, status: UNAVAILABLE_STATUS };
	}
	if (headerOf(answer, 'Retry-After') === undefined) {
		const soonest = events
			.map((event) => event.retry_after_seconds)
			.filter((s): s is number => typeof s === 'number' && s > 0)
			.sort((a, b) => a - b)[0];
		answer = {
			...answer,
			headers: { ...answer.headers, 'Retry-After': String(soonest ?? UNAVAILABLE_RETRY_AFTER) },
		};
	}
	return answer;
}
