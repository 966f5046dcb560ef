package main

import "github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"

// queries runs the benchmark's statements (sidecar/db/queries/claimbench.sql).
var queries = dbsqlc.New()

// The statements that stay here, not in claimbench.sql, are made at run
// time, which sqlc's statements are not: the scratch database's CREATE
// and DROP name it (an identifier, which no parameter can stand for), and
// the purge's plans are read by EXPLAIN of the statement the tracer
// caught.

// createDatabaseSQL creates the scratch database name (a name
// newDatabase made: claimbench_ and hex digits).
func createDatabaseSQL(name string) string { return "CREATE DATABASE " + name }

// dropDatabaseSQL drops the scratch database name and ends its sessions.
func dropDatabaseSQL(name string) string { return "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)" }

// explainSQL runs sql and reads its plan (EXPLAIN ANALYZE: run it in a
// transaction that is rolled back).
func explainSQL(sql string) string { return "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql }
