// Package inbox is the durable receipt boundary of the ingest door and its
// dispatcher to n8n. An event a source verified (sources.Source.Verify) is
// stored as an inbox record together with its dispatch job in one
// transaction (a transactional outbox, River's InsertTx) and acknowledged
// only after commit (Inbox.Store, Inbox.Receive; receipt_groups.go); the dispatcher
// (dispatch.go, dispatch_statement_groups.go) then posts the stored event
// to its source's n8n target with retries and a dead letter. The package
// also stores backfilled events (backfill_store.go), re-arms a dispatch a
// reconciler's not_done verdict asks for (redispatch.go), and runs shadow
// mode, the observe-only pass-through (shadow.go).
package inbox
