import type {
	IAuthenticate,
	IAuthenticateRuleResponseCode,
	IAuthenticateRuleResponseSuccessBody,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

/** What the credential test reports when the Base URL answers, but not as the sidecar. */
const NOT_SIDECAR =
	'The Base URL does not point at an Idempotent Claim sidecar: GET /v1/whoami did not answer with a tenant. From n8n in docker compose use http://claimd:8080; with claimd on the same machine, http://127.0.0.1:8080 (no path).';

/**
 * How n8n's credential test reads the answer of GET /v1/whoami: a status
 * rule names the cause of that status (checked only when the request
 * failed); a body rule fails the test when the answer's value at `key`
 * equals `value`. n8n checks each rule by its type, so one list holds both
 * kinds, although the type of `rules` names a list of one kind.
 */
const TEST_RULES: Array<IAuthenticateRuleResponseCode | IAuthenticateRuleResponseSuccessBody> = [
	{
		type: 'responseCode',
		properties: {
			value: 401,
			message:
				"The sidecar does not know this API key: it must be one of the keys in claimd's CLAIMD_API_KEYS (or made with claimd keys create).",
		},
	},
	{
		type: 'responseCode',
		properties: { value: 404, message: NOT_SIDECAR },
	},
	{
		type: 'responseCode',
		properties: { value: 405, message: NOT_SIDECAR },
	},
	{
		// Any other server answering 200 has no tenant in its answer.
		type: 'responseSuccessBody',
		properties: { key: 'tenant', value: undefined, message: NOT_SIDECAR },
	},
];

/**
 * Connection to the Idempotent Claim sidecar. The API key selects the tenant:
 * every claim made with it is scoped to that tenant by the sidecar.
 */
export class IdempotentClaimApi implements ICredentialType {
	name = 'idempotentClaimApi';

	displayName = 'Idempotent Claim API';

	icon: Icon = {
		light: 'file:../icons/idempotent-claim.svg',
		dark: 'file:../icons/idempotent-claim.dark.svg',
	};

	documentationUrl =
		'https://github.com/idempotent-claim/idempotent-claim/tree/main/n8n-node#credentials';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:8080',
			required: true,
			placeholder: 'e.g. http://claimd:8080',
			description:
				"Address of the Idempotent Claim sidecar (claimd), without a path: http://claimd:8080 from n8n in this project's docker compose, http://127.0.0.1:8080 (claimd's default CLAIMD_ADDR) when claimd runs on the same machine as n8n. A test that says ECONNREFUSED or ENOTFOUND means nothing answers there: claimd is not running, or the host or port is wrong.",
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			required: true,
			description:
				"One of the sidecar's tenant API keys (claimd's CLAIMD_API_KEYS, or made with claimd keys create). It selects the tenant. Give every n8n instance its own key: the Fail and Get Many operations find claims by n8n execution ID, and each instance numbers its executions on its own.",
		},
	];

	/**
	 * Sends the API key as `Authorization: Bearer <key>` on every request,
	 * the node's and the credential test's. A function rather than n8n's
	 * generic form (`'=Bearer {{$credentials.apiKey}}'`): n8n resolves the
	 * generic form in its expression engine on every request (1.5 to 3 ms a
	 * request on its default engine, vm) and calls a function as it is. The
	 * header is the same: an empty or missing key gives "Bearer ", as the
	 * generic form does. The credential test uses it too.
	 */
	authenticate: IAuthenticate = async (credentials, requestOptions) => {
		requestOptions.headers ??= {};
		requestOptions.headers.Authorization = `Bearer ${String(credentials.apiKey ?? '')}`;
		return requestOptions;
	};

	// GET /v1/whoami answers 200 {"tenant": …, "admin": …} for a known key,
	// 401 for an unknown one. Any other server at the Base URL fails the
	// rules instead of passing on a plain 200.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl}}',
			url: '/v1/whoami',
			method: 'GET',
		},
		rules: TEST_RULES as IAuthenticateRuleResponseCode[],
	};
}
