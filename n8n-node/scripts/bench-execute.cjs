#!/usr/bin/env node
/*
 * Times the Idempotent Claim node's execute() per item with a mocked execute
 * context, and counts what it asks of n8n, so that the node's own cost can be
 * compared before and after a change (not a test: nothing here passes or fails).
 *
 * Usage (Node 24, after `npm run build`):
 *   node scripts/bench-execute.cjs [--dist DIR] [--engine vm|legacy|quickjs]
 *                                  [--items N] [--runs N]
 *   --dist    the built package's dist/ to load the node from (default: ./dist),
 *             e.g. the dist/ of an older commit built in a git worktree
 *   --engine  n8n's expression engine (default vm, n8n 2.x's default)
 *   --items   items per execution in the batch scenarios (default 20)
 *   --runs    timed executions per scenario (default 300, after 50 warm-up ones)
 *
 *   --n8n-core [N8N_NODE_MODULES]
 *             instead of the mocked context: Claim and Complete in n8n-core's own
 *             ExecuteContext (the installed n8n's, default
 *             $IC_CACHE_DIR/n8n-2.41.1/node_modules from scripts/install-n8n.sh),
 *             their requests sent by n8n's own HTTP helper to a local stand-in
 *             for claimd; only n8n's credential store is replaced (reads counted)
 *
 *   node scripts/bench-execute.cjs --keepalive-check [N8N_NODE_MODULES]
 *             instead: sends 50 requests through n8n's own HTTP helper (the
 *             installed n8n's @n8n/backend-network, default
 *             $IC_CACHE_DIR/n8n-2.41.1/node_modules from scripts/install-n8n.sh)
 *             to a local server, without and with agentOptions.keepAlive, and
 *             prints how many TCP connections they opened and left open.
 *
 * The context: getNodeParameter does what n8n-core's does (the node's stored
 * parameters with the defaults n8n's Workflow adds; rawExpressions returns the
 * stored value; otherwise n8n-workflow's own Expression evaluates it for the
 * item, on the selected engine, as in n8n 2.41). n8n-core's own
 * getNodeParameter adds little to that (its additional keys, built once per
 * node run, and a check against the node's description: about 2 µs a call
 * for a fixed value, measured on n8n-core 2.41.1), but n8n evaluates an
 * expression against the execution's full run data, which made the Event ID
 * expression cost 3.7 ms in n8n against ~0.7 ms here: the times of evaluated
 * parameters are a lower bound. getCredentials and httpRequestWithAuthentication
 * answer at once (claimd's answers, made up): their costs in n8n (a database
 * read and decryption, ~1.8 ms; n8n's HTTP helper on a new connection, 3.5 to
 * 5 ms, measured) are counted, not timed. Each execution has its own
 * execution ID; Complete runs in the same execution as its Claim, with the
 * same credential, as in the workflow Webhook → Claim → … → Complete.
 *
 * Prints one line per scenario: median and p90 of execute() in ms, ms per
 * item, and per execution the parameters n8n evaluated, the raw parameter
 * reads, the getNode and getWorkflowDataProxy calls (n8n deep-copies the node,
 * ~12 µs, and builds a data proxy, ~70 µs, for each), the credential reads and
 * the sidecar requests.
 */
'use strict';

const path = require('node:path');

const args = process.argv.slice(2);
function option(name, fallback) {
	const at = args.indexOf(`--${name}`);
	return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
}
const root = path.resolve(__dirname, '..');
const dist = path.resolve(option('dist', path.join(root, 'dist')));
const engine = option('engine', 'vm');
const ITEMS = Number(option('items', '20'));
const RUNS = Number(option('runs', '300'));
const WARMUP = 50;

const cacheDir =
	process.env.IC_CACHE_DIR || path.join(process.env.HOME || '', '.cache/idempotent-claim');
/** The installed n8n's node_modules: the value after `--name`, or the cache's n8n 2.41.1. */
function n8nModules(name) {
	const at = args.indexOf(`--${name}`);
	return at >= 0 && at + 1 < args.length && !args[at + 1].startsWith('--')
		? path.resolve(args[at + 1])
		: path.join(cacheDir, 'n8n-2.41.1/node_modules');
}
const coreModules = args.includes('--n8n-core') ? n8nModules('n8n-core') : undefined;

// One n8n-workflow for the bench, n8n-core and the node (n8n hands a node
// its own): with --n8n-core the installed n8n's, otherwise this package's
// (the version n8n 2.41.1 ships), CommonJS as n8n loads it.
const workflowFile = coreModules
	? require.resolve('n8n-workflow', { paths: [coreModules] })
	: require.resolve('n8n-workflow/dist/cjs/index.js', { paths: [root] });
const Module = require('node:module');
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
	return request === 'n8n-workflow' ? workflowFile : resolveFilename.call(this, request, ...rest);
};
const { Workflow, Expression } = require(workflowFile);
const { IdempotentClaim } = require(
	path.join(dist, 'nodes/IdempotentClaim/IdempotentClaim.node.js'),
);

const nodeType = new IdempotentClaim();
const nodeTypes = {
	getByName: () => nodeType,
	getByNameAndVersion: () => nodeType,
	getKnownTypes: () => ({}),
};
const CREDENTIALS = { idempotentClaimApi: { id: 'cred-1', name: 'Sidecar' } };
const CREDENTIAL_DATA = { baseUrl: 'http://claimd:8080', apiKey: 'ic_live_bench' };

/** A Webhook node's item: headers, params, query, body. */
function webhookItem(index) {
	const id = `evt_${String(index).padStart(8, '0')}`;
	return {
		json: {
			headers: {
				host: 'n8n.example.com',
				'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
				'content-type': 'application/json; charset=utf-8',
				'content-length': '912',
				accept: '*/*; q=0.5, application/xml',
				'cache-control': 'no-cache',
				'stripe-signature': `t=1700000000,v1=${'ab'.repeat(32)}`,
				'x-forwarded-for': '3.18.12.63',
				'x-forwarded-proto': 'https',
			},
			params: {},
			query: {},
			body: {
				id,
				object: 'event',
				type: 'invoice.paid',
				created: 1700000000 + index,
				data: { object: { id: `in_${index}`, amount_paid: 1200 + index, currency: 'eur' } },
			},
			webhookUrl: 'https://n8n.example.com/webhook/stripe',
			executionMode: 'production',
		},
	};
}

/** What the Claim node adds to a won item. */
function claimedItem(index) {
	const item = webhookItem(index);
	item.json.idempotency = {
		key: `stripe:evt_${index}`,
		source: 'stripe',
		event_id: `evt_${index}`,
		action: '',
		claim_id: `0190c0de-0000-7000-8000-${String(index).padStart(12, '0')}`,
		claim_token: `ct_${'9'.repeat(40)}${index}`,
		attempt: 1,
		outcome: 'won',
		state: 'processing',
		result_ref: null,
		retry_after_seconds: null,
		next_attempt_at: null,
		lease_until: '2099-01-01T00:05:00Z',
	};
	return item;
}

/** claimd's answer to a request, made up from the request. */
function answer(options) {
	const url = String(options.url);
	const claims = (options.body && options.body.claims) || [];
	if (url.endsWith('/v1/claims/batch')) {
		return {
			results: claims.map((claim, i) => ({
				outcome: 'won',
				claim_id: `0190c0de-0000-7000-8000-${String(i).padStart(12, '0')}`,
				idempotency_key: `${claim.source}:${claim.event_id}`,
				source: claim.source,
				event_id: claim.event_id,
				action: '',
				claim_token: `ct_${'9'.repeat(40)}`,
				attempt: 1,
				state: 'processing',
				lease_until: '2099-01-01T00:05:00Z',
				payload_hash: 'ab'.repeat(32),
			})),
		};
	}
	if (url.endsWith('/v1/claims/complete/batch')) {
		return {
			results: claims.map((claim) => ({
				claim_id: claim.claim_id,
				idempotency_key: 'stripe:evt',
				state: 'completed',
				attempt: 1,
			})),
		};
	}
	throw new Error(`bench: no answer for ${url}`);
}

/** Counts of what the node asked of n8n. */
function counters() {
	return { evaluated: 0, raw: 0, getNode: 0, dataProxy: 0, credentialReads: 0, requests: 0 };
}

/**
 * An execute context for one node run: `stored` are the node's parameters as
 * saved in the workflow (n8n adds the defaults), `items` its input.
 */
function executeContext(workflow, nodeName, items, executionId, count) {
	const node = workflow.getNode(nodeName);
	const getNodeParameter = (name, itemIndex, fallback, options) => {
		let value = node.parameters[name];
		if (value === undefined) value = fallback;
		if (value === undefined) throw new Error(`Could not get parameter "${name}"`);
		if (options && options.rawExpressions) {
			count.raw++;
			return value;
		}
		count.evaluated++;
		return workflow.expression.getParameterValue(
			value,
			null,
			0,
			itemIndex,
			node.name,
			items,
			'webhook',
			{},
			undefined,
			false,
			{},
		);
	};
	return {
		getInputData: () => items,
		// n8n-core hands out a deep copy of the node.
		getNode: () => {
			count.getNode++;
			return structuredClone(node);
		},
		getNodeParameter,
		continueOnFail: () => false,
		getExecutionId: () => executionId,
		getExecutionContext: () => undefined,
		getExecutionCancelSignal: () => undefined,
		// n8n-core builds a WorkflowDataProxy for it (~0.07 ms, measured).
		getWorkflowDataProxy: () => {
			count.dataProxy++;
			return { $thisRunIndex: 0 };
		},
		getCredentials: async () => {
			count.credentialReads++;
			return { ...CREDENTIAL_DATA };
		},
		helpers: {
			httpRequestWithAuthentication: async (_type, options) => {
				count.requests++;
				return answer(options);
			},
		},
	};
}

function workflowOf(parameters) {
	return new Workflow({
		nodes: [
			{
				id: 'claim-node',
				name: 'Idempotent Claim',
				type: 'n8n-nodes-idempotent-claim.idempotentClaim',
				typeVersion: 2,
				position: [0, 0],
				parameters: parameters.claim ?? CLAIM_EVENT_ID,
				credentials: CREDENTIALS,
			},
			{
				id: 'complete-node',
				name: 'Complete',
				type: 'n8n-nodes-idempotent-claim.idempotentClaim',
				typeVersion: 2,
				position: [0, 0],
				parameters: parameters.complete ?? { operation: 'complete' },
				credentials: CREDENTIALS,
			},
		],
		connections: {},
		active: false,
		nodeTypes,
		settings: { executionOrder: 'v1' },
	});
}

const CLAIM_EVENT_ID = {
	operation: 'claim',
	source: 'stripe',
	eventId: '={{ $json.body.id }}',
	payloadMode: 'fields',
	payloadFields: 'body',
};

const SCENARIOS = [
	{
		name: 'Claim, Event ID ={{ $json.body.id }}, 1 item',
		items: 1,
		parameters: { claim: CLAIM_EVENT_ID },
		nodes: ['Idempotent Claim'],
	},
	{
		name: 'Claim + Complete (defaults), one execution, 1 item',
		items: 1,
		parameters: { claim: CLAIM_EVENT_ID, complete: { operation: 'complete' } },
		nodes: ['Idempotent Claim', 'Complete'],
	},
	{
		name: `Claim, Event ID ={{ $json.body.id }}, ${ITEMS} items`,
		items: ITEMS,
		parameters: { claim: CLAIM_EVENT_ID },
		nodes: ['Idempotent Claim'],
	},
	{
		name: `Claim, Key Parts $json.body.type + $json["body"]["data"]["object"]["id"], ${ITEMS} items`,
		items: ITEMS,
		parameters: {
			claim: {
				operation: 'claim',
				source: 'stripe',
				keyMode: 'composite',
				keyParts: {
					parts: [
						{ value: '={{ $json.body.type }}' },
						{ value: '={{ $json["body"]["data"]["object"]["id"] }}' },
					],
				},
				eventType: '={{ $json.body.type }}',
				payloadMode: 'fields',
				payloadFields: 'body',
			},
		},
		nodes: ['Idempotent Claim'],
	},
	{
		name: `Claim, Event ID ={{ $json.body.id.trim() }} (a function: n8n evaluates it), ${ITEMS} items`,
		items: ITEMS,
		parameters: { claim: { ...CLAIM_EVENT_ID, eventId: '={{ $json.body.id.trim() }}' } },
		nodes: ['Idempotent Claim'],
	},
	{
		name: `Complete (defaults, Result Reference ={{ $json.body.data.object.id }}), ${ITEMS} items`,
		items: ITEMS,
		parameters: {
			claim: CLAIM_EVENT_ID,
			complete: { operation: 'complete', resultRef: '={{ $json.body.data.object.id }}' },
		},
		nodes: ['Complete'],
	},
];

function percentile(sorted, p) {
	return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))];
}

async function runScenario(scenario, executionNumber) {
	const workflow = workflowOf(scenario.parameters);
	const acquired = await workflow.expression.acquireIsolate();
	const times = [];
	const total = counters();
	try {
		for (let run = 0; run < WARMUP + RUNS; run++) {
			const executionId = String(executionNumber.next++);
			const count = counters();
			const started = process.hrtime.bigint();
			for (const name of scenario.nodes) {
				const items = Array.from({ length: scenario.items }, (_, i) =>
					name === 'Complete' ? claimedItem(i) : webhookItem(i),
				);
				const ctx = executeContext(workflow, name, items, executionId, count);
				await nodeType.execute.call(ctx);
			}
			const ms = Number(process.hrtime.bigint() - started) / 1e6;
			if (run >= WARMUP) {
				times.push(ms);
				for (const key of Object.keys(total)) total[key] += count[key];
			}
		}
	} finally {
		if (acquired) await workflow.expression.releaseIsolate();
	}
	times.sort((a, b) => a - b);
	const median = percentile(times, 0.5);
	const per = (n) => (n / RUNS).toFixed(n % RUNS === 0 ? 0 : 1);
	console.log(
		`${scenario.name}\n  execute(): median ${median.toFixed(3)} ms, p90 ${percentile(times, 0.9).toFixed(3)} ms, ` +
			`${(median / scenario.items).toFixed(3)} ms per item; per execution: ` +
			`${per(total.evaluated)} parameters evaluated, ${per(total.raw)} raw reads, ` +
			`${per(total.getNode)} getNode, ${per(total.dataProxy)} getWorkflowDataProxy, ` +
			`${per(total.credentialReads)} credential reads, ${per(total.requests)} sidecar requests`,
	);
}

/**
 * Whether n8n's HTTP helper reuses connections: 50 requests through it,
 * without and with agentOptions.keepAlive, counted at a local server.
 */
async function keepAliveCheck(n8nModules) {
	const http = require('node:http');
	const { httpRequest } = require(
		path.join(n8nModules, '@n8n/backend-network/dist/http/axios/request.js'),
	);
	const sockets = new Set();
	let opened = 0;
	let connectionHeader;
	const server = http.createServer((req, res) => {
		connectionHeader = req.headers.connection;
		res.setHeader('content-type', 'application/json');
		res.end('{"ok":true}');
	});
	server.keepAliveTimeout = 60_000;
	server.on('connection', (socket) => {
		opened++;
		sockets.add(socket);
		socket.on('close', () => sockets.delete(socket));
	});
	await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
	const url = `http://127.0.0.1:${server.address().port}/v1/claims/batch`;
	try {
		for (const keepAlive of [false, true]) {
			opened = 0;
			for (let i = 0; i < 50; i++) {
				const options = { url, method: 'POST', body: { claims: [] }, json: true };
				if (keepAlive) options.agentOptions = { keepAlive: true };
				await httpRequest(options, undefined);
			}
			await new Promise((resolve) => setTimeout(resolve, 50));
			console.log(
				`agentOptions.keepAlive ${keepAlive}: 50 requests opened ${opened} TCP connections ` +
					`(Connection: ${connectionHeader}); ${sockets.size} still open afterwards`,
			);
		}
	} finally {
		server.closeAllConnections();
		server.close();
	}
}

/**
 * Claim then Complete in one execution, each in n8n-core's own
 * ExecuteContext, their requests sent by n8n's own HTTP helper to a local
 * stand-in for claimd; only n8n's credential store is replaced (it answers
 * at once: the reads are counted). Prints the median execute() of each.
 */
async function coreBench() {
	const fs = require('node:fs');
	const http = require('node:http');
	const os = require('node:os');
	// n8n-core's InstanceSettings keeps its files here: a folder of the bench's own.
	const home = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-execute-'));
	process.env.N8N_USER_FOLDER = home;
	require(require.resolve('reflect-metadata', { paths: [coreModules] }));
	const core = require(require.resolve('n8n-core', { paths: [coreModules] }));
	const { IdempotentClaimApi } = require(
		path.join(dist, 'credentials/IdempotentClaimApi.credentials.js'),
	);
	const credentialType = new IdempotentClaimApi();
	const count = counters();
	const server = http.createServer((req, res) => {
		let body = '';
		req.on('data', (chunk) => (body += chunk));
		req.on('end', () => {
			res.setHeader('content-type', 'application/json');
			res.end(JSON.stringify(answer({ url: req.url, body: JSON.parse(body || '{}') })));
		});
	});
	await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
	const baseUrl = `http://127.0.0.1:${server.address().port}`;
	const credentialsHelper = {
		getDecrypted: async () => {
			count.credentialReads++;
			return { baseUrl, apiKey: CREDENTIAL_DATA.apiKey };
		},
		getParentTypes: () => [],
		preAuthentication: async () => undefined,
		authenticate: async (credentials, _type, options) =>
			await credentialType.authenticate(credentials, options),
		isCredentialUsableByNode: () => true,
	};
	const workflow = workflowOf({ claim: CLAIM_EVENT_ID });
	const times = { 'Idempotent Claim': [], Complete: [] };
	try {
		for (let run = 0; run < WARMUP + RUNS; run++) {
			const executionId = String(9000 + run);
			const urls = 'http://127.0.0.1:5678';
			const additionalData = {
				executionId,
				credentialsHelper,
				variables: {},
				restApiUrl: urls,
				instanceBaseUrl: urls,
				webhookBaseUrl: urls,
				webhookWaitingBaseUrl: urls,
				webhookTestBaseUrl: urls,
				formWaitingBaseUrl: urls,
			};
			const runExecutionData = core.createRunExecutionData
				? core.createRunExecutionData()
				: require(workflowFile).createRunExecutionData();
			// n8n holds an isolate for the whole execution.
			const acquired = await workflow.expression.acquireIsolate();
			try {
				for (const name of ['Idempotent Claim', 'Complete']) {
					const node = workflow.getNode(name);
					const items = [name === 'Complete' ? claimedItem(run) : webhookItem(run)];
					const executeData = {
						node,
						data: { main: [items] },
						source: { main: [{ previousNode: 'Webhook' }] },
					};
					const ctx = new core.ExecuteContext(
						workflow,
						node,
						additionalData,
						'webhook',
						runExecutionData,
						0,
						items,
						{ main: [items] },
						executeData,
						[],
					);
					const started = process.hrtime.bigint();
					await nodeType.execute.call(ctx);
					const ms = Number(process.hrtime.bigint() - started) / 1e6;
					if (run >= WARMUP) times[name].push(ms);
				}
			} finally {
				if (acquired) await workflow.expression.releaseIsolate();
			}
		}
	} finally {
		server.close();
		fs.rmSync(home, { recursive: true, force: true });
	}
	const total = WARMUP + RUNS;
	for (const [name, list] of Object.entries(times)) {
		list.sort((a, b) => a - b);
		console.log(
			`${name === 'Complete' ? 'Complete (defaults)' : 'Claim, Event ID ={{ $json.body.id }}'}, 1 item, ` +
				`n8n-core ExecuteContext and HTTP helper: median ${percentile(list, 0.5).toFixed(3)} ms, ` +
				`p90 ${percentile(list, 0.9).toFixed(3)} ms`,
		);
	}
	console.log(
		`  per execution (Claim + Complete): ${(count.credentialReads / total).toFixed(1)} credential reads`,
	);
}

async function main() {
	if (args.includes('--keepalive-check')) {
		await keepAliveCheck(n8nModules('keepalive-check'));
		return;
	}
	if (engine !== 'legacy') {
		await Expression.initExpressionEngine({
			engine,
			bridgeTimeout: 5000,
			bridgeMemoryLimit: 128,
			poolSize: 1,
			maxCodeCacheSize: 1024,
		});
	}
	Expression.setExpressionEngine(engine);
	console.log(
		`node ${process.version}, n8n expression engine ${Expression.getActiveImplementation()}, ` +
			`dist ${dist}, ${RUNS} runs per scenario`,
	);
	const executionNumber = { next: 1000 };
	try {
		if (coreModules) await coreBench();
		else for (const scenario of SCENARIOS) await runScenario(scenario, executionNumber);
	} finally {
		Expression.setExpressionEngine('legacy');
		await Expression.disposeExpressionEngine();
	}
}

main().catch((error) => {
	console.error(error);
	process.exitCode = 1;
});
