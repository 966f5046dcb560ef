'use strict';
/**
 * Which claims an n8n execution holds, and what its end means for them.
 *
 * Pure functions over the arguments n8n passes to `workflow.postExecute`
 * (the run, the workflow) and over a stored execution: no network, no
 * environment, no n8n import. The hook (hook.js) calls them; tests call them
 * directly.
 *
 * A claim is an item whose `json.idempotency` has outcome `won`, a
 * `claim_id` and a `claim_token`, output by the Idempotent Claim Trigger or
 * by the Idempotent Claim node's Claim operation (node versions 1 and 2),
 * under the community package's node type or as a custom node (`CUSTOM.*`).
 * The trigger's items still waiting on the execution stack count too: the
 * execution won them even when it never ran the trigger node. An item of
 * any other node that merely carries a copy of such an object is not a
 * claim: its claim is counted where it was won, once.
 *
 * A claim the workflow settled itself is left alone: an output item of the
 * node's Complete, Fail or Resolve operation with the same `claim_id` and a
 * state other than `processing`.
 */

/** The community package's name: node types are `<package>.<node name>`. */
const PACKAGE_NAME = 'n8n-nodes-idempotent-claim';
/** Node type prefix of nodes loaded from N8N_CUSTOM_EXTENSIONS or ~/.n8n/custom. */
const CUSTOM_PREFIX = 'CUSTOM';
const TRIGGER_NODE = 'idempotentClaimTrigger';
const CLAIM_NODE = 'idempotentClaim';
/**
 * Versions of the Idempotent Claim node whose Claim output this hook
 * understands (the `idempotency` object of helpers/idempotency.ts). A new
 * version is added here on purpose, never assumed.
 */
const CLAIM_NODE_VERSIONS = [1, 2];
/** Operations of the Idempotent Claim node that settle a claim. */
const SETTLING_OPERATIONS = ['complete', 'fail', 'resolve'];
/** claimd's retry kinds for a failed claim (FailKind in openapi.yaml). */
const FAIL_KINDS = ['unknown', 'retryable', 'permanent'];
/** Items per settle request: well under claimd's CLAIMD_MAX_BATCH (default 1000). */
const MAX_BATCH = 100;

const PATH_COMPLETE = '/v1/claims/complete/batch';
const PATH_FAIL = '/v1/claims/fail/batch';
const PATH_FAIL_EXECUTION = '/v1/claims/fail/execution';
const PATH_EXECUTION_WORKFLOW = '/v1/executions/workflow';
/** Executions per POST /v1/executions/workflow (claimd takes at most 100). */
const MAX_REPORTS = 100;
/** Claim outcomes whose items show the execution claimed (any of them: the copy's execution matters most). */
const CLAIM_OUTCOMES = ['won', 'duplicate', 'in_progress', 'conflict'];
/** The longest workflow_id / workflow_version claimd takes, in bytes (claim.MaxWorkflowFieldLen). */
const MAX_WORKFLOW_FIELD = 128;
/** The longest execution_id claimd takes, in bytes. */
const MAX_EXECUTION_ID = 200;

function isObject(value) {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asArray(value) {
	return Array.isArray(value) ? value : [];
}

function nonEmptyString(value) {
	return typeof value === 'string' && value !== '';
}

/**
 * 'trigger' for the Idempotent Claim Trigger, 'claim' for the Idempotent
 * Claim node, null for any other node. Accepts the package's type
 * (`n8n-nodes-idempotent-claim.idempotentClaim`, also under an npm scope)
 * and the custom-node type (`CUSTOM.idempotentClaim`).
 */
function nodeKind(node) {
	if (!isObject(node) || typeof node.type !== 'string') return null;
	const dot = node.type.lastIndexOf('.');
	if (dot <= 0) return null;
	const prefix = node.type.slice(0, dot);
	const name = node.type.slice(dot + 1);
	const ours =
		prefix === PACKAGE_NAME || prefix === CUSTOM_PREFIX || prefix.endsWith(`/${PACKAGE_NAME}`);
	if (!ours) return null;
	if (name === TRIGGER_NODE) return 'trigger';
	if (name === CLAIM_NODE) return 'claim';
	return null;
}

/**
 * What a node's output means here: 'claims' (its won items are claims the
 * execution holds), 'settles' (its items report claims the workflow
 * settled) or null (nothing).
 */
function nodeRole(node) {
	const kind = nodeKind(node);
	if (kind === 'trigger') return 'claims';
	if (kind !== 'claim') return null;
	const parameters = isObject(node.parameters) ? node.parameters : {};
	// n8n does not store a parameter left at its default: Claim.
	const operation = parameters.operation === undefined ? 'claim' : parameters.operation;
	if (operation === 'claim') {
		const version = node.typeVersion === undefined ? 1 : node.typeVersion;
		return CLAIM_NODE_VERSIONS.includes(version) ? 'claims' : null;
	}
	return SETTLING_OPERATIONS.includes(operation) ? 'settles' : null;
}

/** The items of n8n task data's main outputs: `{ main: [[item, …] | null, …] }`. */
function* mainItems(data) {
	if (!isObject(data)) return;
	for (const output of asArray(data.main)) {
		for (const item of asArray(output)) {
			if (isObject(item)) yield item;
		}
	}
}

function idempotencyOf(item) {
	const json = isObject(item) ? item.json : undefined;
	return isObject(json) && isObject(json.idempotency) ? json.idempotency : null;
}

/** The claim an item carries when its idempotency object is a won claim with a token. */
function wonClaim(item) {
	const idempotency = idempotencyOf(item);
	if (idempotency === null || idempotency.outcome !== 'won') return null;
	if (!nonEmptyString(idempotency.claim_id) || !nonEmptyString(idempotency.claim_token)) {
		return null;
	}
	return {
		claimId: idempotency.claim_id,
		token: idempotency.claim_token,
		onError: FAIL_KINDS.includes(idempotency.on_error) ? idempotency.on_error : null,
	};
}

/** The claim_id a settling operation's item reports as no longer processing. */
function settledClaimId(item) {
	const idempotency = idempotencyOf(item);
	if (idempotency === null || !nonEmptyString(idempotency.claim_id)) return null;
	if (!nonEmptyString(idempotency.state) || idempotency.state === 'processing') return null;
	return idempotency.claim_id;
}

/**
 * The claims an execution holds and did not settle itself, each once:
 * `[{ claimId, token, onError, node }]` (onError: the item's
 * `idempotency.on_error` when it is a retry kind, else null).
 *
 * - runData: `resultData.runData`, task data lists by node name;
 * - stack: `executionData.nodeExecutionStack` (its trigger entries hold
 *   the trigger's items when the trigger node has not run);
 * - nodes: the workflow's nodes, to know each run data entry's node type;
 * - pinned: names of nodes whose output was pinned data in this run (a
 *   copy of an earlier execution's items, not claims this one won).
 */
function findClaims({ runData, stack, nodes, pinned }) {
	const byName = new Map();
	for (const node of asArray(nodes)) {
		if (isObject(node) && typeof node.name === 'string') byName.set(node.name, node);
	}
	const skip = new Set(asArray(pinned));
	const claims = [];
	const seen = new Set();
	const settled = new Set();
	const add = (claim, node) => {
		if (claim === null) return;
		// One claim can appear more than once (a node run twice over the
		// same items); a second token of one claim is kept: claimd fences it.
		const key = `${claim.claimId}\u0000${claim.token}`;
		if (seen.has(key)) return;
		seen.add(key);
		claims.push({ ...claim, node });
	};

	if (isObject(runData)) {
		for (const [name, tasks] of Object.entries(runData)) {
			if (skip.has(name)) continue;
			const role = nodeRole(byName.get(name));
			if (role === null) continue;
			for (const task of asArray(tasks)) {
				for (const item of mainItems(isObject(task) ? task.data : undefined)) {
					if (role === 'claims') {
						add(wonClaim(item), name);
					} else {
						const id = settledClaimId(item);
						if (id !== null) settled.add(id);
					}
				}
			}
		}
	}

	for (const entry of asArray(stack)) {
		if (!isObject(entry) || !isObject(entry.node)) continue;
		const name = entry.node.name;
		if (skip.has(name)) continue;
		// A stack entry holds a node's input; only the trigger's entry holds
		// the trigger's own items (n8n seeds it with the webhook's answer).
		const node = nodeKind(entry.node) !== null ? entry.node : byName.get(name);
		if (nodeKind(node) !== 'trigger') continue;
		for (const item of mainItems(entry.data)) add(wonClaim(item), name);
	}

	return claims.filter((claim) => !settled.has(claim.claimId));
}

/**
 * Whether the run shows an Idempotent Claim Trigger or Claim node output
 * of a claim, whatever its outcome (won, duplicate, in_progress,
 * conflict): the execution claimed, so claimd's delivery log holds
 * entries of it. Same inputs as findClaims; pinned output is not this
 * execution's.
 */
function hasClaimOutput({ runData, stack, nodes, pinned }) {
	const byName = new Map();
	for (const node of asArray(nodes)) {
		if (isObject(node) && typeof node.name === 'string') byName.set(node.name, node);
	}
	const skip = new Set(asArray(pinned));
	const claimed = (item) => {
		const idempotency = idempotencyOf(item);
		return idempotency !== null && CLAIM_OUTCOMES.includes(idempotency.outcome);
	};
	if (isObject(runData)) {
		for (const [name, tasks] of Object.entries(runData)) {
			if (skip.has(name) || nodeRole(byName.get(name)) !== 'claims') continue;
			for (const task of asArray(tasks)) {
				for (const item of mainItems(isObject(task) ? task.data : undefined)) {
					if (claimed(item)) return true;
				}
			}
		}
	}
	for (const entry of asArray(stack)) {
		if (!isObject(entry) || !isObject(entry.node) || skip.has(entry.node.name)) continue;
		const node = nodeKind(entry.node) !== null ? entry.node : byName.get(entry.node.name);
		if (nodeKind(node) !== 'trigger') continue;
		for (const item of mainItems(entry.data)) {
			if (claimed(item)) return true;
		}
	}
	return false;
}

function workflowField(value) {
	return typeof value === 'string' &&
		value.length > 0 &&
		value.length <= MAX_WORKFLOW_FIELD &&
		/^[\x21-\x7e]+$/.test(value)
		? value
		: null;
}

/**
 * The workflow version report of an ended execution, for POST
 * /v1/executions/workflow: `{ execution_id, workflow_id, workflow_version }`,
 * or null when the run shows no claim (hasClaimOutput) or n8n gave no
 * usable id or version.
 *
 * The version is the workflow data's `versionId`: n8n 2.41 sets it to the
 * id of the workflow history version whose nodes the execution runs (a
 * production execution: the published version's, as live-webhooks.js and
 * the published-version repository copy it next to its nodes; a manual
 * one: the draft that runs). `activeVersionId` is not used: it names the
 * version published when the data was read, which is not the one that ran
 * in a manual execution of a draft, nor after a publish while the old
 * version's trigger still runs.
 */
function workflowReport(run, workflow, executionId) {
	if (!isObject(workflow)) return null;
	const id = workflowField(workflow.id);
	const version = workflowField(workflow.versionId);
	const execution = executionId === undefined || executionId === null ? '' : String(executionId);
	if (id === null || version === null || execution === '' || execution.length > MAX_EXECUTION_ID) {
		return null;
	}
	const data = isObject(run) && isObject(run.data) ? run.data : {};
	const claimed = hasClaimOutput({
		runData: isObject(data.resultData) ? data.resultData.runData : undefined,
		stack: isObject(data.executionData) ? data.executionData.nodeExecutionStack : undefined,
		nodes: workflow.nodes,
		pinned: pinnedNodes(run, workflow),
	});
	return claimed ? { execution_id: execution, workflow_id: id, workflow_version: version } : null;
}

/**
 * The requests that tell claimd the reports' versions: POST
 * /v1/executions/workflow, at most MAX_REPORTS executions each.
 */
function reportRequests(reports) {
	return chunks(reports, MAX_REPORTS).map((part) => ({
		path: PATH_EXECUTION_WORKFLOW,
		body: { executions: part },
		claimIds: [],
	}));
}

/** n8n's execution statuses (ExecutionStatus in n8n-workflow). */
const STATUSES = [
	'canceled',
	'crashed',
	'error',
	'new',
	'running',
	'success',
	'unknown',
	'waiting',
];

/**
 * The run's status: `run.status` as n8n set it; for a run without one,
 * derived as n8n derives it (waiting when it has waitTill, error when its
 * result has an error, success when finished, else unknown).
 */
function executionStatus(run) {
	if (!isObject(run)) return 'unknown';
	if (STATUSES.includes(run.status)) return run.status;
	if (run.waitTill) return 'waiting';
	const resultData = isObject(run.data) && isObject(run.data.resultData) ? run.data.resultData : {};
	if (resultData.error) return 'error';
	return run.finished === true ? 'success' : 'unknown';
}

/**
 * What the end of a run means for its claims:
 *
 * | status                                  | action   |
 * |-----------------------------------------|----------|
 * | success, finished                       | complete |
 * | success, not finished (stopped)         | fail     |
 * | error, crashed, canceled                | fail     |
 * | waiting (waitTill), new, running, unknown | none (the execution goes on, or n8n does not know) |
 *
 * A failed execution may have run its effect before it failed, so `fail`
 * uses the claim's `on_error` kind (default unknown): never a silent
 * second effect.
 */
function actionFor(run) {
	const status = executionStatus(run);
	if (isObject(run) && run.waitTill) return 'none';
	if (status === 'success') return run.finished === false ? 'fail' : 'complete';
	if (status === 'error' || status === 'crashed' || status === 'canceled') return 'fail';
	return 'none';
}

/** Whether any node has run data in the run. */
function hasRunData(run) {
	const runData =
		isObject(run) && isObject(run.data) && isObject(run.data.resultData)
			? run.data.resultData.runData
			: undefined;
	return isObject(runData) && Object.keys(runData).length > 0;
}

/**
 * This process's part, from n8n's execution mode (EXECUTIONS_MODE) and
 * instance type (the command: main, webhook, worker):
 * 'regular' (runs its executions itself), 'worker' (a queue-mode worker:
 * runs the executions it takes from the queue), 'enqueuer' (a queue-mode
 * main or webhook process: puts executions on the queue).
 */
function processRole(executionsMode, instanceType) {
	if (executionsMode !== 'queue') return 'regular';
	return instanceType === 'worker' ? 'worker' : 'enqueuer';
}

/**
 * Whether this process settles the run's claims:
 * - 'act': it ran the execution (regular mode, a worker, or a queue-mode
 *   main running a manual execution itself because
 *   OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS is not true);
 * - 'crashed-worker': a queue-mode main or webhook process, and the run is
 *   an error without run data: the job ended without its worker reporting
 *   (n8n's queue failed it, e.g. the worker died); the claims come from
 *   the stored execution;
 * - 'skip': a queue-mode main or webhook process after a worker ended the
 *   execution (the worker settled its claims).
 */
function whoActs({ role, run, offloadManual }) {
	if (role !== 'enqueuer') return 'act';
	if (isObject(run) && run.mode === 'manual' && !offloadManual) return 'act';
	const status = executionStatus(run);
	if ((status === 'error' || status === 'crashed') && !hasRunData(run)) return 'crashed-worker';
	return 'skip';
}

/** What Fail stores as the claim's last_error: the execution and how it ended, never item data. */
function failText(executionId, status, note) {
	const text = `n8n execution ${executionId} ended with status ${status}`;
	return note ? `${text} (${note})` : text;
}

function chunks(list, size) {
	const out = [];
	for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
	return out;
}

/**
 * The claimd requests that settle `claims`: `[{ path, body, claimIds }]`,
 * at most MAX_BATCH claims each.
 * - complete: POST /v1/claims/complete/batch, result_ref
 *   "n8n-execution:<executionId>";
 * - fail: POST /v1/claims/fail/batch, retry = the claim's on_error or
 *   defaultOnError, error = failText.
 */
function settleRequests({ action, claims, executionId, status, defaultOnError, note }) {
	if (action === 'complete') {
		const resultRef = `n8n-execution:${executionId}`;
		return chunks(claims, MAX_BATCH).map((part) => ({
			path: PATH_COMPLETE,
			body: {
				claims: part.map((c) => ({
					claim_id: c.claimId,
					claim_token: c.token,
					result_ref: resultRef,
				})),
			},
			claimIds: part.map((c) => c.claimId),
		}));
	}
	if (action === 'fail') {
		const error = failText(executionId, status, note);
		return chunks(claims, MAX_BATCH).map((part) => ({
			path: PATH_FAIL,
			body: {
				claims: part.map((c) => ({
					claim_id: c.claimId,
					claim_token: c.token,
					retry: c.onError || defaultOnError,
					error,
				})),
			},
			claimIds: part.map((c) => c.claimId),
		}));
	}
	return [];
}

/**
 * POST /v1/claims/fail/execution for an execution whose run data was lost:
 * fails the claims its Idempotent Claim nodes won (they carry the execution
 * id), which no stored data lists when the execution's worker died.
 */
function failExecutionRequest({ executionId, status, retry, note }) {
	return {
		path: PATH_FAIL_EXECUTION,
		body: { execution_id: String(executionId), retry, error: failText(executionId, status, note) },
		claimIds: [],
	};
}

/** Whether the workflow has an Idempotent Claim node with the Claim operation. */
function hasClaimNode(nodes) {
	return asArray(nodes).some((node) => nodeKind(node) === 'claim' && nodeRole(node) === 'claims');
}

/** Node names whose output came from pinned data in this run (manual and evaluation runs only). */
function pinnedNodes(run, workflow) {
	const mode = isObject(run) ? run.mode : undefined;
	if (mode !== 'manual' && mode !== 'evaluation') return [];
	const fromRun =
		isObject(run.data) && isObject(run.data.resultData) ? run.data.resultData.pinData : undefined;
	const pinData = isObject(fromRun) ? fromRun : isObject(workflow) ? workflow.pinData : undefined;
	return isObject(pinData) ? Object.keys(pinData) : [];
}

/** findClaims over a run (or a stored execution's data) and its workflow. */
function claimsOfRun(run, workflow) {
	const data = isObject(run) && isObject(run.data) ? run.data : {};
	return findClaims({
		runData: isObject(data.resultData) ? data.resultData.runData : undefined,
		stack: isObject(data.executionData) ? data.executionData.nodeExecutionStack : undefined,
		nodes: isObject(workflow) ? workflow.nodes : undefined,
		pinned: pinnedNodes(run, workflow),
	});
}

module.exports = {
	FAIL_KINDS,
	MAX_BATCH,
	PATH_COMPLETE,
	PATH_FAIL,
	PATH_FAIL_EXECUTION,
	PATH_EXECUTION_WORKFLOW,
	MAX_REPORTS,
	actionFor,
	claimsOfRun,
	executionStatus,
	failExecutionRequest,
	failText,
	findClaims,
	hasClaimNode,
	hasClaimOutput,
	hasRunData,
	nodeKind,
	nodeRole,
	pinnedNodes,
	processRole,
	reportRequests,
	settleRequests,
	whoActs,
	workflowReport,
};
