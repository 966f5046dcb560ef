// Package e2e holds the end-to-end tests that drive a real n8n (regular and
// queue mode) against a real sidecar and a real PostgreSQL. Everything lives in
// _test.go files; this file only documents the package.
//
// Prerequisites:
//   - n8n and Node.js installed by n8n-node/scripts/install-n8n.sh into
//     $IC_CACHE_DIR (default $HOME/.cache/idempotent-claim);
//   - PostgreSQL reachable at TEST_DATABASE_URL (default
//     postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), with a role
//     allowed to create databases;
//   - Redis at IC_REDIS_ADDR (default 127.0.0.1:6379) for queue-mode tests.
//
// Set IC_E2E=0 to skip the tests that need n8n. Without it, a missing n8n
// install fails the tests instead of skipping them.
package e2e
