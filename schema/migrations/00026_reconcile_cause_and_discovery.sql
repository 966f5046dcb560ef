-- +goose NO TRANSACTION
-- +goose Up

-- duplicate_cause as migration 00020 made it, with one more cause: the
-- last delivery-log entry with an actor was a reconciler's (actor
-- "reconciler:<name>": reconciled_done, reconciled_not_done,
-- reconcile_gave_up; package sidecar/claim, reconcile.go) → reconciled,
-- the note naming the entry and the reconciler. It was read as an
-- operator's act (operator_replay "by operator reconciler:<name>").
-- Tested where operator_replay is: the latest act, a reconciler's or an
-- operator's, explains the copy.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
    p_retry text, p_execution_id text, p_exec_mode text, p_workflow_id text, p_workflow_version text)
RETURNS duplicate_explanation LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    rec        record;
    ev         uuid;
    first_door text;
    op         record;
    won        record;
    earlier    record;
    winner     text;
    posts      integer;
    runs       text := '';
    versions   text := '';
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
        IF p_fingerprint IS NOT NULL THEN
            SELECT workflow_id, workflow_version INTO earlier FROM claim_deliveries
            WHERE claim_id = p_claim AND door = p_door AND fingerprint = p_fingerprint ORDER BY id LIMIT 1;
            IF FOUND THEN
                IF p_via = 'trigger' THEN
                    IF earlier.workflow_version IS NOT NULL AND p_workflow_version IS NOT NULL
                            AND earlier.workflow_version <> p_workflow_version THEN
                        RETURN ROW('n8n_two_versions', format('identical request bytes handed to the trigger of %s, '
                            || 'then of %s: two versions of the workflow were active at once',
                            workflow_words(earlier.workflow_id, earlier.workflow_version),
                            workflow_words(p_workflow_id, p_workflow_version)))::duplicate_explanation;
                    END IF;
                    RETURN ROW('n8n_twice', 'identical request bytes handed to the trigger again: '
                        || 'one provider request run twice in n8n (or a redelivery that repeats it byte for byte)')::duplicate_explanation;
                END IF;
                RETURN ROW('provider_retry', 'identical request bytes sent again (a provider redelivery that repeats it '
                    || 'byte for byte, or a proxy replaying the request)')::duplicate_explanation;
            END IF;
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
    IF FOUND AND op.actor LIKE 'reconciler:%' THEN
        RETURN ROW('reconciled', format('after %s by reconciler %s', op.outcome,
            substr(op.actor, length('reconciler:') + 1)))::duplicate_explanation;
    END IF;
    IF FOUND THEN
        RETURN ROW('operator_replay', format('after %s by operator %s', op.outcome, op.actor))::duplicate_explanation;
    END IF;
    SELECT execution_id, workflow_id, workflow_version INTO won FROM claim_deliveries
    WHERE claim_id = p_claim AND outcome = 'won' ORDER BY id DESC LIMIT 1;
    winner := won.execution_id;
    IF winner IS NOT NULL AND p_execution_id IS NOT NULL AND winner <> p_execution_id THEN
        runs := format(' (executions %s and %s)', winner, p_execution_id);
        IF COALESCE(won.workflow_id, won.workflow_version, p_workflow_id, p_workflow_version) IS NOT NULL THEN
            versions := format('; execution %s ran %s, execution %s ran %s', winner,
                workflow_words(won.workflow_id, won.workflow_version), p_execution_id,
                workflow_words(p_workflow_id, p_workflow_version));
        END IF;
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
    IF won.workflow_version IS NOT NULL AND p_workflow_version IS NOT NULL
            AND won.workflow_version <> p_workflow_version
            AND (winner IS NULL OR p_execution_id IS NULL OR winner <> p_execution_id)
            AND (won.workflow_id IS NULL OR p_workflow_id IS NULL OR won.workflow_id = p_workflow_id) THEN
        RETURN ROW('n8n_two_versions', format('execution %s ran %s and execution %s ran %s: two versions of the '
            || 'workflow were active at once (after an edit or a new activation, the old version''s trigger still ran)',
            COALESCE(winner, '(none)'), workflow_words(won.workflow_id, won.workflow_version),
            COALESCE(p_execution_id, '(none)'), workflow_words(p_workflow_id, p_workflow_version)))::duplicate_explanation;
    END IF;
    IF runs <> '' AND posts = 1 THEN
        RETURN ROW('n8n_twice', format('executions %s and %s both ran the one delivery claimd dispatched once%s',
            winner, p_execution_id, versions))::duplicate_explanation;
    END IF;
    IF runs <> '' THEN
        RETURN ROW('upstream_repeat', format('execution %s claimed it again after execution %s; claimd did not '
            || 'dispatch it, so the repeat came from what started the workflow%s', p_execution_id, winner,
            versions))::duplicate_explanation;
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

-- The unknown claims reconcile discovery can start (package
-- sidecar/claim, reconcileDiscoverSQL): those naming a reconciler of
-- their own, and by source those naming none (their source's default
-- applies). Discovery runs every few seconds on each replica; with this
-- index it reads only the unknown claims that can be reconciled, not
-- every unknown claim. CONCURRENTLY, outside a transaction (as 00010):
-- claims is large, and a plain CREATE INDEX would block every claim while
-- it scans it. A build that failed half-way leaves an invalid index,
-- dropped first when the migration runs again.
DROP INDEX CONCURRENTLY IF EXISTS claims_unknown_reconciler_idx;
CREATE INDEX CONCURRENTLY claims_unknown_reconciler_idx ON claims (reconciler, source) WHERE state = 'unknown';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS claims_unknown_reconciler_idx;
-- duplicate_cause as migration 00020 made it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
    p_retry text, p_execution_id text, p_exec_mode text, p_workflow_id text, p_workflow_version text)
RETURNS duplicate_explanation LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    rec        record;
    ev         uuid;
    first_door text;
    op         record;
    won        record;
    earlier    record;
    winner     text;
    posts      integer;
    runs       text := '';
    versions   text := '';
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
        IF p_fingerprint IS NOT NULL THEN
            SELECT workflow_id, workflow_version INTO earlier FROM claim_deliveries
            WHERE claim_id = p_claim AND door = p_door AND fingerprint = p_fingerprint ORDER BY id LIMIT 1;
            IF FOUND THEN
                IF p_via = 'trigger' THEN
                    IF earlier.workflow_version IS NOT NULL AND p_workflow_version IS NOT NULL
                            AND earlier.workflow_version <> p_workflow_version THEN
                        RETURN ROW('n8n_two_versions', format('identical request bytes handed to the trigger of %s, '
                            || 'then of %s: two versions of the workflow were active at once',
                            workflow_words(earlier.workflow_id, earlier.workflow_version),
                            workflow_words(p_workflow_id, p_workflow_version)))::duplicate_explanation;
                    END IF;
                    RETURN ROW('n8n_twice', 'identical request bytes handed to the trigger again: '
                        || 'one provider request run twice in n8n (or a redelivery that repeats it byte for byte)')::duplicate_explanation;
                END IF;
                RETURN ROW('provider_retry', 'identical request bytes sent again (a provider redelivery that repeats it '
                    || 'byte for byte, or a proxy replaying the request)')::duplicate_explanation;
            END IF;
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
    SELECT execution_id, workflow_id, workflow_version INTO won FROM claim_deliveries
    WHERE claim_id = p_claim AND outcome = 'won' ORDER BY id DESC LIMIT 1;
    winner := won.execution_id;
    IF winner IS NOT NULL AND p_execution_id IS NOT NULL AND winner <> p_execution_id THEN
        runs := format(' (executions %s and %s)', winner, p_execution_id);
        IF COALESCE(won.workflow_id, won.workflow_version, p_workflow_id, p_workflow_version) IS NOT NULL THEN
            versions := format('; execution %s ran %s, execution %s ran %s', winner,
                workflow_words(won.workflow_id, won.workflow_version), p_execution_id,
                workflow_words(p_workflow_id, p_workflow_version));
        END IF;
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
    IF won.workflow_version IS NOT NULL AND p_workflow_version IS NOT NULL
            AND won.workflow_version <> p_workflow_version
            AND (winner IS NULL OR p_execution_id IS NULL OR winner <> p_execution_id)
            AND (won.workflow_id IS NULL OR p_workflow_id IS NULL OR won.workflow_id = p_workflow_id) THEN
        RETURN ROW('n8n_two_versions', format('execution %s ran %s and execution %s ran %s: two versions of the '
            || 'workflow were active at once (after an edit or a new activation, the old version''s trigger still ran)',
            COALESCE(winner, '(none)'), workflow_words(won.workflow_id, won.workflow_version),
            COALESCE(p_execution_id, '(none)'), workflow_words(p_workflow_id, p_workflow_version)))::duplicate_explanation;
    END IF;
    IF runs <> '' AND posts = 1 THEN
        RETURN ROW('n8n_twice', format('executions %s and %s both ran the one delivery claimd dispatched once%s',
            winner, p_execution_id, versions))::duplicate_explanation;
    END IF;
    IF runs <> '' THEN
        RETURN ROW('upstream_repeat', format('execution %s claimed it again after execution %s; claimd did not '
            || 'dispatch it, so the repeat came from what started the workflow%s', p_execution_id, winner,
            versions))::duplicate_explanation;
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
