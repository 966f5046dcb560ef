// Task runner launcher for the local n8nio/runners stand-in.
//
// Like n8n's own launcher: ask the task broker for a grant token
// (POST {N8N_RUNNERS_TASK_BROKER_URI}/runners/auth with the shared auth
// token), start the JavaScript runner with it, and start a new one whenever
// it exits. The broker may not be up yet (n8n starting): retry every 2 s.
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');

const broker = (process.env.N8N_RUNNERS_TASK_BROKER_URI || 'http://127.0.0.1:5679').replace(/\/+$/, '');
const authToken = process.env.N8N_RUNNERS_AUTH_TOKEN;
if (!authToken) {
	console.error('launcher: N8N_RUNNERS_AUTH_TOKEN is required');
	process.exit(1);
}
const fs = require('node:fs');
const globalModules = '/usr/local/lib/node_modules';
const runner = [
	path.join(globalModules, 'n8n/node_modules/@n8n/task-runner/dist/start.js'),
	path.join(globalModules, '@n8n/task-runner/dist/start.js'),
].find((p) => fs.existsSync(p));
if (!runner) {
	console.error('launcher: @n8n/task-runner not found in the n8n install');
	process.exit(1);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let stopping = false;
let child;
for (const sig of ['SIGTERM', 'SIGINT']) {
	process.on(sig, () => {
		stopping = true;
		if (child) child.kill(sig);
		else process.exit(0);
	});
}

async function grant() {
	for (;;) {
		try {
			const res = await fetch(`${broker}/runners/auth`, {
				method: 'POST',
				headers: { 'content-type': 'application/json' },
				body: JSON.stringify({ token: authToken }),
			});
			if (res.ok) {
				const body = await res.json();
				if (body && body.data && body.data.token) return body.data.token;
			}
			console.error(`launcher: broker answered ${res.status}; retrying`);
		} catch (err) {
			console.error(`launcher: broker not reachable (${err.cause ? err.cause.code : err.message}); retrying`);
		}
		await sleep(2000);
	}
}

(async () => {
	while (!stopping) {
		const grantToken = await grant();
		child = spawn(process.execPath, [runner], {
			stdio: 'inherit',
			env: { ...process.env, N8N_RUNNERS_GRANT_TOKEN: grantToken, N8N_RUNNERS_TASK_BROKER_URI: broker },
		});
		const code = await new Promise((r) => child.on('exit', (c, s) => r(c ?? s)));
		child = undefined;
		if (stopping) process.exit(0);
		console.error(`launcher: runner exited (${code}); starting a new one`);
		await sleep(1000);
	}
})();
