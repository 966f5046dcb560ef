'use strict';
/**
 * The settle hook: n8n's `workflow.postExecute` tells claimd how an
 * execution that holds claims ended.
 *
 * Who acts (claims.whoActs): the process that ran the execution (regular
 * mode: the one process; queue mode: the worker). A queue-mode main or
 * webhook process acts only when a job ended without its worker (n8n's
 * queue failed it, e.g. the worker died): n8n then runs this hook there
 * with status error and no run data, after n8n has already overwritten the
 * stored execution's data with that empty run. So the hook reads the
 * stored execution earlier, when n8n reports the job stalled
 * (`job-stalled`), and keeps the claims it lists until the hook runs.
 *
 * The hook never throws into n8n. By default (IDEMPOTENT_CLAIM_SETTLE_WAIT_MS
 * 0) it holds an execution's end for nothing: postExecute queues the run
 * and returns (postExecute is n8n's last workflowExecuteAfter handler, so
 * nothing of n8n's waits for it), and the settles of the runs queued are
 * worked out and sent IDEMPOTENT_CLAIM_SETTLE_DELAY_MS (50 ms) after the
 * first of them ended: by then n8n has answered the webhook and written
 * the execution, so the settle's work does not delay them (0: on the next
 * timer turn). With a wait above 0 the execution's end waits for the
 * first try, at most that long. Either way what did not land is retried
 * in the background (settler.js).
 *
 * It also tells claimd which workflow version each execution that claimed
 * ran (won, duplicate, in_progress or conflict items of the trigger or the
 * Claim node): n8n gives a node no version id, and this hook sees the
 * workflow data's versionId (claims.workflowReport). The executions that
 * ended together go in one POST /v1/executions/workflow next to their
 * settles, so claimd can tell a copy run by two versions of one workflow
 * (n8n_two_versions) from one run twice by the same version.
 *
 * n8n's stop (`n8n.stop`, which every n8n command runs before it waits for
 * its running executions and exits) sends what is queued at once and waits,
 * up to STOP_DRAIN_MS, for every settle in flight or waiting for a retry;
 * an execution that ends after that (n8n lets running ones finish) waits
 * for its own first try, up to the same bound. So a restart or a deploy
 * loses no settle that claimd takes within that time; one it does not is
 * logged with its claim ids and left to the claims' leases.
 */
const { readConfig } = require('./config');
const {
	actionFor,
	claimsOfRun,
	executionStatus,
	failExecutionRequest,
	hasClaimNode,
	nodeKind,
	processRole,
	reportRequests,
	settleRequests,
	whoActs,
	workflowReport,
} = require('./claims');
const { Settler } = require('./settler');

/** Executions whose stalled job's claims are kept until n8n runs the hook. */
const MAX_STALLED = 1000;
/** How long such claims are kept: n8n rechecks a stalled job for 30 s. */
const STALLED_TTL_MS = 10 * 60 * 1000;
/** How long the hook waits for a stalled execution's read to finish. */
const STALLED_READ_WAIT_MS = 10_000;
/**
 * How long n8n's stop waits for settles still queued, in flight or waiting
 * for a retry, and how long an execution ending while n8n stops waits for
 * its first try. Below n8n's own graceful-stop bound
 * (N8N_GRACEFUL_SHUTDOWN_TIMEOUT, 30 s by default).
 */
const STOP_DRAIN_MS = 10_000;

/** A logger over console, for when n8n's own is not reachable. */
const consoleLogger = {
	debug: () => {},
	info: (message) => console.log(message),
	warn: (message) => console.warn(message),
	error: (message) => console.error(message),
};

function attempt(fn, fallback) {
	try {
		const value = fn();
		return value === undefined || value === null ? fallback : value;
	} catch {
		return fallback;
	}
}

function withTimeout(promise, ms, setTimer, clearTimer) {
	let timer;
	const bound = new Promise((resolve) => {
		timer = setTimer(() => resolve(null), ms);
	});
	return Promise.race([promise, bound]).finally(() => clearTimer(timer));
}

/**
 * Builds the hook. deps:
 * - env (process.env), argv (process.argv), readFile(path) (for the key file);
 * - n8n: n8n.js's services (or fakes); each method may throw;
 * - optional logger, fetch, now, setTimer, clearTimer, settlerOptions,
 *   stopDrainMs (tests).
 *
 * Returns `{ hooks, active, role, settler, onJobStalled, postExecute,
 * stop, idle }`; `hooks` is what the hook file exports to n8n
 * (`workflow.postExecute` and `n8n.stop`); `idle()` resolves when no
 * settle is queued, being worked out, in flight or waiting for a retry.
 * With missing or invalid settings the hook logs one line and registers
 * nothing.
 */
function createHook(deps) {
	const env = deps.env || {};
	const n8n = deps.n8n;
	const logger = deps.logger || attempt(() => n8n.logger(), consoleLogger);
	const now = deps.now || Date.now;
	const setTimer =
		deps.setTimer ||
		((fn, ms) => {
			const timer = setTimeout(fn, ms);
			if (timer && typeof timer.unref === 'function') timer.unref();
			return timer;
		});
	const clearTimer = deps.clearTimer || clearTimeout;
	const stopDrainMs = deps.stopDrainMs || STOP_DRAIN_MS;

	const read = readConfig(env, deps.readFile || (() => ''));
	if (!read.ok) {
		logger.error(
			`Idempotent Claim hook: inactive: ${read.problem}. It settles no claims; their leases decide them.`,
		);
		return { hooks: { workflow: { postExecute: [] }, n8n: { stop: [] } }, active: false };
	}
	const config = read.config;

	// n8n's own view first; the environment as n8n reads it otherwise.
	const executionsMode = attempt(() => n8n.executionsMode(), env.EXECUTIONS_MODE || 'regular');
	const argv = deps.argv || [];
	const instanceType = attempt(
		() => n8n.instanceType(),
		['worker', 'webhook'].includes(argv[2]) ? argv[2] : 'main',
	);
	const role = processRole(executionsMode, instanceType);
	const offloadManual = env.OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS === 'true';

	const settler = new Settler({
		url: config.url,
		apiKey: config.apiKey,
		retrySeconds: config.retrySeconds,
		maxPending: config.maxPending,
		logger,
		fetch: deps.fetch,
		now,
		setTimer,
		clearTimer,
		...(deps.settlerOptions || {}),
	});

	/** executionId → { at, claims: Promise<{ claims, claimNode } | null> }, from `job-stalled`. */
	const stalled = new Map();

	async function storedClaims(executionId) {
		const execution = await n8n.readExecution(executionId);
		if (!execution) return null;
		const workflow = execution.workflowData;
		return {
			claims: claimsOfRun(execution, workflow),
			claimNode: hasClaimNode(workflow && workflow.nodes),
		};
	}

	/** n8n's queue failed a job whose worker stopped: read its claims while the stored data still has them. */
	function onJobStalled(event) {
		try {
			const executionId = event && event.executionId;
			if (executionId === undefined || executionId === null) return;
			const at = now();
			for (const [id, entry] of stalled) {
				if (stalled.size < MAX_STALLED && at - entry.at < STALLED_TTL_MS) break;
				stalled.delete(id);
			}
			const claims = storedClaims(executionId).catch((error) => {
				logger.warn(
					`Idempotent Claim hook: cannot read stalled execution ${executionId} from n8n (${error && error.message}); its claims are left to their leases`,
					{ executionId: String(executionId) },
				);
				return null;
			});
			stalled.set(String(executionId), { at, claims });
		} catch (error) {
			logger.warn(`Idempotent Claim hook: job-stalled not handled (${error && error.message})`);
		}
	}

	if (role === 'enqueuer') {
		let problem = null;
		if (!n8n.available) problem = 'the hook file was not loaded by n8n';
		else {
			try {
				n8n.onJobStalled(onJobStalled);
			} catch (error) {
				problem = error && error.message;
			}
		}
		if (problem !== null) {
			logger.warn(
				`Idempotent Claim hook: cannot follow n8n's stalled jobs (${problem}); the claims of an execution whose queue worker dies are left to their leases`,
			);
		}
	}

	async function settle(run, workflow, executionId, waitMs) {
		const action = actionFor(run);
		if (action === 'none') return;
		const who = whoActs({ role, run, offloadManual });
		if (who === 'skip') return;
		const status = executionStatus(run);
		const nodes = workflow && workflow.nodes;
		let claims;
		let note;
		let byExecution;
		if (who === 'act') {
			claims = claimsOfRun(run, workflow);
			// After n8n itself crashed, its recovery rebuilds the run without
			// the items of the nodes that ran: the Claim node's claims are
			// found by execution id.
			byExecution = status === 'crashed' && hasClaimNode(nodes);
		} else {
			const id = String(executionId);
			const entry = stalled.get(id);
			stalled.delete(id);
			let found = entry
				? await withTimeout(entry.claims, STALLED_READ_WAIT_MS, setTimer, clearTimer)
				: null;
			if (found === null && n8n.available) {
				found = await storedClaims(executionId).catch(() => null);
			}
			claims = found ? found.claims : [];
			note = entry ? "its queue worker stopped; n8n's queue failed the job" : undefined;
			byExecution = hasClaimNode(nodes) || Boolean(found && found.claimNode);
			const hasTrigger = Array.isArray(nodes) && nodes.some((n) => nodeKind(n) === 'trigger');
			if (claims.length === 0 && hasTrigger) {
				logger.warn(
					`Idempotent Claim hook: execution ${id} ended without its queue worker (status ${status}) and n8n's stored data no longer lists its trigger's claims; they are left to their leases`,
					{ executionId: id },
				);
			}
		}
		/** @type {Array<{ path: string, body: object, claimIds: string[] }>} */
		const requests = settleRequests({
			action,
			claims,
			executionId,
			status,
			defaultOnError: config.onError,
			note,
		});
		if (action === 'fail' && byExecution) {
			requests.push(failExecutionRequest({ executionId, status, retry: config.onError, note }));
		}
		if (requests.length === 0) return;
		// Routine ends are debug; an execution whose worker died is an
		// operator's business (its claims become unknown): info.
		logger[note ? 'info' : 'debug'](
			`Idempotent Claim hook: execution ${executionId} ended (${status})${note ? ': ' + note : ''}: ${action} ${claims.length} claims${byExecution ? ' and the claims it won by execution id' : ''}`,
			{ executionId: String(executionId), claimIds: claims.map((c) => c.claimId) },
		);
		await settler.submit(requests, { executionId, waitMs });
	}

	/** settle(), logged instead of thrown. */
	async function settleLogged(run, workflow, executionId, waitMs) {
		try {
			await settle(run, workflow, executionId, waitMs);
		} catch (error) {
			logger.error(
				`Idempotent Claim hook: execution ${executionId} not settled (${error && error.message}); its claims are left to their leases`,
				{ executionId: String(executionId) },
			);
		}
	}

	/**
	 * Tells claimd which workflow version each ended execution ran
	 * (workflowReport: executions whose run shows a claim of any outcome),
	 * in one request for the executions that ended together; by the process
	 * that ran the execution only. Never throws.
	 */
	function report(ended, waitMs) {
		try {
			if (settler.reportsRefused) return;
			const reports = [];
			for (const [run, workflow, executionId] of ended) {
				try {
					if (whoActs({ role, run, offloadManual }) !== 'act') continue;
					const one = workflowReport(run, workflow, executionId);
					if (one !== null) reports.push(one);
				} catch (error) {
					logger.debug(
						`Idempotent Claim hook: execution ${executionId}'s workflow version not read (${error && error.message})`,
					);
				}
			}
			if (reports.length === 0) return;
			const ids = reports.map((r) => r.execution_id).join(', ');
			track(settler.submit(reportRequests(reports), { executionId: ids, waitMs }));
		} catch (error) {
			logger.warn(`Idempotent Claim hook: workflow versions not sent (${error && error.message})`);
		}
	}

	/** Ended executions whose settle is not worked out yet: [run, workflow, executionId]. */
	let deferred = [];
	let deferTimer = null;
	/** settle() calls still running (a stalled execution's read, say). */
	const working = new Set();
	let stopping = false;

	function track(promise) {
		working.add(promise);
		void promise.finally(() => working.delete(promise));
	}

	function runDeferred() {
		if (deferTimer !== null) clearTimer(deferTimer);
		deferTimer = null;
		const ended = deferred;
		deferred = [];
		for (const [run, workflow, executionId] of ended) {
			track(settleLogged(run, workflow, executionId, 0));
		}
		report(ended, 0);
	}

	/**
	 * n8n's workflow.postExecute: (fullRunData, workflowData, executionId).
	 * Never throws. With no wait it only queues the run, sent
	 * config.delayMs later (see the file's comment); while n8n stops it
	 * waits for the first try.
	 */
	async function postExecute(fullRunData, workflowData, executionId) {
		if (stopping || config.waitMs > 0) {
			const waitMs = stopping ? Math.max(config.waitMs, stopDrainMs) : config.waitMs;
			const done = settleLogged(fullRunData, workflowData, executionId, waitMs);
			track(done);
			report([[fullRunData, workflowData, executionId]], waitMs);
			await done;
			return;
		}
		deferred.push([fullRunData, workflowData, executionId]);
		if (deferTimer === null) deferTimer = setTimer(runDeferred, config.delayMs);
	}

	/** Resolves when nothing is deferred, being worked out, in flight or waiting for a retry. */
	async function idle() {
		while (deferred.length > 0 || working.size > 0) {
			if (deferred.length > 0) runDeferred();
			await Promise.all([...working]);
		}
		await settler.idle();
	}

	/** n8n's n8n.stop: send what is queued now and wait for it, at most STOP_DRAIN_MS. Never throws. */
	async function stop() {
		stopping = true;
		try {
			runDeferred();
			settler.retryNow();
			const pending = settler.pending();
			if (pending > 0 || working.size > 0) {
				logger.info(
					`Idempotent Claim hook: n8n is stopping; sending the settles of ${pending} claims before it exits (at most ${stopDrainMs / 1000} s)`,
				);
			}
			const drained = await withTimeout(
				idle().then(() => true),
				stopDrainMs,
				setTimer,
				clearTimer,
			);
			if (drained === null && settler.pending() > 0) {
				logger.warn(
					`Idempotent Claim hook: n8n is stopping and claimd has not taken ${settler.pending()} claims' settles within ${stopDrainMs / 1000} s; their leases decide them`,
				);
			}
		} catch (error) {
			logger.warn(`Idempotent Claim hook: n8n.stop not handled (${error && error.message})`);
		}
	}

	logger.info(
		`Idempotent Claim hook: active as ${role === 'enqueuer' ? 'queue-mode main/webhook (settles only after a worker died)' : role === 'worker' ? 'queue-mode worker' : 'regular-mode n8n'}; claimd ${config.url}; failed executions' claims: ${config.onError} unless the trigger's item names its own`,
	);
	return {
		hooks: { workflow: { postExecute: [postExecute] }, n8n: { stop: [stop] } },
		active: true,
		role,
		settler,
		onJobStalled,
		postExecute,
		stop,
		idle,
	};
}

module.exports = { createHook };
