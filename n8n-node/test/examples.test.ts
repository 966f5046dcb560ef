/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals --
 * The community-node rules are for code that runs inside n8n; this test reads the example files.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { INode, INodeParameters } from 'n8n-workflow';
import { NodeHelpers } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';

const nodeType = new IdempotentClaim();
const dir = join(__dirname, '..', 'examples');
const TYPE = 'n8n-nodes-idempotent-claim.idempotentClaim';

interface Workflow {
	id: string;
	nodes: INode[];
	connections: Record<string, { main: Array<Array<{ node: string }>> }>;
}

const examples = readdirSync(dir)
	.filter((file) => file.endsWith('.json'))
	.map((file) => ({ file, wf: JSON.parse(readFileSync(join(dir, file), 'utf8')) as Workflow }));

const claimNodes = examples.flatMap(({ file, wf }) =>
	wf.nodes.filter((node) => node.type === TYPE).map((node) => ({ file, node })),
);

/** The parameters n8n keeps of a node when it loads it: the ones its description shows, with defaults. */
function kept(node: INode): INodeParameters {
	return (
		NodeHelpers.getNodeParameters(
			nodeType.description.properties,
			node.parameters,
			true,
			false,
			node,
			nodeType.description,
		) ?? {}
	);
}

describe('example workflows', () => {
	it('use node version 2, and every parameter they set is one the node shows', () => {
		expect(claimNodes.length).toBeGreaterThan(0);
		for (const { file, node } of claimNodes) {
			expect(node.typeVersion, `${file}: ${node.name}`).toBe(2);
			const shown = kept(node);
			for (const [name, value] of Object.entries(node.parameters)) {
				expect(shown[name], `${file}: ${node.name}: ${name}`).toEqual(value);
			}
		}
	});

	it("let Complete and Fail keep trying until the Claim node's time limit", () => {
		const settling = claimNodes.filter(
			({ node }) =>
				['complete', 'fail'].includes(String(node.parameters.operation)) &&
				node.parameters.claimsToFail !== 'execution',
		);
		expect(settling.length).toBeGreaterThan(0);
		for (const { file, node } of settling) {
			expect(node.parameters.leaseUntil, `${file}: ${node.name}`).toBe(
				"={{ $('Idempotent Claim').item.json.idempotency.lease_until }}",
			);
		}
	});

	it('include an Error Trigger workflow that fails the claims of the failed execution as unknown', () => {
		const example = examples.find(({ file }) => file === 'error-trigger.json');
		expect(example).toBeDefined();
		const { wf } = example as { wf: Workflow };
		const trigger = wf.nodes.find((node) => node.type === 'n8n-nodes-base.errorTrigger');
		const fail = wf.nodes.find((node) => node.type === TYPE);
		expect(trigger).toBeDefined();
		expect(fail?.parameters).toMatchObject({
			operation: 'fail',
			claimsToFail: 'execution',
			executionId: '={{ $json.execution.id }}',
			retryKind: 'unknown',
		});
		expect(wf.connections[trigger?.name ?? '']?.main[0][0].node).toBe(fail?.name);
	});

	describe('reconcile-by-key.json, a reconciler workflow', () => {
		const example = examples.find(({ file }) => file === 'reconcile-by-key.json');
		const wf = (example as { wf: Workflow }).wf;
		const byName = (name: string): INode => {
			const node = wf.nodes.find((n) => n.name === name);
			if (node === undefined) throw new Error(`no node ${name}`);
			return node;
		};
		const next = (name: string, output: number): string[] =>
			(wf.connections[name]?.main[output] ?? []).map((target) => target.node);
		const answer = (name: string) => byName(name).parameters;

		it("receives claimd's reconcile request on an authenticated POST webhook that answers with the last node's JSON", () => {
			expect(example).toBeDefined();
			expect(wf.id).toHaveLength(16);
			const webhook = byName('Reconcile Webhook');
			expect(webhook.type).toBe('n8n-nodes-base.webhook');
			expect(webhook.parameters).toMatchObject({
				httpMethod: 'POST',
				path: 'idempotent-claim-reconciler',
				authentication: 'headerAuth',
				responseMode: 'lastNode',
				responseData: 'firstEntryJson',
			});
			expect(webhook.credentials?.httpHeaderAuth?.id).toBe('__RECONCILER_CREDENTIAL_ID__');
			expect(
				wf.nodes.some(
					(node) => node.type === 'n8n-nodes-base.webhook' && node.parameters.httpMethod === 'GET',
				),
			).toBe(true);
		});

		it('searches the destination (a placeholder URL) by the idempotency key of the request', () => {
			expect(next('Reconcile Webhook', 0)).toEqual(['Search Destination']);
			const search = byName('Search Destination');
			expect(search.type).toBe('n8n-nodes-base.httpRequest');
			expect(search.onError).toBe('continueErrorOutput');
			expect(search.parameters).toMatchObject({
				method: 'GET',
				url: '__DESTINATION_URL__/payments',
				sendQuery: true,
				queryParameters: {
					parameters: [{ name: 'idempotency_key', value: '={{ $json.body.idempotency_key }}' }],
				},
			});
		});

		it('answers done with the id found, not done when none is found, still unknown when the search fails or answers otherwise', () => {
			// Which answer takes which way: reconcileExample.test.ts.
			expect(next('Search Destination', 0)).toEqual(['Found?']);
			expect(next('Search Destination', 1)).toEqual(['Answer Still Unknown']);
			expect(next('Found?', 0)).toEqual(['Answer Done']);
			expect(next('Found?', 1)).toEqual(['Answer Not Done']);
			expect(next('Found?', 2)).toEqual(['Answer Still Unknown']);
			expect(answer('Answer Done')).toMatchObject({
				operation: 'reconcileAnswer',
				verdict: 'done',
				resultRef: '={{ $json.body.data[0].id.trim() }}',
			});
			expect(answer('Answer Not Done')).toMatchObject({
				operation: 'reconcileAnswer',
				verdict: 'not_done',
			});
			expect(answer('Answer Still Unknown')).toMatchObject({
				operation: 'reconcileAnswer',
				verdict: 'still_unknown',
			});
			for (const name of ['Answer Done', 'Answer Not Done', 'Answer Still Unknown']) {
				// After the search the item is the destination's answer: the
				// request is read from the webhook node.
				expect(answer(name), name).toMatchObject({
					claimId: "={{ $('Reconcile Webhook').first().json.body.claim_id }}",
					reconcileToken: "={{ $('Reconcile Webhook').first().json.body.reconcile_token }}",
				});
				expect(byName(name).credentials?.idempotentClaimApi?.id, name).toBe('__CREDENTIAL_ID__');
				// Each answer is the last node of its path: the webhook's answer.
				expect(wf.connections[name], name).toBeUndefined();
			}
		});
	});
});
