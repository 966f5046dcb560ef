-- The reconcile runner's statements (package reconcile).

-- name: OpenReconciles :many
-- The open reconciles (waiting, calling, gave_up) of claims still
-- unknown, counted by state.
SELECT r.state, count(*) FROM reconciles r JOIN claims c ON c.id = r.claim_id
WHERE r.state IN ('waiting', 'calling', 'gave_up') AND c.state = 'unknown' GROUP BY r.state;
