package claim

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// The retry-hint statement, for the test that checks its plan.
const RetryHintSQL = dbsqlc.RetryHint
