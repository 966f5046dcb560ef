-- +goose Up
SET LOCAL lock_timeout = '5s';

-- Two workflow versions as a duplicate cause. n8n can run one delivery
-- in two executions of two versions of one workflow: after the workflow
-- is edited and published again, a trigger of the old version can still
-- run next to the new one. The delivery log keeps which workflow (and,
-- where the caller knows it, which version of it) made each claim, and
-- duplicate_cause names both versions when two executions differ.
--
-- workflow_id:      the claiming workflow's id (n8n: the workflow's id,
--                   which every version of it shares); NULL when the
--                   caller sent none.
-- workflow_version: the claiming workflow's version (n8n: a workflow
--                   history version id); NULL when the caller sent none.
--                   n8n 2.41 gives a node no version id (a node sees the
--                   workflow's id, name and active flag only), so the
--                   Idempotent Claim node sends workflow_id alone.
--
-- Nullable columns without a default: adding them rewrites no row.
ALTER TABLE claim_deliveries ADD COLUMN workflow_id text;
ALTER TABLE claim_deliveries ADD COLUMN workflow_version text;

-- duplicate_cause with the copy's workflow (p_workflow_id,
-- p_workflow_version; NULL when unknown). The rules are 00014's, in its
-- order, with one more: two executions whose workflow versions are both
-- known and differ are n8n_two_versions (after an operator's act and
-- claimd's own dispatch retry, which explain a second run whatever ran
-- it). For two executions the note says which workflow and version each
-- ran, or that a version is not known.
-- +goose StatementBegin
CREATE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
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

-- workflow_words says which workflow and version ran, in plain words, for
-- duplicate_cause's notes.
-- +goose StatementBegin
CREATE FUNCTION workflow_words(p_workflow_id text, p_workflow_version text)
RETURNS text LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_workflow_version IS NOT NULL AND p_workflow_id IS NOT NULL
            THEN format('workflow %s version %s', p_workflow_id, p_workflow_version)
        WHEN p_workflow_version IS NOT NULL THEN format('workflow version %s', p_workflow_version)
        WHEN p_workflow_id IS NOT NULL THEN format('workflow %s (version not known)', p_workflow_id)
        ELSE 'a workflow it did not name'
    END
$fn$;
-- +goose StatementEnd

-- The seven-argument duplicate_cause of migration 00014 answers as the new
-- one with no workflow named, for a claimd that still calls it while a new
-- one is rolled out.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
    p_retry text, p_execution_id text, p_exec_mode text)
RETURNS duplicate_explanation LANGUAGE sql VOLATILE AS $fn$
    SELECT duplicate_cause(p_claim, p_via, p_door, p_fingerprint, p_retry, p_execution_id, p_exec_mode,
        NULL::text, NULL::text)
$fn$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '5s';
-- The seven-argument duplicate_cause as migration 00014 made it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION duplicate_cause(p_claim uuid, p_via text, p_door text, p_fingerprint bytea,
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
DROP FUNCTION duplicate_cause(uuid, text, text, bytea, text, text, text, text, text);
DROP FUNCTION workflow_words(text, text);
ALTER TABLE claim_deliveries DROP COLUMN workflow_version;
ALTER TABLE claim_deliveries DROP COLUMN workflow_id;
