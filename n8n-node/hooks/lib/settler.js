'use strict';
/**
 * Sends settle requests to claimd and keeps the ones claimd did not take.
 *
 * A settle reports an effect that already happened (or failed), so it must
 * not be lost while claimd is briefly away: a request that meets a network
 * error, a timeout, 408, 429 or a 5xx is tried again in the background,
 * with capped exponential backoff and jitter (never sooner than claimd's
 * Retry-After), until it lands or `retrySeconds` pass since it was
 * submitted. Sending the same request again is safe: claimd answers a
 * repeated complete or fail of the same token (and, for fail, the same
 * retry and error) with the record as it settled.
 *
 * Answers that will not change are final and never retried: an item's
 * `lease_lost`, `invalid_state` or `not_found` (logged at warn: the claim is
 * no longer this execution's to settle), an item's `invalid`/`malformed`
 * and a request refused with another 4xx (logged at error).
 *
 * Memory is bounded: when more than `maxPending` claims wait for a retry,
 * the oldest requests that already had a try are dropped (logged with their
 * claim ids); their leases decide them (under the default `review` policy
 * they become `unknown` for an operator).
 *
 * Logs name execution ids and claim ids only: never a claim token, the API
 * key or item data.
 */

/** Requests in flight at once. */
const CONCURRENCY = 4;
/** Rounds of POST /v1/claims/fail/execution while claimd answers `more`. */
const MAX_ROUNDS = 100;
/** The longest wait between tries once n8n stops (retryNow). */
const HURRY_DELAY_MS = 250;
/** A Retry-After longer than this is shortened to it. */
const MAX_RETRY_AFTER_MS = 300_000;

/** What a final item answer means, for the log line. */
const FINAL_CODES = {
	lease_lost:
		'its claim token is no longer current (the lease ended, or an operator released it, or another holder has it)',
	invalid_state: 'the claim is in a state that cannot take this',
	not_found: 'claimd has no such claim for this API key (another tenant?)',
};

function describeNetworkError(error) {
	if (error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return 'timed out';
	const cause = error && error.cause;
	const code = (cause && cause.code) || (error && error.code);
	if (code) return String(code);
	return (error && error.message) || 'network error';
}

function retryAfterMs(response) {
	const value = response.headers.get('retry-after');
	if (value === null || !/^\s*\d+\s*$/.test(value)) return 0;
	return Math.min(Number(value) * 1000, MAX_RETRY_AFTER_MS);
}

function errorCode(text) {
	try {
		const body = JSON.parse(text);
		if (body && body.error && typeof body.error.code === 'string') return body.error.code;
	} catch {
		// Not claimd's JSON: the caller reports the HTTP status alone.
	}
	return null;
}

function plural(count, noun) {
	return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

function defaultSetTimer(fn, ms) {
	const timer = setTimeout(fn, ms);
	// Never keep n8n running for a retry: a settle still waiting at shutdown
	// is left to its lease.
	if (timer && typeof timer.unref === 'function') timer.unref();
	return timer;
}

/** Whether a job is POST /v1/executions/workflow (its body lists executions). */
function isReport(job) {
	return Boolean(job.body && Array.isArray(job.body.executions));
}

class Settler {
	/**
	 * options: url, apiKey, retrySeconds, maxPending, logger ({ debug, info,
	 * warn, error }); optional fetch, now, random, setTimer, clearTimer,
	 * baseDelayMs (1000), maxDelayMs (60000), requestTimeoutMs (10000),
	 * concurrency (4).
	 */
	constructor(options) {
		this.url = options.url;
		this.apiKey = options.apiKey;
		this.retryMs = options.retrySeconds * 1000;
		this.maxPending = options.maxPending;
		this.logger = options.logger;
		this.fetch = options.fetch || ((url, init) => fetch(url, init));
		this.now = options.now || Date.now;
		this.random = options.random || Math.random;
		this.setTimer = options.setTimer || defaultSetTimer;
		this.clearTimer = options.clearTimer || clearTimeout;
		this.baseDelayMs = options.baseDelayMs || 1000;
		this.maxDelayMs = options.maxDelayMs || 60_000;
		this.requestTimeoutMs = options.requestTimeoutMs || 10_000;
		this.concurrency = options.concurrency || CONCURRENCY;

		this.hurry = false;
		this.seq = 0;
		this.waiting = [];
		this.inFlight = 0;
		this.weight = 0;
		this.timer = null;
		this.timerAt = Infinity;
		this.healthy = true;
		this.idleWaiters = [];
		/** True once claimd answered that it has no POST /v1/executions/workflow. */
		this.reportsRefused = false;
	}

	/** Claims queued or in flight (a fail-by-execution request counts as one). */
	pending() {
		return this.weight;
	}

	/**
	 * Queues the requests of one execution (`[{ path, body, claimIds }]`) and
	 * starts their first try at once. Resolves when every first try has
	 * ended or after waitMs, whichever comes first; never rejects. What did
	 * not land is retried in the background.
	 */
	async submit(requests, { executionId, waitMs = 0 }) {
		const firstTries = [];
		const created = this.now();
		for (const request of requests) {
			let resolve;
			const promise = new Promise((r) => (resolve = r));
			const job = {
				seq: ++this.seq,
				executionId: String(executionId),
				path: request.path,
				body: request.body,
				claimIds: request.claimIds || [],
				weight: Math.max(1, (request.claimIds || []).length),
				attempts: 0,
				tried: false,
				rounds: 0,
				created,
				deadline: created + this.retryMs,
				nextAt: created,
				lastReason: '',
				firstTry: { promise, resolve },
			};
			this.waiting.push(job);
			this.weight += job.weight;
			firstTries.push(promise);
		}
		this.enforceCap();
		this.pump();
		if (waitMs <= 0 || firstTries.length === 0) return;
		let timer;
		const bound = new Promise((resolve) => {
			timer = this.setTimer(resolve, waitMs);
		});
		await Promise.race([Promise.all(firstTries), bound]);
		this.clearTimer(timer);
	}

	/** Resolves when nothing is queued or in flight (for tests and shutdown). */
	idle() {
		if (this.waiting.length === 0 && this.inFlight === 0) return Promise.resolve();
		return new Promise((resolve) => this.idleWaiters.push(resolve));
	}

	/**
	 * n8n's stop: tries every request that waits for a retry now, not at
	 * its backoff's end, and from then on waits at most HURRY_DELAY_MS
	 * between tries (or claimd's Retry-After, if longer).
	 */
	retryNow() {
		this.hurry = true;
		const now = this.now();
		for (const job of this.waiting) job.nextAt = Math.min(job.nextAt, now);
		this.pump();
	}

	/** Drops every queued request and the retry timer (tests). */
	close() {
		if (this.timer !== null) this.clearTimer(this.timer);
		this.timer = null;
		this.timerAt = Infinity;
		for (const job of this.waiting) job.firstTry.resolve();
		this.waiting = [];
		this.weight = 0;
		this.checkIdle();
	}

	checkIdle() {
		if (this.waiting.length !== 0 || this.inFlight !== 0) return;
		const waiters = this.idleWaiters;
		this.idleWaiters = [];
		for (const resolve of waiters) resolve();
	}

	/** Drops the oldest requests that already had a try while more than maxPending claims wait. */
	enforceCap() {
		const dropped = [];
		while (this.weight > this.maxPending) {
			let oldest = -1;
			for (let i = 0; i < this.waiting.length; i++) {
				const job = this.waiting[i];
				if (!job.tried) continue;
				if (oldest === -1 || job.seq < this.waiting[oldest].seq) oldest = i;
			}
			if (oldest === -1) break;
			const [job] = this.waiting.splice(oldest, 1);
			this.weight -= job.weight;
			dropped.push(job);
		}
		for (const job of dropped) {
			this.logger.error(
				`Idempotent Claim hook: more than ${this.maxPending} claims wait for claimd (IDEMPOTENT_CLAIM_MAX_PENDING); ` +
					`dropped the oldest settle, of execution ${job.executionId}${this.claimList(job)}; their leases decide them`,
				{ executionId: job.executionId, claimIds: job.claimIds },
			);
		}
		if (dropped.length > 0) this.checkIdle();
	}

	claimList(job) {
		return job.claimIds.length > 0 ? ` (claims ${job.claimIds.join(', ')})` : '';
	}

	/** Starts due requests up to the concurrency limit, then arms the timer for the next one. */
	pump() {
		while (this.inFlight < this.concurrency) {
			const now = this.now();
			let next = -1;
			for (let i = 0; i < this.waiting.length; i++) {
				const job = this.waiting[i];
				if (job.nextAt > now) continue;
				if (next === -1 || job.seq < this.waiting[next].seq) next = i;
			}
			if (next === -1) break;
			const [job] = this.waiting.splice(next, 1);
			this.inFlight++;
			void this.run(job).then(() => {
				this.inFlight--;
				this.pump();
				this.checkIdle();
			});
		}
		this.arm();
	}

	arm() {
		let at = Infinity;
		for (const job of this.waiting) at = Math.min(at, job.nextAt);
		if (at === this.timerAt) return;
		if (this.timer !== null) this.clearTimer(this.timer);
		this.timer = null;
		this.timerAt = at;
		if (at === Infinity || this.inFlight >= this.concurrency) {
			// A request ending calls pump(), which arms again.
			this.timerAt = Infinity;
			return;
		}
		this.timer = this.setTimer(
			() => {
				this.timer = null;
				this.timerAt = Infinity;
				this.pump();
			},
			Math.max(0, at - this.now()),
		);
	}

	/** One try of a job and what follows it; never rejects. */
	async run(job) {
		let outcome;
		try {
			outcome = await this.attempt(job);
		} catch (error) {
			outcome = { retry: true, reason: describeNetworkError(error) };
		}
		job.tried = true;
		job.firstTry.resolve();
		if (outcome.again) {
			// fail/execution answered `more`: the next round at once (a
			// round is not a retry).
			job.nextAt = this.now();
			this.waiting.push(job);
			return;
		}
		job.attempts++;
		if (!outcome.retry) {
			this.weight -= job.weight;
			this.setHealthy(true);
			if (job.attempts > 1 && outcome.landed) {
				this.logger.info(
					`Idempotent Claim hook: settled execution ${job.executionId}'s claims after ${job.attempts} tries`,
					{ executionId: job.executionId, claimIds: job.claimIds },
				);
			}
			return;
		}

		job.lastReason = outcome.reason;
		this.setHealthy(false, outcome.reason);
		const now = this.now();
		if (now >= job.deadline) {
			this.weight -= job.weight;
			this.logger.error(
				`Idempotent Claim hook: gave up settling execution ${job.executionId}${this.claimList(job)} after ` +
					`${job.attempts} tries in ${Math.round((now - job.created) / 1000)} s ` +
					`(IDEMPOTENT_CLAIM_SETTLE_RETRY_SECONDS; last: ${outcome.reason}); their leases decide them`,
				{ executionId: job.executionId, claimIds: job.claimIds },
			);
			return;
		}
		job.nextAt = Math.min(now + this.backoff(job.attempts, outcome.retryAfterMs), job.deadline);
		this.logger.debug(
			`Idempotent Claim hook: settle of execution ${job.executionId} not taken (${outcome.reason}); try ${job.attempts + 1} in ${Math.round((job.nextAt - now) / 1000)} s`,
			{ executionId: job.executionId },
		);
		this.waiting.push(job);
		this.enforceCap();
	}

	/** Delay before the next try: exponential from baseDelayMs, capped, half of it jittered; at least Retry-After. */
	backoff(attempts, retryAfter) {
		const exp = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** Math.min(attempts - 1, 30));
		const delay = exp / 2 + this.random() * (exp / 2);
		return Math.max(this.hurry ? Math.min(delay, HURRY_DELAY_MS) : delay, retryAfter || 0);
	}

	setHealthy(healthy, reason) {
		if (healthy === this.healthy) return;
		this.healthy = healthy;
		if (healthy) {
			this.logger.info(
				`Idempotent Claim hook: claimd takes settles again (${this.weight} claims still queued)`,
			);
		} else {
			this.logger.warn(
				`Idempotent Claim hook: claimd did not take a settle (${reason}); settles are kept and retried for up to ${this.retryMs / 1000} s`,
			);
		}
	}

	/**
	 * One HTTP request. Resolves to `{ landed: true }` (claimd answered
	 * every item), `{ final: true }` (refused for good; logged here),
	 * `{ again: true }` (fail/execution has more) or `{ retry: true, reason,
	 * retryAfterMs }`.
	 */
	async attempt(job) {
		let response;
		let text;
		try {
			response = await this.fetch(this.url + job.path, {
				method: 'POST',
				headers: {
					authorization: `Bearer ${this.apiKey}`,
					'content-type': 'application/json',
					accept: 'application/json',
				},
				body: JSON.stringify(job.body),
				signal: AbortSignal.timeout(this.requestTimeoutMs),
			});
			// Read the whole answer: it frees the kept-alive connection.
			text = await response.text();
		} catch (error) {
			return { retry: true, reason: describeNetworkError(error) };
		}
		const status = response.status;
		if (status === 408 || status === 429 || status >= 500) {
			const code = errorCode(text);
			return {
				retry: true,
				reason: `HTTP ${status}${code ? ` ${code}` : ''}`,
				retryAfterMs: retryAfterMs(response),
			};
		}
		if (status !== 200) {
			const code = errorCode(text);
			if (isReport(job) && (status === 404 || status === 405)) {
				// A claimd without POST /v1/executions/workflow: stop sending
				// versions (once per process), settles go on.
				if (!this.reportsRefused) {
					this.reportsRefused = true;
					this.logger.warn(
						`Idempotent Claim hook: claimd does not take executions' workflow versions (HTTP ${status}); ` +
							'the hook stops sending them, so duplicate causes name no version (upgrade claimd)',
					);
				}
				return { final: true };
			}
			const hint =
				status === 401
					? ": the API key is not one of claimd's (IDEMPOTENT_CLAIM_API_KEY)"
					: status === 404 && code === null
						? ': IDEMPOTENT_CLAIM_URL does not point at claimd'
						: '';
			this.logger.error(
				`Idempotent Claim hook: claimd refused the settle of execution ${job.executionId}${this.claimList(job)}: ` +
					`HTTP ${status}${code ? ` ${code}` : ''}${hint}; their leases decide them`,
				{ executionId: job.executionId, claimIds: job.claimIds },
			);
			return { final: true };
		}

		let answer;
		try {
			answer = JSON.parse(text);
		} catch {
			answer = null;
		}
		if (isReport(job)) return this.reportAnswer(job, answer);
		if (job.body && job.body.execution_id !== undefined) return this.executionAnswer(job, answer);
		return this.batchAnswer(job, answer);
	}

	batchAnswer(job, answer) {
		const sent = job.body.claims;
		const results = answer && Array.isArray(answer.results) ? answer.results : null;
		if (results === null || results.length !== sent.length) {
			this.logger.error(
				`Idempotent Claim hook: the answer to the settle of execution ${job.executionId} is not claimd's ` +
					`(IDEMPOTENT_CLAIM_URL points at something else?)${this.claimList(job)}`,
				{ executionId: job.executionId, claimIds: job.claimIds },
			);
			return { final: true };
		}
		const verb = job.path.includes('/complete/') ? 'completed' : 'failed';
		results.forEach((result, i) => {
			const claimId = sent[i].claim_id;
			const error = result && result.error;
			if (!error) {
				this.logger.debug(
					`Idempotent Claim hook: claim ${claimId} of execution ${job.executionId} ${verb} (${result && result.state})`,
					{ executionId: job.executionId, claimId },
				);
				return;
			}
			const code = typeof error.code === 'string' ? error.code : 'error';
			const meaning = FINAL_CODES[code];
			const line =
				`Idempotent Claim hook: claim ${claimId} of execution ${job.executionId} was not ${verb}: ${code}` +
				(meaning ? ` (${meaning})` : error.field ? ` (${error.field})` : '');
			if (meaning) this.logger.warn(line, { executionId: job.executionId, claimId, code });
			else this.logger.error(line, { executionId: job.executionId, claimId, code });
		});
		return { landed: true };
	}

	reportAnswer(job, answer) {
		const sent = job.body.executions;
		const results = answer && Array.isArray(answer.results) ? answer.results : null;
		if (results === null || results.length !== sent.length) {
			this.logger.error(
				`Idempotent Claim hook: the answer to the workflow versions of executions ${job.executionId} is not claimd's ` +
					'(IDEMPOTENT_CLAIM_URL points at something else?)',
				{ executionId: job.executionId },
			);
			return { final: true };
		}
		results.forEach((result, i) => {
			const executionId = sent[i].execution_id;
			const revised = result && Number.isInteger(result.revised) ? result.revised : 0;
			const entries = result && Number.isInteger(result.entries) ? result.entries : 0;
			const line =
				`Idempotent Claim hook: execution ${executionId} ran workflow ${sent[i].workflow_id} version ${sent[i].workflow_version}: ` +
				`${entries} delivery-log ${entries === 1 ? 'entry' : 'entries'} took it` +
				(revised > 0 ? `, ${plural(revised, 'duplicate')} now explained by two workflow versions` : '');
			// Two versions of one workflow ran one delivery: an operator's business.
			this.logger[revised > 0 ? 'info' : 'debug'](line, { executionId });
		});
		return { landed: true };
	}

	executionAnswer(job, answer) {
		if (!answer || !Array.isArray(answer.claims)) {
			this.logger.error(
				`Idempotent Claim hook: the answer to failing execution ${job.executionId}'s claims is not claimd's`,
				{ executionId: job.executionId },
			);
			return { final: true };
		}
		const ids = answer.claims.map((record) => record && record.claim_id).filter(Boolean);
		if (ids.length > 0) {
			this.logger.info(
				`Idempotent Claim hook: failed ${plural(ids.length, 'claim')} that execution ${job.executionId} won (claims ${ids.join(', ')})`,
				{ executionId: job.executionId, claimIds: ids },
			);
		}
		job.rounds++;
		if (answer.more === true && job.rounds < MAX_ROUNDS) return { again: true };
		return { landed: true };
	}
}

module.exports = { Settler, FINAL_CODES };
