-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Every duplicate explained (issue 27). The delivery log says, for each
-- duplicate it records, why the copy came, decided by duplicate_cause in
-- the very statement that writes the entry.
--
-- door:        the source name (the ingest door or the trigger source) a
--              provider delivery came through; NULL for a claim a
--              workflow made (POST /v1/claims) and for transitions.
-- fingerprint: SHA-256 of the provider request (its credential and retry
--              header values, its query and its raw body): equal for the
--              very same request bytes, different for a provider's retry
--              that signs again. A hash of a MAC, no secret.
-- cause:       why a duplicate (or in_progress) copy came: operator_replay,
--              backfill, another_door, provider_retry, dispatch_retry,
--              n8n_twice or upstream_repeat (claim.Cause); NULL for every
--              other entry.
-- cause_note:  the evidence in plain words (the retry header, both doors,
--              both execution ids, the number of dispatch posts).
--
-- Nullable columns without a default: adding them rewrites no row.
ALTER TABLE claim_deliveries ADD COLUMN door text;
ALTER TABLE claim_deliveries ADD COLUMN fingerprint bytea;
ALTER TABLE claim_deliveries ADD COLUMN cause text;
ALTER TABLE claim_deliveries ADD COLUMN cause_note text;

CREATE TYPE duplicate_explanation AS (cause text, note text);

-- duplicate_cause explains one duplicate copy of record p_claim from the
-- record's earlier delivery-log entries (claim_deliveries_claim_idx: only
-- duplicates pay for the read). p_via is 'ingest' (POST /ingest), 'trigger'
-- (POST /v1/trigger) or 'claim' (a workflow's POST /v1/claims); p_door,
-- p_fingerprint and p_retry (the provider's retry headers, or NULL) are the
-- copy's delivery's; p_execution_id and p_exec_mode the claiming n8n
-- execution's. VOLATILE on purpose: each read takes a fresh snapshot, so a
-- concurrent winner's committed entries are seen by the copy that waited
-- for its row lock. The order of the rules is a choice (the note keeps the
-- evidence): an operator's act, the first real delivery of an event
-- claimd backfilled (migration 00013), another door, the provider's retry,
-- claimd's own dispatch retry, two n8n executions of one delivery, and
-- anything else that started the workflow again.
-- +goose StatementBegin
CREATE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
    p_retry text, p_execution_id text, p_exec_mode text)
RETURNS duplicate_explanation LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    rec        record;
    ev         uuid;
    first_door text;
    op         record;
    winner     text;
    posts      integer;
    runs       text := '';
BEGIN
    SELECT tenant, source, event_id, action INTO rec FROM claims WHERE id = p_claim;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    ev := p_claim;
    IF rec.action <> '' THEN
        -- An action's claim: its event's record holds the dispatch.
        SELECT id INTO ev FROM claims
        WHERE tenant = rec.tenant AND source = rec.source AND event_id = rec.event_id AND action = '';
        IF NOT FOUND THEN
            ev := p_claim;
        END IF;
    END IF;

    IF p_via IN ('ingest', 'trigger') THEN
        SELECT door INTO first_door FROM claim_deliveries
        WHERE claim_id = p_claim AND door IS NOT NULL ORDER BY id LIMIT 1;
        IF first_door IS NULL AND EXISTS (SELECT 1 FROM claim_deliveries
                WHERE claim_id = p_claim AND outcome = 'received' AND detail LIKE 'backfilled %') THEN
            RETURN ROW('backfill', 'the real delivery of an event claimd had already backfilled from the '
                || 'provider''s event list (it arrived late, or a redelivery claimd requested)')::duplicate_explanation;
        END IF;
        IF p_door IS NOT NULL AND first_door IS NOT NULL AND first_door <> p_door THEN
            RETURN ROW('another_door', format('first delivered through %s, this copy through %s (one dedupe_scope)',
                first_door, p_door))::duplicate_explanation;
        END IF;
        IF p_retry IS NOT NULL THEN
            RETURN ROW('provider_retry', 'the provider marked this delivery a retry: ' || p_retry)::duplicate_explanation;
        END IF;
        IF p_fingerprint IS NOT NULL AND EXISTS (SELECT 1 FROM claim_deliveries
                WHERE claim_id = p_claim AND door = p_door AND fingerprint = p_fingerprint) THEN
            IF p_via = 'trigger' THEN
                RETURN ROW('n8n_twice', 'identical request bytes handed to the trigger again: '
                    || 'one provider request run twice in n8n (or a redelivery that repeats it byte for byte)')::duplicate_explanation;
            END IF;
            RETURN ROW('provider_retry', 'identical request bytes sent again (a provider redelivery that repeats it '
                || 'byte for byte, or a proxy replaying the request)')::duplicate_explanation;
        END IF;
        RETURN ROW('provider_retry', 'the provider sent the event again in a new request '
            || '(another signature or timestamp)')::duplicate_explanation;
    END IF;

    -- A workflow's claim.
    IF p_exec_mode IN ('retry', 'manual') THEN
        RETURN ROW('operator_replay', format('n8n execution %s runs in %s mode (%s)', COALESCE(p_execution_id, '(none)'),
            p_exec_mode, CASE p_exec_mode WHEN 'retry' THEN 'someone retried an execution'
                ELSE 'someone ran the workflow by hand' END))::duplicate_explanation;
    END IF;
    SELECT outcome, actor INTO op FROM claim_deliveries
    WHERE claim_id IN (p_claim, ev) AND actor IS NOT NULL ORDER BY id DESC LIMIT 1;
    IF FOUND THEN
        RETURN ROW('operator_replay', format('after %s by operator %s', op.outcome, op.actor))::duplicate_explanation;
    END IF;
    SELECT execution_id INTO winner FROM claim_deliveries
    WHERE claim_id = p_claim AND outcome = 'won' ORDER BY id DESC LIMIT 1;
    IF winner IS NOT NULL AND p_execution_id IS NOT NULL AND winner <> p_execution_id THEN
        runs := format(' (executions %s and %s)', winner, p_execution_id);
    END IF;
    SELECT dispatch_attempts INTO posts FROM inbox_events WHERE claim_id = ev;
    IF posts IS NULL THEN
        -- The inbox body was purged (or never kept): count the posts the
        -- log recorded.
        SELECT NULLIF(count(*), 0) INTO posts FROM claim_deliveries
        WHERE claim_id = ev AND outcome IN ('dispatched', 'dispatch_failed', 'dispatch_dead_lettered')
          AND COALESCE(detail, '') NOT LIKE '% is not configured; waiting %';
    END IF;
    IF posts >= 2 THEN
        RETURN ROW('dispatch_retry', format('claimd posted the event to n8n %s times: an attempt timed out or failed '
            || 'after n8n had started it%s', posts, runs))::duplicate_explanation;
    END IF;
    IF runs <> '' AND posts = 1 THEN
        RETURN ROW('n8n_twice', format('executions %s and %s both ran the one delivery claimd dispatched once',
            winner, p_execution_id))::duplicate_explanation;
    END IF;
    IF runs <> '' THEN
        RETURN ROW('upstream_repeat', format('execution %s claimed it again after execution %s; claimd did not '
            || 'dispatch it, so the repeat came from what started the workflow', p_execution_id, winner))::duplicate_explanation;
    END IF;
    IF winner IS NOT NULL AND winner = p_execution_id THEN
        RETURN ROW('upstream_repeat', format('execution %s claimed this key again (two items with one key?)',
            winner))::duplicate_explanation;
    END IF;
    RETURN ROW('upstream_repeat', 'claimed again by the workflow; no execution id tells which run '
        || 'it came from')::duplicate_explanation;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
DROP FUNCTION duplicate_cause(uuid, text, text, bytea, text, text, text);
DROP TYPE duplicate_explanation;
ALTER TABLE claim_deliveries DROP COLUMN cause_note;
ALTER TABLE claim_deliveries DROP COLUMN cause;
ALTER TABLE claim_deliveries DROP COLUMN fingerprint;
ALTER TABLE claim_deliveries DROP COLUMN door;
