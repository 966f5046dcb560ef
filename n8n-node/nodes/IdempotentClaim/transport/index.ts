import type {
	ICredentialDataDecryptedObject,
	ICredentialsDecrypted,
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	IHttpRequestOptions,
	INode,
	NodeApiError,
	NodeOperationError,
} from 'n8n-workflow';
import { sleep } from 'n8n-workflow';

import { AgedCache } from '../helpers/agedCache';
import {
	answerStatus,
	credentialError,
	isN8nDatabaseError,
	isRetryable,
	mapSidecarError,
	notSidecarError,
	sidecarErrorCode,
	type ErrorContext,
} from './errors';

/** Name of the credential type that authenticates every sidecar request. */
export const CREDENTIAL_TYPE = 'idempotentClaimApi';

/** Upper bound for one sidecar request; a claim answers in milliseconds. */
const REQUEST_TIMEOUT_MS = 30_000;

/*
 * Every request opens a new connection to the sidecar, and a node cannot
 * change that in n8n 2.41: its httpRequest helpers (n8n-core's
 * httpRequestWithAuthentication → @n8n/backend-network OutboundHttp
 * requests().request → httpRequest → convertN8nRequestToAxios →
 * setAxiosAgents → buildNodeAgents) build new HTTP agents for every request,
 * and IHttpRequestOptions has no field for an agent of the node's own.
 * `agentOptions: { keepAlive: true }` reaches only that new agent: the
 * request says Connection: keep-alive, the next request still opens its own
 * connection, and each request leaves one idle socket open until the
 * server closes it (measured: 50 requests, 50 connections, 50 left open).
 * n8n has no setting for it either. So the node sets no agent options; an
 * agent of its own would also leave n8n's proxy and SSRF handling.
 */

/**
 * How a request is sent again after a failure that may be retried (the
 * connection failed or broke, a 5xx answer, or n8n could not read the
 * credential from its own database): the same request, body included, so a
 * Claim keeps its request IDs and Complete / Fail their token. It stops at
 * whichever comes first of `tries` sends and `deadline`.
 */
export interface RetryPolicy {
	/** Sends in all, at least 1 (1: no retry; Infinity: until the deadline). */
	tries: number;
	/** Wait before the second send, in ms; doubled before each further send, at most MAX_WAIT_MS. */
	waitMs: number;
	/**
	 * Epoch ms after which no send starts; the first send always does. A
	 * wait that would end past it is cut short, so the last send starts at
	 * the deadline. A function is called once, when a send fails with a
	 * failure that may be retried: a deadline that is costly to work out
	 * (Complete's lease end, read from an expression) is not worked out
	 * for a request that succeeds at once. It returns the same as the
	 * number would be.
	 */
	deadline?: number | (() => number | undefined);
}

/** Send once. */
export const NO_RETRY: RetryPolicy = { tries: 1, waitMs: 0 };

/** Bounds of RetryPolicy, and the longest single wait. */
export const MAX_TRIES = 5;
export const MAX_WAIT_MS = 5_000;

export interface SidecarRequest {
	method: IHttpRequestMethods;
	/** Path below the base URL, starting with "/v1/". */
	path: string;
	body?: IDataObject;
	qs?: IDataObject;
	/** Item the request is made for; unset for a batch. */
	itemIndex?: number;
	/** Retries after a transport failure or a 5xx; default NO_RETRY. */
	retry?: RetryPolicy;
	/** What the sidecar's not_found means for this request; default "Claim not found". */
	notFound?: ErrorContext['notFound'];
	/** What the sidecar's invalid_state means for this request; default a general message. */
	invalidState?: ErrorContext['invalidState'];
}

/** The sidecar's address and the credential that authenticates requests to it. */
interface Connection {
	baseUrl: string;
	credentials: ICredentialsDecrypted;
	/**
	 * Where an earlier node run of the same execution read it (the
	 * execution's share); unset when this node run read it itself.
	 */
	sharedAs?: string;
}

/**
 * The connection of each node run, keyed by its execute context: the
 * credential is read from n8n (its database) once per node run, not once per
 * request or retry. Only a loaded credential is kept; a failed load is tried
 * again by the next request.
 */
const connections = new WeakMap<object, Connection>();

/** How long a credential read by one node run serves the later node runs of its execution. */
export const SHARED_CREDENTIAL_MAX_AGE_MS = 60_000;
/** How many executions' credentials are kept at most; the oldest goes first. */
export const SHARED_CREDENTIAL_MAX_ENTRIES = 100;

/**
 * The credential each running execution read, keyed by execution ID and
 * credential ID (sharedCredentialKey), in the order they were read.
 *
 * n8n reads a credential from its database and decrypts it on every
 * getCredentials (about 1.8 ms measured), and a workflow Webhook → Claim →
 * protected node → Complete reads the same credential twice in one
 * execution. So the first read of an execution serves the later node runs
 * of that execution in the same process (an execution runs in one process,
 * a worker in queue mode) that use the same credential, for at most
 * SHARED_CREDENTIAL_MAX_AGE_MS after the read; at most
 * SHARED_CREDENTIAL_MAX_ENTRIES executions are kept, expired ones are
 * dropped whenever one is added, so the share stays small and a credential
 * is never kept long after its execution. The credential's own change time
 * would be the better key, but n8n hands a node only the credential's ID,
 * name and decrypted data, not when it changed.
 *
 * A credential edited while an execution runs (a new API key, a new Base
 * URL): without the share each node run reads the edited one; with it,
 * the node runs that follow within SHARED_CREDENTIAL_MAX_AGE_MS still use
 * what the first read of the execution saw, so Complete reaches the
 * sidecar and tenant its Claim reached. If that no longer works (the old
 * key was revoked, answered 401; or the old Base URL cannot be reached),
 * the node forgets the shared credential at that failure and reads the
 * credential itself: after a 401 it sends the request again at once with
 * what it read (not counted as a try, since the sidecar refused it
 * unprocessed); after a connection failure, the next try of its retry
 * settings uses it. Node runs after the share expires read the edited
 * credential, as without the share.
 *
 * Not shared: an execution without an ID, a node without a credential ID,
 * and an execution that resolves credentials per user (n8n's dynamic
 * credentials: its execution context carries credentials), whose reads n8n
 * records per node.
 */
const shared = new AgedCache<Connection>(
	SHARED_CREDENTIAL_MAX_AGE_MS,
	SHARED_CREDENTIAL_MAX_ENTRIES,
);

/** The share key of this node run's credential, or undefined when it is not shared. */
function sharedCredentialKey(context: IExecuteFunctions, node: INode): string | undefined {
	const executionId: unknown =
		typeof context.getExecutionId === 'function' ? context.getExecutionId() : undefined;
	if (typeof executionId !== 'string' || executionId === '') return undefined;
	if (typeof context.getExecutionContext === 'function') {
		const executionContext: unknown = context.getExecutionContext();
		if (
			typeof executionContext === 'object' &&
			executionContext !== null &&
			(executionContext as { credentials?: unknown }).credentials !== undefined
		) {
			return undefined;
		}
	}
	const credentialId = node.credentials?.[CREDENTIAL_TYPE]?.id;
	if (typeof credentialId !== 'string' || credentialId === '') return undefined;
	return JSON.stringify([executionId, credentialId]);
}

/** Forgets a connection this node run took from the share, here and in the share. */
function forgetShared(context: IExecuteFunctions, connection: Connection): void {
	if (connection.sharedAs === undefined) return;
	if (connections.get(context) === connection) connections.delete(context);
	shared.forget(connection.sharedAs, (kept) => kept.credentials === connection.credentials);
}

/** How many executions' credentials the share holds (for tests). */
export function sharedCredentialCount(): number {
	return shared.size;
}

/**
 * Reads the credential once per node run, or takes the one an earlier node
 * run of the same execution read (see `shared`), and hands it to every
 * request of the run: httpRequestWithAuthentication applies the credential
 * type's own `authenticate` (the Bearer header) to the credential it is
 * given, instead of reading the credential again.
 */
async function connection(this: IExecuteFunctions): Promise<Connection> {
	const known = connections.get(this);
	if (known !== undefined) return known;
	const node = this.getNode();
	const key = sharedCredentialKey(this, node);
	if (key !== undefined) {
		const found = shared.get(key, Date.now());
		if (found !== undefined) {
			const taken: Connection = { ...found, sharedAs: key };
			connections.set(this, taken);
			return taken;
		}
	}
	const data: ICredentialDataDecryptedObject = await this.getCredentials(CREDENTIAL_TYPE);
	const ref = node.credentials?.[CREDENTIAL_TYPE];
	const loaded: Connection = {
		baseUrl: String(data.baseUrl ?? '').replace(/\/+$/, ''),
		credentials: { id: ref?.id ?? '', name: ref?.name ?? '', type: CREDENTIAL_TYPE, data },
	};
	connections.set(this, loaded);
	if (key !== undefined) shared.set(key, loaded, Date.now());
	return loaded;
}

/**
 * Marks an error that ends a request whose last failure could have been
 * retried: the request gave up (tries or deadline), it was not refused.
 */
const GAVE_UP = 'retriesExhausted';

/**
 * Whether error is the end of a request that gave up on a failure it could
 * have retried (sidecar unreachable or 5xx, n8n's database unavailable):
 * whether the request landed is unknown.
 */
export function retriesExhausted(error: unknown): boolean {
	return (
		typeof error === 'object' &&
		error !== null &&
		(error as { context?: IDataObject }).context?.[GAVE_UP] === true
	);
}

/**
 * Sends one request to the Idempotent Claim sidecar through the credential
 * (Bearer API key) and returns the parsed JSON answer. A failure that
 * isRetryable allows, or a failure of n8n's own database while reading the
 * credential, is sent again per `request.retry` (waits from n8n's sleep,
 * cut short when the execution is cancelled); every failure that remains
 * becomes a NodeApiError from mapSidecarError (or credentialError), saying
 * how often the request was sent, and marked for retriesExhausted when its
 * last failure could have been retried.
 */
export async function sidecarRequest<T>(
	this: IExecuteFunctions,
	request: SidecarRequest,
): Promise<T> {
	const policy = request.retry ?? NO_RETRY;
	const { tries, waitMs } = policy;
	let deadline = typeof policy.deadline === 'function' ? undefined : policy.deadline;
	let deadlineKnown = typeof policy.deadline !== 'function';
	/** Whether the deadline has passed at `now` (working it out the first time). */
	const pastDeadline = (now: number): boolean => {
		if (!deadlineKnown && typeof policy.deadline === 'function') {
			deadline = policy.deadline();
			deadlineKnown = true;
		}
		return deadline !== undefined && now >= deadline;
	};
	let baseUrl: string | undefined;
	let conn: Connection | undefined;
	for (let sent = 1; ; sent++) {
		let loading = true;
		conn = undefined;
		try {
			conn = await connection.call(this);
			loading = false;
			baseUrl = conn.baseUrl;
			const options: IHttpRequestOptions = {
				method: request.method,
				url: `${conn.baseUrl}${request.path}`,
				headers: { Accept: 'application/json' },
				json: true,
				timeout: REQUEST_TIMEOUT_MS,
			};
			if (request.body !== undefined) options.body = request.body;
			if (request.qs !== undefined) options.qs = request.qs;
			const answer: unknown = await this.helpers.httpRequestWithAuthentication.call(
				this,
				CREDENTIAL_TYPE,
				options,
				{ credentialsDecrypted: conn.credentials },
			);
			// Every answer of the sidecar's API is a JSON object; a web page
			// or an empty body comes from something else at the Base URL.
			if (isJsonObject(answer)) return answer as T;
			throw notSidecarError(
				this.getNode(),
				answer === '' || answer === undefined || answer === null
					? 'answered with an empty body'
					: 'answered with something other than a JSON object',
				{ baseUrl, itemIndex: request.itemIndex, request: `${request.method} ${request.path}` },
			);
		} catch (error) {
			if (sidecarErrorCode(error) === 'not_sidecar') {
				throw mapSidecarError(this.getNode(), error, { itemIndex: request.itemIndex });
			}
			const retryable = loading ? isN8nDatabaseError(error) : isRetryable(error);
			if (conn?.sharedAs !== undefined) {
				// The credential an earlier node run of this execution read may
				// be out of date (see `shared`): a refused key, or no answer at
				// its Base URL. Read it again.
				const status = answerStatus(error);
				if (status === 401) {
					forgetShared(this, conn);
					// Refused unprocessed: send again at once, not counted as a try.
					sent--;
					continue;
				}
				if (status === undefined && retryable) forgetShared(this, conn);
			}
			const now = Date.now();
			if (sent >= tries || !retryable || pastDeadline(now)) {
				const ctx: ErrorContext = {
					baseUrl,
					itemIndex: request.itemIndex,
					tries: sent,
					request: `${request.method} ${request.path}`,
					notFound: request.notFound,
					invalidState: request.invalidState,
				};
				const final: NodeApiError | NodeOperationError = loading
					? credentialError(this.getNode(), error, ctx)
					: mapSidecarError(this.getNode(), error, ctx);
				if (retryable) final.context[GAVE_UP] = true;
				throw final;
			}
			let wait = Math.min(MAX_WAIT_MS, waitMs * 2 ** Math.min(sent - 1, 20));
			if (deadline !== undefined) wait = Math.min(wait, deadline - now);
			if (wait > 0) await sleep(wait, this.getExecutionCancelSignal());
		}
	}
}

function isJsonObject(value: unknown): boolean {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Path segment for a claim id, encoded so that any id stays one segment. */
export function claimPath(claimId: string, action?: string): string {
	const base = `/v1/claims/${encodeURIComponent(claimId)}`;
	return action ? `${base}/${action}` : base;
}
