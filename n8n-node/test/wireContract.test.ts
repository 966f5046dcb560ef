/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals, @n8n/community-nodes/no-dangerous-functions --
 * The community-node rules are for code that runs inside n8n; this test reads the sidecar's openapi.yaml and runs its generator.
 */
/**
 * The node against the sidecar's wire contract, sidecar/httpapi/openapi.yaml:
 * the generated transport/openapi.d.ts is current, STATUS_BY_CODE is the
 * ErrorCode enum with the statuses of its x-status, and (at compile time,
 * `npm run typecheck`) every field the node's request and answer types
 * name is a field of the schema it stands for, typed so that what the node
 * sends is taken and what the sidecar sends fits, and every field the
 * schema requires of a body the node sends is always present.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

import pkg from '../package.json';
import { STATUS_BY_CODE } from '../nodes/IdempotentClaim/transport/errors';
import type { SettleBody, SettleEntry } from '../nodes/IdempotentClaim/actions/settle';
import type {
	ClaimBatchBody,
	ClaimListPage,
	ClaimRecord,
	ClaimRequest,
	ClaimResult,
	CompleteBatchBody,
	FailBatchBody,
	FailExecutionRound,
	FindClaimQuery,
	ListClaimsQuery,
	Query,
	RequestBody,
	Schemas,
	SidecarErrorBody,
} from '../nodes/IdempotentClaim/transport/types';
import type {
	TriggerDecision,
	TriggerReply,
	TriggerRequest,
} from '../nodes/IdempotentClaimTrigger/transport';
import type { operations } from '../nodes/IdempotentClaim/transport/openapi';

const ROOT = path.resolve(__dirname, '..');
const OPENAPI = path.resolve(ROOT, '../sidecar/httpapi/openapi.yaml');

/* ---- compile time: transport/types.ts against the generated schemas ---- */

/** The named keys of T, without an index signature's (IDataObject's). */
type NamedKeys<T> = keyof {
	[K in keyof T as string extends K ? never : number extends K ? never : K]: T[K];
};

/** T's named members but those of K (Omit would keep only an index signature's). */
type Without<T, K> = {
	[P in keyof T as P extends K
		? never
		: string extends P
			? never
			: number extends P
				? never
				: P]: T[P];
};

/** Fails to compile unless T is true; the error names the offending keys. */
type Assert<T extends true> = T;

/** The keys of Node's type that the schema lacks or types otherwise than Sent allows. */
type Mismatched<Node, Schema, Sent extends 'node' | 'sidecar'> = {
	[K in NamedKeys<Node>]-?: K extends keyof Schema
		? Sent extends 'node'
			? [Node[K]] extends [Schema[K] | undefined]
				? never
				: K
			: [Schema[K]] extends [Node[K]]
				? never
				: K
		: K;
}[NamedKeys<Node>];

/** The keys Schema requires. */
type RequiredKeys<T> = {
	[K in NamedKeys<T>]-?: object extends Pick<T, K> ? never : K;
}[NamedKeys<T>];

/** The keys the schema requires in a body that Node's type may leave out. */
type Missing<Node, Schema> = Exclude<RequiredKeys<Schema>, RequiredKeys<Node>>;

/** The JSON answer (200) of an operation. */
type Answer<Op extends keyof operations> = operations[Op]['responses'] extends {
	200: { content: { 'application/json': infer Answer } };
}
	? Answer
	: never;

/** True, or the keys that break the contract. */
type Conforms<Node, Schema, Sent extends 'node' | 'sidecar'> = [
	Mismatched<Node, Schema, Sent>,
] extends [never]
	? true
	: Mismatched<Node, Schema, Sent>;

/**
 * A body the node sends: each field one the schema takes, typed so that
 * it is taken, and every field the schema requires always present.
 */
type Sendable<Node, Schema> = [Mismatched<Node, Schema, 'node'> | Missing<Node, Schema>] extends [
	never,
]
	? true
	: Mismatched<Node, Schema, 'node'> | Missing<Node, Schema>;

// What the node sends must be a body the sidecar takes.
export type RequestConforms = Assert<Sendable<ClaimRequest, Schemas['ClaimRequest']>>;
export type ClaimBatchConforms = Assert<Sendable<ClaimBatchBody, RequestBody<'claimBatch'>>>;
// Complete and Fail build their reports from a claim's id and token and
// the operation's fields (actions/settle.ts), for the route of each.
export type CompleteEntryConforms = Assert<
	Sendable<SettleEntry<'complete'>, Schemas['CompleteBatchItem']>
>;
export type CompleteBodyConforms = Assert<Sendable<SettleBody<'complete'>, CompleteBatchBody>>;
export type FailEntryConforms = Assert<Sendable<SettleEntry<'fail'>, Schemas['FailBatchItem']>>;
export type FailBodyConforms = Assert<Sendable<SettleBody<'fail'>, FailBatchBody>>;
// Queries: Lookup's is the schema's; Get Many's state is the parameter's
// text, which the sidecar checks.
export type FindQueryConforms = Assert<Sendable<FindClaimQuery, Query<'findClaim'>>>;
export type ListQueryConforms = Assert<
	Sendable<Without<ListClaimsQuery, 'state'>, Query<'listClaims'>>
>;
// What the sidecar sends must fit the node's types.
export type ResultConforms = Assert<Conforms<ClaimResult, Schemas['ClaimResult'], 'sidecar'>>;
export type RecordConforms = Assert<Conforms<ClaimRecord, Schemas['Record'], 'sidecar'>>;
export type ListPageConforms = Assert<Conforms<ClaimListPage, Schemas['ListResponse'], 'sidecar'>>;
export type FailRoundConforms = Assert<
	Conforms<FailExecutionRound, Schemas['FailExecutionResponse'], 'sidecar'>
>;
// The credential's test (credentials/IdempotentClaimApi.credentials.ts)
// takes an answer of GET /v1/whoami without tenant for another server's.
export type WhoamiHasTenant = Assert<
	'tenant' extends RequiredKeys<Answer<'whoami'>> ? true : false
>;
export type ErrorConforms = Assert<Conforms<SidecarErrorBody, Schemas['ErrorDetail'], 'sidecar'>>;
// method is the provider request's, as n8n received it: claimd refuses any
// it does not list.
export type TriggerRequestConforms = Assert<
	Sendable<Without<TriggerRequest, 'method'>, Without<Schemas['TriggerRequest'], 'method'>>
>;
export type TriggerReplyConforms = Assert<
	Conforms<Without<TriggerReply, 'events'>, Schemas['TriggerReply'], 'sidecar'>
>;
// An event's payload is any JSON value, which the trigger reads with its
// exact-number parser.
export type TriggerEventConforms = Assert<
	Conforms<Without<TriggerReply['events'][number], 'payload'>, Schemas['ClaimResult'], 'sidecar'>
>;
// The trigger's decisions are the schema's, each way.
export type TriggerDecisionsConform = Assert<
	[TriggerDecision] extends [Schemas['TriggerDecision']]
		? [Schemas['TriggerDecision']] extends [TriggerDecision]
			? true
			: Exclude<Schemas['TriggerDecision'], TriggerDecision>
		: Exclude<TriggerDecision, Schemas['TriggerDecision']>
>;

/* ---- run time ---- */

interface ErrorCodeSchema {
	enum: string[];
	'x-status': Record<string, number>;
}

function errorCodeSchema(): ErrorCodeSchema {
	const doc = parse(readFileSync(OPENAPI, 'utf8')) as {
		components: { schemas: { ErrorCode: ErrorCodeSchema } };
	};
	return doc.components.schemas.ErrorCode;
}

describe('the wire contract (sidecar/httpapi/openapi.yaml)', () => {
	it('STATUS_BY_CODE has every ErrorCode, with the status of its x-status, and too_large', () => {
		const schema = errorCodeSchema();
		const { too_large: legacy, ...codes } = STATUS_BY_CODE;
		expect(Object.keys(codes).sort()).toEqual([...schema.enum].sort());
		expect(codes).toEqual(schema['x-status']);
		expect(legacy).toBe(schema['x-status'].body_too_large);
	});

	it('transport/openapi.d.ts is generated from the current openapi.yaml (npm run openapi)', () => {
		const [command, ...args] = pkg.scripts.openapi.split(/\s+/);
		expect(command).toBe('openapi-typescript');
		const cli = path.join(ROOT, 'node_modules/openapi-typescript/bin/cli.js');
		const check = spawnSync(process.execPath, [cli, ...args, '--check'], {
			cwd: ROOT,
			encoding: 'utf8',
		});
		expect(
			check.status,
			`transport/openapi.d.ts is not what openapi.yaml generates: run "npm run openapi" in n8n-node\n${check.stderr}`,
		).toBe(0);
	}, 30_000);
});
