-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Automatic reconciliation of unknown outcomes (package sidecar/claim,
-- reconcile.go). When a claim becomes unknown and has a reconciler (its
-- own, else its source's default), claimd calls that reconciler (an n8n
-- workflow) to find out whether the effect happened, and settles the
-- claim by its answer.
--
-- claims.reconciler: the reconciler a claim named (POST /v1/claims
-- "reconciler"), stored by each claim that wins the record (as
-- lease_policy is); NULL: the source's default reconciler at the time the
-- claim goes unknown. Nullable without a default: adding it rewrites no
-- row.
ALTER TABLE claims ADD COLUMN reconciler text;

-- One row per claim: its current unknown episode. An episode is the
-- claim's attempt and claim token when it went unknown (episode_attempt,
-- episode_token); a claim that goes unknown again after a later win is a
-- new episode, and its row is reset. Rows are made by the engine's
-- discovery, never by the claim statements.
--
-- state: waiting (the next call is due at next_call_at), calling (one
-- call in flight, fenced by call_token, until call_deadline), answered
-- (done or not_done applied to the claim), gave_up (max_calls calls
-- answered still_unknown or failed: the claim stays unknown for an
-- operator), dropped (the claim left unknown, or its episode changed,
-- before an answer).
-- last_error: the fixed error class of the last failed call (timeout,
-- unreachable, status_5xx, status_4xx, bad_answer), never a text from
-- the reconciler. note: the reconciler's note with its last answer.
--
-- Delivery-log outcomes (claim_deliveries.outcome) the engine writes,
-- actor 'reconciler:<name>': reconciled_done, reconciled_not_done,
-- reconcile_gave_up. Failed calls are not logged (last_error, metrics).
CREATE TABLE reconciles (
    claim_id        uuid PRIMARY KEY REFERENCES claims (id) ON DELETE CASCADE,
    tenant          text NOT NULL,
    reconciler      text NOT NULL,
    episode_attempt integer NOT NULL,
    episode_token   uuid,
    state           text NOT NULL CHECK (state IN ('waiting', 'calling', 'answered', 'gave_up', 'dropped')),
    calls           integer NOT NULL DEFAULT 0 CHECK (calls >= 0),
    max_calls       integer NOT NULL CHECK (max_calls > 0),
    next_call_at    timestamptz NOT NULL,
    call_token      uuid,
    call_deadline   timestamptz,
    verdict         text CHECK (verdict IN ('done', 'not_done', 'still_unknown')),
    result_ref      text,
    note            text,
    last_error      text CHECK (last_error IN ('timeout', 'unreachable', 'status_5xx', 'status_4xx', 'bad_answer')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (state <> 'calling' OR (call_token IS NOT NULL AND call_deadline IS NOT NULL))
);
-- The calls due (ReconcileTake) and the calls past their deadline
-- (ReconcileExpire).
CREATE INDEX reconciles_waiting_idx ON reconciles (next_call_at) WHERE state = 'waiting';
CREATE INDEX reconciles_calling_idx ON reconciles (call_deadline) WHERE state = 'calling';

-- +goose Down
SET LOCAL lock_timeout = '5s';
DROP TABLE reconciles;
ALTER TABLE claims DROP COLUMN reconciler;
