import type {
	IAuthenticateGeneric,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

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
			description: 'Address of the Idempotent Claim sidecar, without a path',
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			required: true,
			description: 'Tenant API key configured in the sidecar (CLAIMD_API_KEYS)',
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.apiKey}}',
			},
		},
	};

	// GET /v1/whoami answers 200 with the key's tenant, 401 for an unknown key.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl}}',
			url: '/v1/whoami',
			method: 'GET',
		},
	};
}
