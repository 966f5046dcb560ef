// Package ha is what keeps claimd's claims exactly-once across a database
// failover, and claimd itself up while no writable primary answers:
//
//   - Starter and Gate (startup.go): the start-up waits for a writable
//     primary instead of exiting, migrating and starting the dispatcher
//     once one answers; until the schema is current the pool refuses
//     requests' connections (503, retryable).
//   - ConnectRefused (refused.go): a server that refuses claimd's session
//     for good (no such database or role, a wrong password, no CONNECT) is
//     not a failover, and claimd exits with the server's reason; Unreachable
//     words the other failures for /readyz.
//   - Fence (fence.go): an old primary started again after a failover, or
//     a server of another cluster, is refused on every new connection, and
//     at start on every host of a host list (Survey).
//   - ReplicationMonitor and SyncGuard (replication.go): what the primary's
//     commits wait for, logged, in /readyz and as metrics; with
//     CLAIMD_REQUIRE_SYNC_REPLICATION no write is acknowledged unless its
//     commit waits for a synchronous standby.
//
// Each file opens with the reasoning behind its part. The hooks are
// installed on claimd's pgx pool: Fence.Validate as ValidateConnect,
// Gate.Prepare and SyncGuard.Prepare as PrepareConn. claimd's own work
// (start-up, readiness, the replication reading) runs with a context
// marked Internal, which the gate and the guard let through. The SQL is
// in sql.go.
package ha
