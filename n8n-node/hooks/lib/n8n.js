'use strict';
/**
 * The few n8n services the hook uses, resolved from the n8n process that
 * loaded it (never a copy of n8n's code, never a second instance of n8n's
 * modules): n8n's logger, its execution mode and instance type, its event
 * service (for `job-stalled`) and its stored executions.
 *
 * They are n8n internals, read from n8n 2.41.1's code: the hook uses each
 * one defensively, and every method here may throw when a later n8n moves
 * it. The caller catches and degrades (console logging; env for the
 * mode; a crashed worker's claims left to their leases).
 */
const fs = require('node:fs');
const path = require('node:path');
const { createRequire } = require('node:module');

/**
 * n8n's dist folder: where the module that required the hook file lives
 * (n8n's dist/external-hooks.js), else next to the n8n command that
 * started the process (bin/n8n). Null when neither is n8n.
 */
function n8nDistDir(hookModule) {
	const candidates = [];
	for (const loaded of Object.values(require.cache)) {
		if (loaded && Array.isArray(loaded.children) && loaded.children.includes(hookModule)) {
			candidates.push(path.dirname(loaded.filename));
		}
	}
	if (require.main && require.main.filename) {
		candidates.push(path.resolve(path.dirname(require.main.filename), '..', 'dist'));
	}
	for (const dir of candidates) {
		if (fs.existsSync(path.join(dir, 'external-hooks.js'))) return dir;
	}
	return null;
}

/**
 * The services, for the hook file `hookModule` (its `module`). When the
 * hook was not loaded by n8n, `available` is false and every method
 * throws.
 */
function n8nServices(hookModule) {
	const dist = n8nDistDir(hookModule);
	if (dist === null) {
		const missing = () => {
			throw new Error('the hook file was not loaded by n8n');
		};
		return {
			available: false,
			logger: missing,
			executionsMode: missing,
			instanceType: missing,
			onJobStalled: missing,
			readExecution: missing,
		};
	}
	// Resolves as n8n's own code does, so Container and the service classes
	// are the very ones n8n registered.
	const n8nRequire = createRequire(path.join(dist, 'external-hooks.js'));
	const service = (specifier, name) => {
		const { Container } = n8nRequire('@n8n/di');
		const type = n8nRequire(specifier)[name];
		if (typeof type !== 'function') throw new Error(`n8n has no ${name} in ${specifier}`);
		return Container.get(type);
	};
	return {
		available: true,
		logger: () => service('@n8n/backend-common', 'Logger'),
		executionsMode: () => service('@n8n/config', 'GlobalConfig').executions.mode,
		instanceType: () => service('n8n-core', 'InstanceSettings').instanceType,
		/** Calls listener({ executionId, … }) when n8n's queue fails a job its worker stopped renewing. */
		onJobStalled: (listener) => {
			service('./events/event.service', 'EventService').on('job-stalled', listener);
		},
		/** The stored execution with its data (what n8n's queue-mode main reads after a job). */
		readExecution: async (executionId) => {
			const options = { includeData: true, unflattenData: true };
			let store;
			try {
				store = service('./executions/execution-persistence', 'ExecutionPersistence');
			} catch {
				// An n8n without ExecutionPersistence: its repository reads the
				// data (when stored in the database).
				store = service('@n8n/db', 'ExecutionRepository');
			}
			return await store.findSingleExecution(String(executionId), options);
		},
	};
}

module.exports = { n8nServices, n8nDistDir };
