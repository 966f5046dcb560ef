/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals --
 * The community-node rules are for code that runs inside n8n; this test runs a local HTTP server as claimd.
 */
/**
 * The settle hook's sender (hooks/lib/settler.js) against a real local
 * HTTP server standing in for claimd: retries until a settle lands, final
 * answers never retried, the first try's bounded wait, the bounded queue.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';

import { memoryLogger, settler as lib, type Settler, type SettleRequest } from './hookModules';

const KEY = 'ic_test_secret_key';
/** A claim token (not a secret: it is in Claim's output), which logs must still not show. */
const FENCE = '9f0c4b8e-0000-4000-8000-0000000fence';

interface Seen {
	path: string;
	authorization: string | undefined;
	body: Record<string, unknown>;
	socket: unknown;
}

type Answer = {
	status: number;
	body?: unknown;
	headers?: Record<string, string>;
	delayMs?: number;
};

interface FakeClaimd {
	url: string;
	seen: Seen[];
	connections: number;
	server: Server;
}

const servers: Server[] = [];
const settlers: Settler[] = [];

afterEach(async () => {
	for (const s of settlers.splice(0)) s.close();
	await Promise.all(
		servers.splice(0).map(
			(server) =>
				new Promise<void>((resolve) => {
					server.closeAllConnections();
					server.close(() => resolve());
				}),
		),
	);
});

/** A claimd stand-in: answers requests with `answers` in turn (the last one repeats). */
async function fakeClaimd(answers: Array<Answer | ((body: Record<string, unknown>) => Answer)>) {
	const seen: Seen[] = [];
	const state = { connections: 0 };
	const server = createServer((req: IncomingMessage, res: ServerResponse) => {
		const chunks: Buffer[] = [];
		req.on('data', (c: Buffer) => chunks.push(c));
		req.on('end', () => {
			const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
			seen.push({
				path: req.url ?? '',
				authorization: req.headers.authorization,
				body,
				socket: req.socket,
			});
			const next = answers[Math.min(seen.length - 1, answers.length - 1)];
			const answer = typeof next === 'function' ? next(body) : next;
			const send = () => {
				res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
				res.end(typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body ?? {}));
			};
			if (answer.delayMs) setTimeout(send, answer.delayMs);
			else send();
		});
	});
	server.on('connection', () => state.connections++);
	await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
	servers.push(server);
	const { port } = server.address() as AddressInfo;
	return {
		url: `http://127.0.0.1:${port}`,
		seen,
		server,
		get connections() {
			return state.connections;
		},
	} as FakeClaimd;
}

/** claimd's answer to a settle batch: every item settled. */
const settled = (body: Record<string, unknown>): Answer => ({
	status: 200,
	body: {
		results: (body.claims as Array<{ claim_id: string }>).map((c) => ({
			claim_id: c.claim_id,
			state: 'completed',
		})),
	},
});

const unavailable: Answer = {
	status: 503,
	body: { error: { code: 'unavailable', message: 'PostgreSQL is unreachable' } },
	headers: { 'retry-after': '0' },
};

function complete(...ids: string[]): SettleRequest {
	return {
		path: '/v1/claims/complete/batch',
		body: {
			claims: ids.map((id) => ({
				claim_id: id,
				claim_token: FENCE,
				result_ref: 'n8n-execution:7',
			})),
		},
		claimIds: ids,
	};
}

function newSettler(
	url: string,
	options: Partial<ConstructorParameters<typeof lib.Settler>[0]> = {},
) {
	const logger = memoryLogger();
	const s = new lib.Settler({
		url,
		apiKey: KEY,
		retrySeconds: 60,
		maxPending: 1000,
		logger,
		baseDelayMs: 10,
		maxDelayMs: 40,
		...options,
	});
	settlers.push(s);
	return { settler: s, logger };
}

function noSecrets(logger: ReturnType<typeof memoryLogger>) {
	for (const { message } of logger.lines) {
		expect(message).not.toContain(KEY);
		expect(message).not.toContain(FENCE);
	}
}

describe('Settler', () => {
	it('retries a settle that met 503 until claimd takes it, on one kept-alive connection', async () => {
		const claimd = await fakeClaimd([unavailable, unavailable, settled]);
		const { settler, logger } = newSettler(claimd.url);

		await settler.submit([complete('claim-1', 'claim-2')], { executionId: '7', waitMs: 1000 });
		await settler.idle();

		expect(claimd.seen).toHaveLength(3);
		for (const request of claimd.seen) {
			expect(request.path).toBe('/v1/claims/complete/batch');
			expect(request.authorization).toBe(`Bearer ${KEY}`);
			expect(request.body).toEqual(claimd.seen[0].body);
		}
		expect(claimd.connections).toBe(1);
		expect(settler.pending()).toBe(0);
		expect(logger.lines.filter((l) => l.level === 'warn')).toEqual([
			expect.objectContaining({ message: expect.stringContaining('HTTP 503 unavailable') }),
		]);
		expect(logger.lines.some((l) => l.level === 'info' && /again/.test(l.message))).toBe(true);
		expect(logger.lines.some((l) => /after 3 tries/.test(l.message))).toBe(true);
		noSecrets(logger);
	});

	it('retries network errors and timeouts, then gives up after the retry window', async () => {
		// A port nothing listens on: connection refused on every try.
		const claimd = await fakeClaimd([settled]);
		const url = claimd.url;
		await new Promise<void>((resolve) => claimd.server.close(() => resolve()));
		servers.splice(servers.indexOf(claimd.server), 1);
		const { settler, logger } = newSettler(url, {
			retrySeconds: 1,
			baseDelayMs: 50,
			maxDelayMs: 200,
		});

		const started = Date.now();
		await settler.submit([complete('claim-1')], { executionId: '7' });
		await settler.idle();

		expect(Date.now() - started).toBeGreaterThanOrEqual(900);
		const gaveUp = logger.lines.find((l) => l.level === 'error');
		expect(gaveUp?.message).toMatch(
			/gave up settling execution 7 \(claims claim-1\) after \d+ tries/,
		);
		expect(gaveUp?.message).toMatch(/ECONNREFUSED/);
		expect(settler.pending()).toBe(0);
		noSecrets(logger);
	});

	it('treats a request that outlives its timeout as not taken', async () => {
		const claimd = await fakeClaimd([{ ...settled({ claims: [] }), delayMs: 300 }, settled]);
		const { settler, logger } = newSettler(claimd.url, { requestTimeoutMs: 50 });
		await settler.submit([complete('claim-1')], { executionId: '7' });
		await settler.idle();
		expect(claimd.seen.length).toBeGreaterThanOrEqual(2);
		expect(logger.lines.some((l) => /timed out/.test(l.message))).toBe(true);
	});

	it('never retries final item answers: lease_lost, invalid_state, not_found, invalid', async () => {
		const claimd = await fakeClaimd([
			{
				status: 200,
				body: {
					results: [
						{ error: { code: 'lease_lost', message: 'lease lost' } },
						{ error: { code: 'invalid_state', message: 'no' } },
						{ error: { code: 'not_found', message: 'no' } },
						{ error: { code: 'invalid', message: 'no', field: 'claims[3].claim_token' } },
						{ claim_id: 'claim-5', state: 'completed' },
					],
				},
			},
		]);
		const { settler, logger } = newSettler(claimd.url);
		await settler.submit([complete('claim-1', 'claim-2', 'claim-3', 'claim-4', 'claim-5')], {
			executionId: '7',
		});
		await settler.idle();

		expect(claimd.seen).toHaveLength(1);
		const warns = logger.lines.filter((l) => l.level === 'warn').map((l) => l.message);
		expect(warns).toEqual([
			expect.stringMatching(/claim claim-1 of execution 7 was not completed: lease_lost/),
			expect.stringMatching(/claim claim-2 of execution 7 was not completed: invalid_state/),
			expect.stringMatching(/claim claim-3 of execution 7 was not completed: not_found/),
		]);
		expect(logger.lines.filter((l) => l.level === 'error').map((l) => l.message)).toEqual([
			expect.stringMatching(/claim claim-4 .* invalid \(claims\[3\]\.claim_token\)/),
		]);
		noSecrets(logger);
	});

	it.each([
		[401, 'unauthorized', /API key is not one of claimd's/],
		[422, 'invalid', /HTTP 422 invalid/],
		[400, 'malformed', /HTTP 400 malformed/],
		[404, null, /does not point at claimd/],
	])('never retries a request refused with %i', async (status, code, message) => {
		const claimd = await fakeClaimd([
			{ status, body: code ? { error: { code, message: 'refused' } } : '<html>404</html>' },
			settled,
		]);
		const { settler, logger } = newSettler(claimd.url);
		await settler.submit([complete('claim-1')], { executionId: '7' });
		await settler.idle();
		expect(claimd.seen).toHaveLength(1);
		expect(logger.lines.find((l) => l.level === 'error')?.message).toMatch(message);
		noSecrets(logger);
	});

	it('takes a 200 that is not claimd’s answer as final, and says so', async () => {
		const claimd = await fakeClaimd([{ status: 200, body: '<html>proxy</html>' }]);
		const { settler, logger } = newSettler(claimd.url);
		await settler.submit([complete('claim-1')], { executionId: '7' });
		await settler.idle();
		expect(claimd.seen).toHaveLength(1);
		expect(logger.lines.find((l) => l.level === 'error')?.message).toMatch(/not claimd's/);
	});

	it('holds the end of an execution no longer than the wait bound', async () => {
		const slow = await fakeClaimd([(body) => ({ ...settled(body), delayMs: 400 })]);
		const { settler: bounded } = newSettler(slow.url, { requestTimeoutMs: 5000 });
		const started = Date.now();
		await bounded.submit([complete('claim-1')], { executionId: '7', waitMs: 50 });
		expect(Date.now() - started).toBeLessThan(300);
		expect(bounded.pending()).toBe(1);
		await bounded.idle();
		expect(bounded.pending()).toBe(0);
		expect(slow.seen).toHaveLength(1);

		// A first try that answers at once is awaited.
		const fast = await fakeClaimd([settled]);
		const { settler: quick } = newSettler(fast.url);
		await quick.submit([complete('claim-2')], { executionId: '8', waitMs: 1000 });
		expect(quick.pending()).toBe(0);
	});

	it('bounds the queue: past maxPending the oldest settles that had a try are dropped and logged', async () => {
		const claimd = await fakeClaimd([{ ...unavailable, headers: {} }]);
		const { settler, logger } = newSettler(claimd.url, {
			maxPending: 3,
			baseDelayMs: 60_000,
			maxDelayMs: 60_000,
		});
		for (let n = 1; n <= 5; n++) {
			await settler.submit([complete(`claim-${n}`)], { executionId: String(n), waitMs: 1000 });
			expect(settler.pending()).toBeLessThanOrEqual(3);
		}
		expect(claimd.seen).toHaveLength(5);
		const drops = logger.lines.filter((l) => /dropped the oldest settle/.test(l.message));
		expect(drops.map((l) => l.message)).toEqual([
			expect.stringContaining('execution 1 (claims claim-1)'),
			expect.stringContaining('execution 2 (claims claim-2)'),
		]);
		expect(drops.every((l) => l.level === 'error')).toBe(true);
		expect(settler.pending()).toBe(3);
		noSecrets(logger);
	});

	it('never drops a settle before its first try, even when it alone passes the cap', async () => {
		const claimd = await fakeClaimd([settled]);
		const { settler } = newSettler(claimd.url, { maxPending: 1 });
		await settler.submit([complete('claim-1', 'claim-2', 'claim-3')], { executionId: '7' });
		await settler.idle();
		expect(claimd.seen).toHaveLength(1);
		expect((claimd.seen[0].body.claims as unknown[]).length).toBe(3);
	});

	it('calls fail/execution again while claimd answers more', async () => {
		const claimd = await fakeClaimd([
			{ status: 200, body: { claims: [{ claim_id: 'claim-1', state: 'unknown' }], more: true } },
			{ status: 200, body: { claims: [{ claim_id: 'claim-2', state: 'unknown' }] } },
		]);
		const { settler, logger } = newSettler(claimd.url);
		await settler.submit(
			[
				{
					path: '/v1/claims/fail/execution',
					body: {
						execution_id: '7',
						retry: 'unknown',
						error: 'n8n execution 7 ended with status error',
					},
					claimIds: [],
				},
			],
			{ executionId: '7' },
		);
		await settler.idle();
		expect(claimd.seen.map((s) => s.path)).toEqual([
			'/v1/claims/fail/execution',
			'/v1/claims/fail/execution',
		]);
		expect(logger.lines.filter((l) => l.level === 'info').map((l) => l.message)).toEqual([
			expect.stringContaining('failed 1 claim that execution 7 won (claims claim-1)'),
			expect.stringContaining('failed 1 claim that execution 7 won (claims claim-2)'),
		]);
	});

	it('backs off exponentially with jitter, capped, and never sooner than Retry-After', () => {
		const s = new lib.Settler({
			url: 'http://127.0.0.1:1',
			apiKey: KEY,
			retrySeconds: 60,
			maxPending: 10,
			logger: memoryLogger(),
			baseDelayMs: 1000,
			maxDelayMs: 60_000,
			random: () => 1,
		});
		expect([1, 2, 3, 4, 7, 8, 40].map((n) => s.backoff(n))).toEqual([
			1000, 2000, 4000, 8000, 60_000, 60_000, 60_000,
		]);
		const low = new lib.Settler({
			url: 'http://127.0.0.1:1',
			apiKey: KEY,
			retrySeconds: 60,
			maxPending: 10,
			logger: memoryLogger(),
			random: () => 0,
		});
		expect(low.backoff(3)).toBe(2000);
		expect(low.backoff(1, 5000)).toBe(5000);
	});
});
