// Package sources is the sources file and the rules it gives each source.
//
// Parse (ReadFile for a path) reads the file (File, SourceSpec) into a
// Config: per source its provider's verifier and options, tenant, dedupe
// scope and claim policy, key rule (KeySpec), volatile_fields, forward
// target with its retry and delivered statuses (Forward, Statuses),
// backfill (BackfillSpec) and reconcilers (ReconcilerSpec). Errors name
// the field of the file they are about.
//
// A Source's rules apply to a delivery whatever door it came through:
// POST /ingest/{source}, whose events package inbox stores and dispatches
// to n8n, and POST /v1/trigger/{source}, whose events are claimed at once.
// Source.Verify checks a Delivery (Content-Encoding, signature, replay
// window, handshakes) and keys (Identify, the key rule) and hashes
// (volatile_fields left out) each of its events (Event).
//
// Package sourcesfile watches the file and applies a changed one.
package sources
