import type { IDataObject } from 'n8n-workflow';

import type { components, operations } from './openapi';

/*
 * The sidecar's wire contract is sidecar/httpapi/openapi.yaml; openapi.d.ts
 * is generated from it (`npm run openapi`; test/wireContract.test.ts fails
 * when it is not current). The types below take their enums from it, and
 * test/wireContract.test.ts checks every field they name against it at
 * compile time (`npm run typecheck`): a request field the sidecar does not
 * take, or an answer field it does not send as typed here, fails.
 */

/** The schemas of openapi.yaml. */
export type Schemas = components['schemas'];

/** An error code of the sidecar (openapi.yaml's ErrorCode). */
export type ErrorCode = Schemas['ErrorCode'];

/**
 * Error object of the sidecar's wire contract: `{"error": {code, message, field?}}`
 * (openapi.yaml's ErrorDetail), each member as far as it was present and a string.
 */
export interface SidecarErrorBody {
	code?: string;
	message?: string;
	field?: string;
}

/** Claim outcomes of POST /v1/claims and /v1/claims/batch. */
export type ClaimOutcome = Schemas['Outcome'];

/**
 * One claim in the body of POST /v1/claims/batch; exactly one of event_id, key_parts, key_fields.
 * A type alias without an index signature: a field it does not name cannot be set, and it
 * still fits IDataObject.
 */
export type ClaimRequest = {
	source: string;
	event_id?: string;
	key_parts?: string[];
	key_fields?: IDataObject;
	event_type?: string;
	action?: string;
	payload?: IDataObject;
	lease_seconds?: number;
	/** What the sidecar does when the lease ends without complete or fail; absent: the source's policy. */
	lease_policy?: Schemas['LeasePolicy'];
	/**
	 * Name of a reconciler of claimd's sources file that settles the claim
	 * when its outcome becomes unknown; absent: the source's reconciler.
	 */
	reconciler?: string;
	object_id?: string;
	object_version?: number;
	execution_id?: string;
	/** n8n's execution mode (getMode()); retry and manual copies read as an operator's replay. */
	execution_mode?: string;
	/** Identifies this request, the same on a retry: "execution:node:run:item". */
	request_id?: string;
	/** Shadow mode (observe only): answered won, with shadow.would_be what claimd decided. */
	shadow?: boolean;
	/** The workflow's id (getWorkflow().id), for the delivery log; n8n gives nodes no version id. */
	workflow_id?: string;
	/** The workflow's version, when known; the node never knows it (see helpers/workflow.ts). */
	workflow_version?: string;
	/** How long the sidecar waits for an in-progress holder before it answers. */
	wait_seconds?: number;
};

/**
 * A shadow claim's decision: what claimd decided and recorded (would_be)
 * while it answered won, and why a copy came (cause).
 */
export interface ShadowDecision extends IDataObject {
	would_be: ClaimOutcome | string;
	cause?: string;
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
	/**
	 * When claimd may forget this key (RFC 3339, UTC) under the source's
	 * current key retention: a resend after it is a new event. Exact with
	 * key_expiry "fixed" (a finished record), the earliest with "not_before"
	 * (the record is still open).
	 */
	key_expires_at?: string;
	key_expiry?: KeyExpiry | string;
	/**
	 * Present on a shadow claim's answer (outcome won): what claimd decided.
	 * A claim token only when would_be is won; a copy holds nothing.
	 */
	shadow?: ShadowDecision;
}

/**
 * How exact key_expires_at is: "fixed" for a finished record (its last
 * change plus the key retention), "not_before" for an open one (the clock
 * starts when it settles).
 */
export type KeyExpiry = Schemas['KeyExpiry'];

/** A claim record, as answered by complete / fail / extend / resolve / lookup. */
export interface ClaimRecord extends IDataObject {
	claim_id?: string;
	idempotency_key?: string;
	key_expires_at?: string;
	key_expiry?: KeyExpiry | string;
}

/*
 * Requests and answers of the other routes the node calls. A body the
 * schema types as plain JSON is taken from it as it is; the node builds it
 * with that type, so a field the schema lacks, or a required one left out,
 * does not compile. test/wireContract.test.ts checks the types the node
 * declares itself.
 */

/** The JSON body of an operation of openapi.yaml. */
export type RequestBody<Op extends keyof operations> = operations[Op] extends {
	requestBody: { content: { 'application/json': infer Body } };
}
	? Body
	: never;

/** The query of an operation of openapi.yaml. */
export type Query<Op extends keyof operations> = NonNullable<operations[Op]['parameters']['query']>;

/** The body of POST /v1/claims/batch. */
export type ClaimBatchBody = { claims: ClaimRequest[] };

/** One report of POST /v1/claims/complete/batch. */
export type CompleteBatchEntry = Schemas['CompleteBatchItem'];
/** One report of POST /v1/claims/fail/batch. */
export type FailBatchEntry = Schemas['FailBatchItem'];
/** The body of POST /v1/claims/complete/batch. */
export type CompleteBatchBody = RequestBody<'completeClaimBatch'>;
/** The body of POST /v1/claims/fail/batch. */
export type FailBatchBody = RequestBody<'failClaimBatch'>;

/** The body of POST /v1/claims/fail/execution. */
export type FailExecutionBody = RequestBody<'failExecutionClaims'>;
/** The body of POST /v1/claims/{claim_id}/extend. */
export type ExtendBody = RequestBody<'extendClaim'>;
/** The body of POST /v1/claims/{claim_id}/resolve. */
export type ResolveBody = RequestBody<'resolveClaim'>;
/** The body of POST /v1/claims/{claim_id}/reconcile. */
export type ReconcileBody = RequestBody<'reconcileClaim'>;

/** The query of GET /v1/claims (a claim by its event key). */
export type FindClaimQuery = Query<'findClaim'>;

/**
 * The query of GET /v1/claims/list. state as the node's parameter gives it:
 * the sidecar answers 422 naming state for one it does not list.
 */
export type ListClaimsQuery = Omit<Query<'listClaims'>, 'state'> & { state?: string };

/** The answer of GET /v1/claims/list: a page of records. */
export interface ClaimListPage {
	claims: ClaimRecord[];
	next_cursor?: unknown;
}

/** The answer of one round of POST /v1/claims/fail/execution: the records it failed. */
export interface FailExecutionRound {
	claims: ClaimRecord[];
	more?: unknown;
}
