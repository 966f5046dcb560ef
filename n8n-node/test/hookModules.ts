/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals --
 * The hook (hooks/) is plain CommonJS that n8n loads with require(); the tests load it the same way.
 */
/**
 * The settle hook's modules as n8n loads them (Node's require, no
 * transform), with the types the tests rely on.
 */
import { createRequire } from 'node:module';

export interface Claim {
	claimId: string;
	token: string;
	onError: string | null;
	node: string;
}

export interface SettleRequest {
	path: string;
	body: Record<string, unknown>;
	claimIds: string[];
}

export interface Logger {
	debug(message: string, meta?: unknown): void;
	info(message: string, meta?: unknown): void;
	warn(message: string, meta?: unknown): void;
	error(message: string, meta?: unknown): void;
}

export interface ClaimsModule {
	MAX_BATCH: number;
	PATH_COMPLETE: string;
	PATH_FAIL: string;
	PATH_FAIL_EXECUTION: string;
	PATH_EXECUTION_WORKFLOW: string;
	MAX_REPORTS: number;
	actionFor(run: unknown): 'complete' | 'fail' | 'none';
	claimsOfRun(run: unknown, workflow: unknown): Claim[];
	executionStatus(run: unknown): string;
	findClaims(input: {
		runData?: unknown;
		stack?: unknown;
		nodes?: unknown;
		pinned?: string[];
	}): Claim[];
	hasRunData(run: unknown): boolean;
	nodeKind(node: unknown): 'trigger' | 'claim' | null;
	processRole(executionsMode: unknown, instanceType: unknown): 'regular' | 'worker' | 'enqueuer';
	settleRequests(input: {
		action: string;
		claims: Claim[];
		executionId: string;
		status: string;
		defaultOnError: string;
		note?: string;
	}): SettleRequest[];
	whoActs(input: {
		role: string;
		run: unknown;
		offloadManual: boolean;
	}): 'act' | 'crashed-worker' | 'skip';
	workflowReport(run: unknown, workflow: unknown, executionId: unknown): WorkflowReport | null;
	reportRequests(reports: WorkflowReport[]): SettleRequest[];
}

/** One execution of POST /v1/executions/workflow. */
export interface WorkflowReport {
	execution_id: string;
	workflow_id: string;
	workflow_version: string;
}

export interface ConfigModule {
	readConfig(
		env: Record<string, string | undefined>,
		readFile: (path: string) => string,
	):
		| {
				ok: true;
				config: {
					url: string;
					apiKey: string;
					onError: string;
					retrySeconds: number;
					maxPending: number;
					waitMs: number;
					delayMs: number;
				};
		  }
		| { ok: false; problem: string };
}

export interface SettlerOptions {
	url: string;
	apiKey: string;
	retrySeconds: number;
	maxPending: number;
	logger: Logger;
	fetch?: typeof fetch;
	now?: () => number;
	random?: () => number;
	baseDelayMs?: number;
	maxDelayMs?: number;
	requestTimeoutMs?: number;
	concurrency?: number;
}

export interface Settler {
	pending(): number;
	submit(
		requests: SettleRequest[],
		options: { executionId: string; waitMs?: number },
	): Promise<void>;
	idle(): Promise<void>;
	retryNow(): void;
	close(): void;
	backoff(attempts: number, retryAfterMs?: number): number;
}

export interface SettlerModule {
	Settler: new (options: SettlerOptions) => Settler;
}

export interface N8nServices {
	available: boolean;
	logger?: () => Logger;
	executionsMode: () => string;
	instanceType: () => string;
	onJobStalled: (listener: (event: { executionId: string }) => void) => void;
	readExecution: (executionId: string) => Promise<unknown>;
}

export type PostExecute = (run: unknown, workflow: unknown, executionId: string) => Promise<void>;

export interface Hook {
	hooks: { workflow: { postExecute: PostExecute[] }; n8n: { stop: Array<() => Promise<void>> } };
	active: boolean;
	role?: string;
	settler?: Settler;
	onJobStalled?: (event: { executionId: string }) => void;
	postExecute?: PostExecute;
	stop?: () => Promise<void>;
	idle?: () => Promise<void>;
}

export interface HookModule {
	createHook(deps: {
		env: Record<string, string | undefined>;
		argv?: string[];
		readFile?: (path: string) => string;
		n8n: N8nServices;
		logger?: Logger;
		fetch?: typeof fetch;
		settlerOptions?: Partial<SettlerOptions>;
		stopDrainMs?: number;
		/** Arms a timer (default: setTimeout, unref'd); the hook and its settler use it. */
		setTimer?: (fn: () => void, ms: number) => unknown;
		clearTimer?: (timer: never) => void;
	}): Hook;
}

const load = createRequire(__filename);

export const claims = load('../hooks/lib/claims.js') as ClaimsModule;
export const config = load('../hooks/lib/config.js') as ConfigModule;
export const settler = load('../hooks/lib/settler.js') as SettlerModule;
export const hook = load('../hooks/lib/hook.js') as HookModule;

/** A logger that keeps every line, by level. */
export function memoryLogger(): Logger & { lines: Array<{ level: string; message: string }> } {
	const lines: Array<{ level: string; message: string }> = [];
	const at = (level: string) => (message: string) => {
		lines.push({ level, message });
	};
	return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
