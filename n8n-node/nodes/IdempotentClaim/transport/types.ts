import type { IDataObject } from 'n8n-workflow';

/** Error object of the sidecar's wire contract: `{"error": {code, message, field?}}`. */
export interface SidecarErrorBody {
	code?: string;
	message?: string;
	field?: string;
}

/** Claim outcomes of POST /v1/claims and /v1/claims/batch. */
export type ClaimOutcome =
	| 'won'
	| 'duplicate'
	| 'in_progress'
	| 'retry_later'
	| 'conflict'
	| 'stale'
	| 'dead_lettered'
	| 'unknown';

/** One claim in the body of POST /v1/claims/batch; exactly one of event_id, key_parts, key_fields. */
export interface ClaimRequest extends IDataObject {
	source: string;
	event_id?: string;
	key_parts?: string[];
	key_fields?: IDataObject;
	event_type?: string;
	action?: string;
	payload?: IDataObject;
	lease_seconds?: number;
	/** What the sidecar does when the lease ends without complete or fail; absent: the source's policy. */
	lease_policy?: 'review' | 'reclaim';
	object_id?: string;
	object_version?: number;
	execution_id?: string;
	/** Identifies this request, the same on a retry: "execution:node:run:item". */
	request_id?: string;
}

/** A successful claim result (200 of POST /v1/claims, one entry of the batch results). */
export interface ClaimResult extends IDataObject {
	outcome: ClaimOutcome | string;
	claim_id?: string;
	idempotency_key?: string;
	source?: string;
	event_id?: string;
	action?: string;
	claim_token?: string;
	attempt?: number;
	state?: string;
	result_ref?: string;
	next_attempt_at?: string;
	lease_until?: string;
	retry_after_seconds?: number;
	payload_hash?: string;
}

/** A claim record, as answered by complete / fail / extend / resolve / lookup. */
export interface ClaimRecord extends IDataObject {
	claim_id?: string;
	idempotency_key?: string;
}
