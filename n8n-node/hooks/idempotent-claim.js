'use strict';
/**
 * Idempotent Claim: the settle hook for self-hosted n8n.
 *
 * Load it in EVERY n8n process (main, webhook processes, queue workers):
 *
 *   EXTERNAL_HOOK_FILES=/path/to/n8n-nodes-idempotent-claim/hooks/idempotent-claim.js
 *   IDEMPOTENT_CLAIM_URL=http://claimd:8080
 *   IDEMPOTENT_CLAIM_API_KEY=…   (or IDEMPOTENT_CLAIM_API_KEY_FILE=/run/secrets/…)
 *
 * When an execution that holds claims ends (claims won by the Idempotent
 * Claim Trigger or the Idempotent Claim node, and not settled by the
 * workflow itself), it completes them after a success and fails them after
 * an error, crash or cancel, with the item's `on_error` retry kind (default
 * IDEMPOTENT_CLAIM_ON_ERROR, itself default `unknown`). See the package
 * README, "Settle hook". It also tells claimd which workflow version each
 * execution that claimed ran, for the duplicate causes.
 *
 * This file is what n8n loads: it exports only n8n's hook map. The logic is
 * in lib/. Nothing here may stop n8n from starting: a problem is logged and
 * the hook does nothing.
 */
const { readFileSync } = require('node:fs');

let hooks = {};
try {
	const { createHook } = require('./lib/hook');
	const { n8nServices } = require('./lib/n8n');
	hooks = createHook({
		env: process.env,
		argv: process.argv,
		readFile: (file) => readFileSync(file, 'utf8'),
		n8n: n8nServices(module),
	}).hooks;
} catch (error) {
	// n8n's logger may be what failed.
	console.error(
		`Idempotent Claim hook: inactive: it failed to load (${error && error.message}). It settles no claims; their leases decide them.`,
	);
}

module.exports = hooks;
