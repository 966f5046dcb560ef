import type { IDataObject } from 'n8n-workflow';

import type { ClaimRecord, ClaimResult } from '../transport/types';

function orNull<T>(value: T | undefined): T | null {
	return value === undefined ? null : value;
}

function isObject(value: unknown): value is IDataObject {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The `idempotency` object a Claim adds to each item. Every key is present
 * (null when the sidecar did not send it) so downstream expressions and
 * Switch rules see one shape for every outcome.
 */
export function claimSidecar(result: ClaimResult): IDataObject {
	const sidecar: IDataObject = {
		key: orNull(result.idempotency_key),
		source: orNull(result.source),
		event_id: orNull(result.event_id),
		action: orNull(result.action),
		claim_id: orNull(result.claim_id),
		claim_token: orNull(result.claim_token),
		attempt: orNull(result.attempt),
		outcome: orNull(result.outcome),
		state: orNull(result.state),
		result_ref: orNull(result.result_ref),
		retry_after_seconds: orNull(result.retry_after_seconds),
		next_attempt_at: orNull(result.next_attempt_at),
		lease_until: orNull(result.lease_until),
		key_expires_at: orNull(result.key_expires_at),
		key_expiry: orNull(result.key_expiry),
	};
	// Shadow mode: what claimd would have decided (would_be, cause); only
	// on a shadow claim's item, so other items keep their shape.
	if (isObject(result.shadow)) sidecar.shadow = { ...result.shadow };
	return sidecar;
}

/**
 * Whether an item's idempotency object is a shadow copy: a shadow claim
 * that would not have won, so it holds no claim token and there is
 * nothing to complete or fail.
 */
export function isShadowCopy(idempotency: unknown): boolean {
	if (!isObject(idempotency) || !isObject(idempotency.shadow)) return false;
	const token = idempotency.claim_token;
	return idempotency.shadow.would_be !== 'won' && (typeof token !== 'string' || token === '');
}

/** Keys of the `idempotency` object that every operation outputs, null when unknown. */
const SIDECAR_KEYS = [
	'key',
	'source',
	'event_id',
	'action',
	'claim_id',
	'claim_token',
	'attempt',
	'outcome',
	'state',
	'result_ref',
	'retry_after_seconds',
	'next_attempt_at',
	'lease_until',
	'key_expires_at',
	'key_expiry',
];

/** Facts of the claim answer that a claim record does not repeat. */
const CLAIM_ONLY_KEYS = ['claim_token', 'outcome', 'shadow'];

/**
 * The `idempotency` object after an operation that answers a claim record
 * (Complete, Fail, Extend Lease, Lookup, Resolve): the record, with
 * `idempotency_key` renamed `key` as in Claim's output and the keys of Claim's
 * output present (null when the record omits them, e.g. lease_until once
 * completed). When the item carries the sidecar of the same claim, its claim
 * token and claim outcome are kept, so a later Complete can still use them.
 */
export function recordSidecar(previous: unknown, record: ClaimRecord): IDataObject {
	const sidecar: IDataObject = {};
	for (const name of SIDECAR_KEYS) sidecar[name] = null;
	if (
		isObject(previous) &&
		previous.claim_id !== undefined &&
		previous.claim_id !== null &&
		previous.claim_id === record.claim_id
	) {
		for (const name of CLAIM_ONLY_KEYS) {
			if (previous[name] !== undefined) sidecar[name] = previous[name];
		}
	}
	for (const [name, value] of Object.entries(record)) {
		sidecar[name === 'idempotency_key' ? 'key' : name] = value;
	}
	return sidecar;
}

/** A copy of the item's JSON with `idempotency` set; the input item is left untouched. */
export function withIdempotency(json: IDataObject, idempotency: IDataObject): IDataObject {
	return { ...json, idempotency };
}

/**
 * The fields Simplify keeps of a claim record (Lookup, Get Many, Fail for
 * all claims of an execution): who the claim is, where it stands, its
 * result and time limit. Lookup adds `found`.
 */
export const SIMPLIFIED_KEYS = [
	'claim_id',
	'source',
	'event_id',
	'action',
	'state',
	'result_ref',
	'attempt',
	'lease_until',
	'updated_at',
] as const;

/** The simplified `idempotency` object: SIMPLIFIED_KEYS (null when absent), and `found` when set. */
export function simplifiedSidecar(sidecar: IDataObject): IDataObject {
	const short: IDataObject = {};
	for (const name of SIMPLIFIED_KEYS) short[name] = orNull(sidecar[name]);
	if (sidecar.found !== undefined) short.found = sidecar.found;
	return short;
}

/**
 * The `idempotency` object of Lookup for a claim the sidecar does not
 * have: found false, what was looked up, every other key null.
 */
export function notFoundSidecar(lookedUp: IDataObject): IDataObject {
	const sidecar: IDataObject = { found: false };
	for (const name of SIDECAR_KEYS) sidecar[name] = null;
	return { ...sidecar, ...lookedUp };
}
