import type {
	ICredentialDataDecryptedObject,
	IHttpRequestOptions,
	INodeParameters,
	INodeProperties,
	INodeTypes,
	IWorkflowDataProxyAdditionalKeys,
} from 'n8n-workflow';
import { NodeHelpers, Workflow } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { IdempotentClaimApi } from '../credentials/IdempotentClaimApi.credentials';
import codex from '../nodes/IdempotentClaim/IdempotentClaim.node.json';
import pkg from '../package.json';
import { operationProperty, operations } from '../nodes/IdempotentClaim/actions/claim';
import { outputLayout } from '../nodes/IdempotentClaim/actions/outputs';
import { IdempotentClaim } from '../nodes/IdempotentClaim/IdempotentClaim.node';
import { BASE_URL, NODE, createContext, requests, run } from './helpers';

const nodeType = new IdempotentClaim();
const { properties } = nodeType.description;
const operationNames = (operationProperty.options ?? []).map((option) =>
	String((option as { value: string }).value),
);

function shownFor(property: INodeProperties): string[] {
	return (property.displayOptions?.show?.operation ?? []).map(String);
}

/** Parameters n8n stores for a node: visible ones with their defaults, then `values`. */
function resolvedParameters(values: INodeParameters): INodeParameters {
	const node = { ...NODE, parameters: values };
	return (
		NodeHelpers.getNodeParameters(properties, values, true, false, node, nodeType.description) ?? {}
	);
}

/** Evaluates the node's outputs the way n8n does, for the given parameters. */
function outputsFor(values: INodeParameters) {
	const nodeTypes = {
		getByName: () => nodeType,
		getByNameAndVersion: () => nodeType,
		getKnownTypes: () => ({}),
	} as unknown as INodeTypes;
	const workflow = new Workflow({
		nodes: [{ ...NODE, parameters: values }],
		connections: {},
		active: false,
		nodeTypes,
	});
	const node = workflow.getNode(NODE.name);
	if (node === null) throw new Error('node missing');
	return NodeHelpers.getNodeOutputs(workflow, node, nodeType.description);
}

describe('node description', () => {
	it('routes every described operation and describes every routed one', () => {
		expect(operationNames.sort()).toEqual(Object.keys(operations).sort());
	});

	it('scopes every parameter but Operation to known operations, and each module to its own', () => {
		for (const property of properties) {
			if (property.name === 'operation') continue;
			const shown = shownFor(property);
			expect(shown.length, property.name).toBeGreaterThan(0);
			for (const name of shown) expect(operationNames, property.name).toContain(name);
		}
		for (const [name, operation] of Object.entries(operations)) {
			for (const property of operation.description) {
				expect(shownFor(property), `${name}: ${property.name}`).toContain(name);
			}
		}
	});

	it('declares outputs that follow the operation and the separate-outputs toggle', () => {
		const names = (values: INodeParameters) =>
			outputsFor(values).map((output) =>
				typeof output === 'string' ? output : output.displayName,
			);
		expect(names({ operation: 'claim' })).toEqual(['Won', 'Duplicate']);
		expect(names({ operation: 'claim', separateConflictOutputs: true })).toEqual([
			'Won',
			'Duplicate',
			'Conflict',
			'In Progress',
		]);
		expect(names({})).toEqual(['Won', 'Duplicate']);
		for (const name of operationNames) {
			for (const separate of [false, true]) {
				const outputs = outputsFor({ operation: name, separateConflictOutputs: separate });
				expect(outputs.length, `${name} ${separate}`).toBe(outputLayout(name, separate).count);
				for (const output of outputs) {
					expect(typeof output === 'string' ? output : output.type).toBe('main');
				}
			}
		}
	});

	describe('each operation reads only parameters it shows and calls its endpoint', () => {
		const cases: Array<[string, INodeParameters, string, string]> = [
			['claim', { source: 'stripe', eventId: 'evt_1' }, 'POST', '/v1/claims/batch'],
			['complete', {}, 'POST', '/v1/claims/complete/batch'],
			['extendLease', {}, 'POST', '/v1/claims/c1/extend'],
			['fail', { errorMessage: 'boom' }, 'POST', '/v1/claims/fail/batch'],
			['getMany', {}, 'GET', '/v1/claims/list'],
			['lookup', {}, 'GET', '/v1/claims/c1'],
			['reconcileAnswer', {}, 'POST', '/v1/claims/c1/reconcile'],
			['resolve', { note: 'checked' }, 'POST', '/v1/claims/c1/resolve'],
		];
		it.each(cases)('%s', async (operation, overrides, method, path) => {
			const params = resolvedParameters({ operation, ...overrides });
			// Stand-ins for the default expressions that read $json.idempotency.
			if (params.claimId !== undefined) params.claimId = 'c1';
			if (params.claimToken !== undefined) params.claimToken = 't1';
			if (params.reconcileToken !== undefined) params.reconcileToken = 'r1';
			if (params.leaseUntil !== undefined) params.leaseUntil = '2030-01-01T00:00:00Z';
			const items = [{ json: { body: { id: 'evt_1' } } }];
			const ctx = createContext({ items, params });
			ctx.helpers.httpRequestWithAuthentication.mockResolvedValue(
				operation === 'claim'
					? { results: [{ outcome: 'won', claim_id: 'c1', claim_token: 't1' }] }
					: operation === 'complete' || operation === 'fail'
						? { results: [{ claim_id: 'c1', state: 'completed' }] }
						: operation === 'getMany'
							? { claims: [{ claim_id: 'c1', state: 'unknown' }] }
							: { claim_id: 'c1', state: 'completed' },
			);

			const outputs = await run(ctx);

			expect(requests(ctx)).toHaveLength(1);
			expect(requests(ctx)[0]).toMatchObject({ method, url: `${BASE_URL}${path}` });
			expect(outputs[0]).toHaveLength(1);
		});
	});
});

describe('subtitle', () => {
	function subtitle(values: INodeParameters): unknown {
		const nodeTypes = {
			getByName: () => nodeType,
			getByNameAndVersion: () => nodeType,
			getKnownTypes: () => ({}),
		} as unknown as INodeTypes;
		const workflow = new Workflow({
			nodes: [{ ...NODE, parameters: values }],
			connections: {},
			active: false,
			nodeTypes,
		});
		const node = workflow.getNode(NODE.name);
		if (node === null) throw new Error('node missing');
		return workflow.expression.getSimpleParameterValue(
			node,
			nodeType.description.subtitle as string,
			'internal',
			{},
		);
	}

	it('shows readable operation names, with the source of a claim', () => {
		expect(subtitle({ operation: 'claim', source: 'stripe' })).toBe('Claim: stripe');
		expect(subtitle({ source: 'stripe' })).toBe('Claim: stripe');
		expect(subtitle({ operation: 'extendLease' })).toBe('Extend Lease');
		expect(subtitle({ operation: 'getMany' })).toBe('Get Many');
		expect(subtitle({ operation: 'complete' })).toBe('Complete');
		expect(subtitle({ operation: 'fail' })).toBe('Fail');
		expect(subtitle({ operation: 'fail', claimsToFail: 'execution' })).toBe(
			'Fail All Claims of an Execution',
		);
		expect(subtitle({ operation: 'lookup' })).toBe('Lookup');
		expect(subtitle({ operation: 'resolve' })).toBe('Resolve');
		expect(subtitle({ operation: 'reconcileAnswer' })).toBe('Answer Reconcile');
	});
});

describe('credential', () => {
	const credential = new IdempotentClaimApi();

	it('sends the API key as a Bearer token', async () => {
		expect(credential.name).toBe('idempotentClaimApi');
		expect(credential.displayName).toBe('Idempotent Claim API');
		const authenticate = credential.authenticate as (
			credentials: ICredentialDataDecryptedObject,
			options: IHttpRequestOptions,
		) => Promise<IHttpRequestOptions>;
		expect(typeof authenticate).toBe('function');
		const options: IHttpRequestOptions = {
			url: `${BASE_URL}/v1/whoami`,
			headers: { Accept: 'application/json' },
		};
		const sent = await authenticate({ baseUrl: BASE_URL, apiKey: 'k-1' }, options);
		expect(sent.headers).toEqual({ Accept: 'application/json', Authorization: 'Bearer k-1' });
		expect(sent.url).toBe(`${BASE_URL}/v1/whoami`);
		const bare = await authenticate({ apiKey: 'k-2' }, { url: `${BASE_URL}/v1/whoami` });
		expect(bare.headers).toEqual({ Authorization: 'Bearer k-2' });
	});

	it("sets the header n8n's generic form '=Bearer {{$credentials.apiKey}}' set", async () => {
		// n8n resolved the generic form with the credential as $credentials
		// (CredentialsHelper.authenticate → resolveValue); the function must
		// give the same header for every key, an empty or missing one too.
		const nodeTypes = {
			getByName: () => nodeType,
			getByNameAndVersion: () => nodeType,
			getKnownTypes: () => ({}),
		} as unknown as INodeTypes;
		const node = { ...NODE, parameters: {} };
		const workflow = new Workflow({ nodes: [node], connections: {}, active: false, nodeTypes });
		const authenticate = credential.authenticate as (
			credentials: ICredentialDataDecryptedObject,
			options: IHttpRequestOptions,
		) => Promise<IHttpRequestOptions>;
		for (const apiKey of ['k-1', '', ' spaced key ', 'a{{ b }}c', undefined, null, 42]) {
			const generic = workflow.expression.getSimpleParameterValue(
				node,
				'=Bearer {{$credentials.apiKey}}',
				'internal',
				{ $credentials: { apiKey } } as unknown as IWorkflowDataProxyAdditionalKeys,
				undefined,
				'',
			);
			const sent = await authenticate({ apiKey } as ICredentialDataDecryptedObject, { url: '/' });
			expect(sent.headers?.Authorization, String(apiKey)).toBe(String(generic));
		}
	});

	it('tests against GET /v1/whoami on the base URL', () => {
		expect(credential.test.request).toEqual({
			baseURL: '={{$credentials.baseUrl}}',
			url: '/v1/whoami',
			method: 'GET',
		});
	});

	/**
	 * The result n8n's credential test gives for an answer, by its rules:
	 * for a failed request a status rule of that status, else the status;
	 * for a 2xx a body rule whose key holds its value fails the test.
	 */
	function testResult(status: number, body: unknown): string {
		const rules = (credential.test.rules ?? []) as Array<{
			type: string;
			properties: { value: unknown; key?: string; message: string };
		}>;
		if (status < 200 || status > 299) {
			const rule = rules.find((r) => r.type === 'responseCode' && r.properties.value === status);
			return rule ? rule.properties.message : `Received HTTP status code: ${status}`;
		}
		for (const rule of rules) {
			if (rule.type !== 'responseSuccessBody' || rule.properties.key === undefined) continue;
			const value =
				typeof body === 'object' && body !== null
					? (body as Record<string, unknown>)[rule.properties.key]
					: undefined;
			if (value === rule.properties.value) return rule.properties.message;
		}
		return 'Connection successful!';
	}

	it("passes only claimd's answer, and names the cause of the others", () => {
		expect(testResult(200, { tenant: 'acme', admin: false })).toBe('Connection successful!');
		for (const body of [{ status: 'ok' }, '<html>It works!</html>', {}]) {
			expect(testResult(200, body)).toMatch(
				/^The Base URL does not point at an Idempotent Claim sidecar/,
			);
		}
		expect(testResult(404, '')).toMatch(
			/^The Base URL does not point at an Idempotent Claim sidecar/,
		);
		expect(testResult(404, '')).toContain('http://claimd:8080');
		expect(testResult(401, {})).toContain('does not know this API key');
		expect(testResult(401, {})).toContain('CLAIMD_API_KEYS');
	});

	it('has a base URL with the local default, the compose address and hints, and a password-type API key', () => {
		const byName = Object.fromEntries(credential.properties.map((p) => [p.name, p]));
		expect(byName.baseUrl.default).toBe('http://127.0.0.1:8080');
		expect(byName.baseUrl.description).toContain('http://claimd:8080');
		expect(byName.baseUrl.description).toContain('http://127.0.0.1:8080');
		expect(byName.baseUrl.description).toContain('ECONNREFUSED');
		expect(byName.apiKey.typeOptions).toEqual({ password: true });
		expect(byName.apiKey.description).toContain('CLAIMD_API_KEYS');
	});

	it('is the credential the node asks for', () => {
		expect(nodeType.description.credentials).toEqual([{ name: credential.name, required: true }]);
	});
});

describe('package', () => {
	it('registers built files whose sources export the nodes and the credential', async () => {
		expect(pkg.n8n.strict).toBe(true);
		const registered: string[] = [];
		for (const built of [...pkg.n8n.nodes, ...pkg.n8n.credentials]) {
			const source = built.replace(/^dist\//, '').replace(/\.js$/, '');
			const module = (await import(`../${source}`)) as Record<string, new () => object>;
			for (const Exported of Object.values(module)) {
				const instance = new Exported() as { name?: string; description?: { name: string } };
				registered.push(instance.description?.name ?? instance.name ?? '');
			}
		}
		expect(registered.sort()).toEqual([
			'idempotentClaim',
			'idempotentClaimApi',
			'idempotentClaimTrigger',
		]);
	});

	it('is a community node package with n8n-workflow as its only peer and no runtime dependency', () => {
		expect(pkg.keywords).toContain('n8n-community-node-package');
		expect((pkg as { dependencies?: object }).dependencies ?? {}).toEqual({});
		expect(pkg.peerDependencies).toEqual({ 'n8n-workflow': '*' });
	});

	it('has a codex file with resources, named after the node type', () => {
		expect(codex.node).toBe(`${pkg.name}.${nodeType.description.name}`);
		expect(codex.resources).toBeTypeOf('object');
	});
});
