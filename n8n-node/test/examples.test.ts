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
});
