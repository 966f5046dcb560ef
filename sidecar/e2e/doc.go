// Package e2e holds the end-to-end tests that drive a real n8n (regular and
// queue mode) against a real sidecar and a real PostgreSQL. Everything lives in
// _test.go files; this file only documents the package.
//
// Prerequisites:
//   - n8n and Node.js installed by n8n-node/scripts/install-n8n.sh into
//     $IC_CACHE_DIR (default $HOME/.cache/idempotent-claim);
//   - PostgreSQL: the server of TEST_DATABASE_URL, with a role allowed to
//     create databases; when it is unset, the project-local cluster of
//     sidecar/scripts/devdb.sh is started for the tests (it needs the
//     PostgreSQL server programs), never a server nobody named;
//   - Redis at IC_REDIS_ADDR (default 127.0.0.1:6379) for queue-mode tests;
//   - for the console's browser test (TestConsoleBrowser): Chromium
//     (CHROMIUM_PATH, default /usr/bin/chromium; Debian: apt-get install
//     chromium) and playwright-core, installed by
//     n8n-node/scripts/install-playwright.sh into $IC_CACHE_DIR.
//
// Set IC_E2E=0 to skip the tests that need n8n (and the browser test);
// IC_BROWSER=0 skips the browser test alone. Without them, a missing n8n
// install, Chromium or playwright-core fails the tests instead of skipping
// them.
package e2e
