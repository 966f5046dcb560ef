package ha

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// queries runs the package's statements (sidecar/db/queries/ha.sql). The
// fence's and the survey's run on a connection being validated (pgconn,
// simple protocol): their texts are sent (dbsqlc.Fence, dbsqlc.Survey)
// and their text columns read here.
var queries = dbsqlc.New()
