'use strict';
/**
 * The hook's settings, read once when n8n loads the hook file.
 *
 * | Variable | Meaning | Default |
 * |---|---|---|
 * | IDEMPOTENT_CLAIM_URL | claimd's base URL (http or https), e.g. http://claimd:8080 | required |
 * | IDEMPOTENT_CLAIM_API_KEY | a claimd API key of the tenant the trigger's credential uses | one of the two required |
 * | IDEMPOTENT_CLAIM_API_KEY_FILE | a file holding that key (Docker/Kubernetes secrets) | |
 * | IDEMPOTENT_CLAIM_ON_ERROR | retry kind for claims of a failed execution whose item names none: unknown, retryable, permanent | unknown |
 * | IDEMPOTENT_CLAIM_SETTLE_RETRY_SECONDS | how long a settle that claimd did not take is retried | 3600 |
 * | IDEMPOTENT_CLAIM_MAX_PENDING | claims waiting for a retry, at most; past it the oldest are dropped | 10000 |
 * | IDEMPOTENT_CLAIM_SETTLE_WAIT_MS | how long the end of an execution waits for the first try; 0: not at all, the settle is sent after n8n answered (n8n's stop still waits for it) | 0 |
 * | IDEMPOTENT_CLAIM_SETTLE_DELAY_MS | with no wait: how long after an execution ends its settle is sent, with those of every execution that ended meanwhile; 0: on the next timer turn | 50 |
 *
 * readConfig never throws: a missing or invalid setting gives
 * `{ ok: false, problem }`, one sentence naming the variable (never its
 * value when it may be the key).
 */

const FAIL_KINDS = ['unknown', 'retryable', 'permanent'];

/**
 * IDEMPOTENT_CLAIM_SETTLE_DELAY_MS's default: long enough that n8n has
 * answered the webhook and written the execution before the settle's
 * request takes the process's CPU (measured with `make overhead`: a settle
 * sent on the next timer turn still overlapped n8n's own end of the
 * execution), short against a lease (minutes).
 */
const DEFAULT_DELAY_MS = 50;
/** The longest IDEMPOTENT_CLAIM_SETTLE_DELAY_MS: a settle this late is still far inside any lease. */
const MAX_DELAY_MS = 10_000;

function positiveInteger(env, name, fallback, { allowZero = false } = {}) {
	const raw = env[name];
	if (raw === undefined || raw.trim() === '') return { value: fallback };
	const text = raw.trim();
	if (!/^\d+$/.test(text)) return { problem: `${name} must be a whole number, got "${text}"` };
	const value = Number(text);
	if (!Number.isSafeInteger(value) || (value === 0 && !allowZero)) {
		return { problem: `${name} must be ${allowZero ? 'a whole number' : 'at least 1'}` };
	}
	return { value };
}

/**
 * The settings from env; readFile(path) reads IDEMPOTENT_CLAIM_API_KEY_FILE
 * (utf-8; surrounding whitespace, such as the final newline, is dropped).
 * Returns `{ ok: true, config }` or `{ ok: false, problem }`, where config is
 * `{ url, apiKey, onError, retrySeconds, maxPending, waitMs, delayMs }` (url has no
 * user info, so it may be logged).
 */
function readConfig(env, readFile) {
	const rawUrl = (env.IDEMPOTENT_CLAIM_URL || '').trim();
	if (rawUrl === '') return { ok: false, problem: 'IDEMPOTENT_CLAIM_URL is not set' };
	let parsed;
	try {
		parsed = new URL(rawUrl);
	} catch {
		return { ok: false, problem: 'IDEMPOTENT_CLAIM_URL is not a URL (e.g. http://claimd:8080)' };
	}
	if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
		return { ok: false, problem: 'IDEMPOTENT_CLAIM_URL must start with http:// or https://' };
	}
	if (parsed.search !== '' || parsed.hash !== '') {
		return { ok: false, problem: 'IDEMPOTENT_CLAIM_URL must not have a query or fragment' };
	}
	// A path is kept (claimd behind a proxy prefix); routes are appended.
	if (parsed.username !== '' || parsed.password !== '') {
		return {
			ok: false,
			problem:
				'IDEMPOTENT_CLAIM_URL must not carry user info; the key goes in IDEMPOTENT_CLAIM_API_KEY',
		};
	}
	const url = `${parsed.origin}${parsed.pathname.replace(/\/+$/, '')}`;

	const inline = env.IDEMPOTENT_CLAIM_API_KEY;
	const file = env.IDEMPOTENT_CLAIM_API_KEY_FILE;
	const hasInline = inline !== undefined && inline.trim() !== '';
	const hasFile = file !== undefined && file.trim() !== '';
	if (hasInline && hasFile) {
		return {
			ok: false,
			problem: 'both IDEMPOTENT_CLAIM_API_KEY and IDEMPOTENT_CLAIM_API_KEY_FILE are set; set one',
		};
	}
	let apiKey;
	if (hasInline) {
		apiKey = inline.trim();
	} else if (hasFile) {
		try {
			apiKey = String(readFile(file.trim())).trim();
		} catch (error) {
			const code = error && error.code ? error.code : 'unreadable';
			return { ok: false, problem: `IDEMPOTENT_CLAIM_API_KEY_FILE cannot be read (${code})` };
		}
		if (apiKey === '') return { ok: false, problem: 'IDEMPOTENT_CLAIM_API_KEY_FILE is empty' };
	} else {
		return {
			ok: false,
			problem: 'neither IDEMPOTENT_CLAIM_API_KEY nor IDEMPOTENT_CLAIM_API_KEY_FILE is set',
		};
	}
	if (/[\s\u0000-\u001f\u007f]/.test(apiKey)) {
		return { ok: false, problem: 'the API key contains whitespace or control characters' };
	}

	const onError = (env.IDEMPOTENT_CLAIM_ON_ERROR || 'unknown').trim();
	if (!FAIL_KINDS.includes(onError)) {
		return {
			ok: false,
			problem: `IDEMPOTENT_CLAIM_ON_ERROR must be unknown, retryable or permanent, got "${onError}"`,
		};
	}
	const retry = positiveInteger(env, 'IDEMPOTENT_CLAIM_SETTLE_RETRY_SECONDS', 3600);
	if (retry.problem) return { ok: false, problem: retry.problem };
	const pending = positiveInteger(env, 'IDEMPOTENT_CLAIM_MAX_PENDING', 10000);
	if (pending.problem) return { ok: false, problem: pending.problem };
	const wait = positiveInteger(env, 'IDEMPOTENT_CLAIM_SETTLE_WAIT_MS', 0, { allowZero: true });
	if (wait.problem) return { ok: false, problem: wait.problem };
	if (wait.value > 30000) {
		return { ok: false, problem: 'IDEMPOTENT_CLAIM_SETTLE_WAIT_MS must be at most 30000' };
	}
	const delay = positiveInteger(env, 'IDEMPOTENT_CLAIM_SETTLE_DELAY_MS', DEFAULT_DELAY_MS, {
		allowZero: true,
	});
	if (delay.problem) return { ok: false, problem: delay.problem };
	if (delay.value > MAX_DELAY_MS) {
		return {
			ok: false,
			problem: `IDEMPOTENT_CLAIM_SETTLE_DELAY_MS must be at most ${MAX_DELAY_MS}`,
		};
	}

	return {
		ok: true,
		config: {
			url,
			apiKey,
			onError,
			retrySeconds: retry.value,
			maxPending: pending.value,
			waitMs: wait.value,
			delayMs: delay.value,
		},
	};
}

module.exports = { readConfig };
