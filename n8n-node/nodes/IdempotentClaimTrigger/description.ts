import type {
	INodeParameters,
	INodeProperties,
	IWebhookDescription,
	NodeParameterValueType,
	WEBHOOK_RESOLVERS,
} from 'n8n-workflow';

/** The sidecar's limit for wait_seconds (claim.MaxWait). */
export const MAX_WAIT_SECONDS = 25;

/** Wait for the Holder's default, in seconds. */
export const DEFAULT_WAIT_SECONDS = 5;

const PATH_TEMPLATE = '={{$parameter["path"]}}';

/**
 * The key under which n8n (n8n-workflow's WEBHOOK_RESOLVERS, n8n 2.x) looks
 * for a webhook description's native resolvers. A global symbol, so the
 * node needs nothing from n8n-workflow at run time and an n8n without the
 * key simply ignores it.
 */
const WEBHOOK_RESOLVERS_KEY = Symbol.for(
	'n8n.webhookDescriptionResolvers',
) as typeof WEBHOOK_RESOLVERS;

type Resolve = (parameters: INodeParameters) => NodeParameterValueType | undefined;

/**
 * Attaches a native resolver to each expression field of a webhook
 * description: a function of the node's parameters that returns what n8n's
 * expression engine returns for the field's template (the editor keeps the
 * template; test/triggerDescription.test.ts checks both agree). n8n then
 * resolves the fields without its expression engine while the node's
 * parameters hold no expression, so answering a delivery never needs an
 * expression isolate (with N8N_EXPRESSION_ENGINE_LAZY_ACQUIRE=true; n8n
 * 2.41 still takes one for every start node other than its own Webhook
 * node by default). Throws when a resolver names a field that is not an
 * expression.
 */
function withNativeResolvers(
	description: IWebhookDescription,
	resolvers: Record<string, Resolve>,
): IWebhookDescription {
	const entries: Record<string, { template: string; resolve: Resolve }> = {};
	for (const [field, resolve] of Object.entries(resolvers)) {
		const template = description[field];
		if (typeof template !== 'string' || !template.startsWith('=')) {
			throw new Error(`webhook field ${field} is not an expression`);
		}
		entries[field] = { template, resolve };
	}
	return { ...description, [WEBHOOK_RESOLVERS_KEY]: entries };
}

/**
 * The node's webhooks. "default" takes the deliveries (POST unless HTTP
 * Method says otherwise). "setup" takes GET and HEAD on the same path
 * (n8n routes a method only to a webhook that declares it, HEAD included),
 * so a provider's handshake or URL check reaches claimd instead of n8n's
 * 404; it never starts an execution, and its URL is not shown twice in the
 * editor. Both use the path as it is (isFullPath), like n8n's Webhook node:
 * an empty Path is the node's own webhook ID.
 *
 * Response mode, code and data are read by n8n only for a won delivery
 * (every other answer is sent by the node itself): Response Code and Data
 * apply to "When Last Node Finishes"; for "Immediately" n8n answers 200 with
 * the node's answer as the body (the node answers a non-200 itself).
 */
export const webhooks: IWebhookDescription[] = [
	withNativeResolvers(
		{
			name: 'default',
			// Every provider claimd verifies delivers events with POST, and its
			// ingest door takes POST only: no other method is offered.
			httpMethod: 'POST',
			isFullPath: true,
			path: PATH_TEMPLATE,
			responseMode: '={{$parameter["responseMode"] || "onReceived"}}',
			responseCode:
				'={{$parameter["responseMode"] === "lastNode" ? ($parameter["responseCode"] || 200) : 200}}',
			responseData:
				'={{$parameter["responseMode"] === "lastNode" ? ($parameter["responseData"] || "firstEntryJson") : ""}}',
			responseBinaryPropertyName: '={{$parameter["responseBinaryPropertyName"] || "data"}}',
		},
		{
			path: (p) => p.path,
			responseMode: (p) => p.responseMode || 'onReceived',
			responseCode: (p) => (p.responseMode === 'lastNode' ? p.responseCode || 200 : 200),
			responseData: (p) =>
				p.responseMode === 'lastNode' ? p.responseData || 'firstEntryJson' : '',
			responseBinaryPropertyName: (p) => p.responseBinaryPropertyName || 'data',
		},
	),
	withNativeResolvers(
		{
			name: 'setup',
			httpMethod: 'GET,HEAD',
			isFullPath: true,
			path: PATH_TEMPLATE,
			responseMode: 'onReceived',
			responseData: '',
			ndvHideUrl: true,
			ndvHideMethod: true,
		},
		{ path: (p) => p.path },
	),
];

/** One answer of the Answers option: a status code and an optional body. */
function answerValues(
	codeDescription: string,
	code: INodeProperties,
	bodyDescription = "Empty: claimd's body",
): INodeProperties[] {
	return [
		{ ...code, displayName: 'Status Code', name: 'statusCode', description: codeDescription },
		{
			displayName: 'Body',
			name: 'body',
			type: 'string',
			default: '',
			description: `${bodyDescription}. Sent with a JSON content type when it parses as JSON, else as plain text.`,
		},
	];
}

function statusCode(min: number, max: number, fallback: number): INodeProperties {
	return {
		displayName: 'Status Code',
		name: 'statusCode',
		type: 'number',
		typeOptions: { minValue: min, maxValue: max },
		default: fallback,
	};
}

const answersOption: INodeProperties = {
	displayName: 'Answers',
	name: 'answers',
	type: 'fixedCollection',
	placeholder: 'Add Answer',
	default: {},
	description:
		"What the provider is answered, per decision, instead of claimd's answer (the answer claimd's own ingest door would give)",
	options: [
		{
			name: 'won',
			displayName: 'Won (Respond Immediately)',
			values: answerValues(
				'2xx only; used when Respond is Immediately. n8n sends a 200 once it has stored the execution; another code is sent by this node just before.',
				statusCode(200, 299, 200),
			),
		},
		{
			name: 'duplicate',
			displayName: 'Duplicate',
			values: answerValues(
				'Already done (also stale, dead-lettered and unknown events): a 2xx stops the provider. Starts no execution.',
				statusCode(200, 599, 200),
			),
		},
		{
			name: 'conflict',
			displayName: 'Conflict',
			values: answerValues(
				'The same event ID with a different payload: a 2xx stops the provider; claimd reports it. Starts no execution.',
				statusCode(200, 599, 200),
			),
		},
		{
			name: 'inProgress',
			displayName: 'In Progress',
			values: answerValues(
				'Another delivery holds the event, or its retry is not due yet: 409 or 503, never 2xx (the provider must deliver it again). Retry-After is kept.',
				{
					displayName: 'Status Code',
					name: 'statusCode',
					type: 'options',
					options: [
						{ name: '409 Conflict', value: 409 },
						{ name: '503 Service Unavailable', value: 503 },
					],
					default: 503,
				},
			),
		},
		{
			name: 'refused',
			displayName: 'Refused',
			values: answerValues(
				'A delivery claimd could not authenticate (no or a wrong signature, a stale timestamp): 400–599, never 2xx. A 2xx is set in the source itself (unauthenticated_status).',
				statusCode(400, 599, 401),
				"Empty: claimd's body, which says nothing about why. Never put a reason here",
			),
		},
	],
};

/**
 * Options → Exact Numbers (exactJson.ts): off by default, so a workflow
 * keeps the numbers n8n's Webhook node gives unless it asks.
 */
const exactNumbersOption: INodeProperties = {
	displayName: 'Exact Numbers',
	name: 'exactNumbers',
	type: 'boolean',
	default: false,
	description:
		"Whether to keep each JSON number of the body that a JavaScript number would change as a string of its digits as sent: integers beyond ±9007199254740991 (two order IDs one apart otherwise read as one), decimals with more digits than a double holds, 1e400. Off: numbers as n8n's Webhook node gives them, rounded.",
};

export const properties: INodeProperties[] = [
	{
		displayName:
			'Put this trigger where the Webhook node was. claimd decides each delivery with the source\'s rules before any execution exists: only a <b>won</b> event starts an execution. A duplicate, a conflict, an event in progress or a refused delivery is answered here and starts none. The <b>Test URL</b> claims nothing: its items have <code>idempotency.outcome</code> "test" and no claim token.',
		name: 'triggerNotice',
		type: 'notice',
		default: '',
	},
	{
		displayName: 'Path',
		name: 'path',
		type: 'string',
		default: '',
		placeholder: 'e.g. stripe-events',
		description:
			"The path to listen to, as in n8n's Webhook node. Empty: the node's own webhook ID, unique to this node.",
	},
	{
		displayName: 'Source',
		name: 'source',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'e.g. stripe',
		description:
			"The source in claimd's sources file (CLAIMD_SOURCES_FILE) whose rules decide the deliveries: signature, event ID, allowed event types. It must belong to the tenant of the credential's API key.",
	},
	{
		displayName: 'Respond',
		name: 'responseMode',
		type: 'options',
		noDataExpression: true,
		options: [
			{
				name: 'Immediately',
				value: 'onReceived',
				description:
					"With claimd's answer (or Options → Answers → Won) once the execution is started",
			},
			{
				name: 'When Last Node Finishes',
				value: 'lastNode',
				description: 'Returns data of the last-executed node',
			},
			{
				name: "Using 'Respond to Webhook' Node",
				value: 'responseNode',
				description: 'Response defined in that node',
			},
		],
		default: 'onReceived',
		description:
			'When and how a delivery that won is answered. Every other decision is answered at once by this node, whatever this says.',
	},
	{
		displayName:
			'Only version 1 of the \'Respond to Webhook\' node answers after this trigger: later versions stop with "No Webhook node found in the workflow". Every delivery that did not win is answered by this node.',
		name: 'respondNotice',
		type: 'notice',
		default: '',
		displayOptions: { show: { responseMode: ['responseNode'] } },
	},
	{
		displayName: 'Response Code',
		name: 'responseCode',
		type: 'number',
		typeOptions: { minValue: 100, maxValue: 599 },
		default: 200,
		description: 'The HTTP response code n8n returns once the last node has finished',
		displayOptions: { show: { responseMode: ['lastNode'] } },
	},
	{
		displayName: 'Response Data',
		name: 'responseData',
		type: 'options',
		options: [
			{
				name: 'All Entries',
				value: 'allEntries',
				description: 'Returns all the entries of the last node. Always returns an array.',
			},
			{
				name: 'First Entry JSON',
				value: 'firstEntryJson',
				description: 'Returns the JSON data of the first entry of the last node',
			},
			{
				name: 'First Entry Binary',
				value: 'firstEntryBinary',
				description: 'Returns the binary data of the first entry of the last node',
			},
			{
				name: 'No Response Body',
				value: 'noData',
				description: 'Returns without a body',
			},
		],
		default: 'firstEntryJson',
		description: 'What the answer holds once the last node has finished',
		displayOptions: { show: { responseMode: ['lastNode'] } },
	},
	{
		displayName: 'Property Name',
		name: 'responseBinaryPropertyName',
		type: 'string',
		required: true,
		default: 'data',
		description: 'Name of the binary property to return',
		displayOptions: { show: { responseMode: ['lastNode'], responseData: ['firstEntryBinary'] } },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add option',
		default: {},
		options: [
			answersOption,
			{
				displayName: 'In Progress',
				name: 'inProgress',
				type: 'options',
				options: [
					{
						name: 'Answer Retry Later',
						value: 'answer',
						description:
							'Answer at once (503 with Retry-After, or Answers → In Progress): the provider delivers again later',
					},
					{
						name: 'Wait for the Holder',
						value: 'wait',
						description:
							'Let claimd wait for the delivery that holds the event, then answer as it ended (e.g. duplicate once it completed)',
					},
				],
				default: 'answer',
				description: 'What happens when another delivery of the event holds it right now',
			},
			{
				displayName: 'On Execution Error',
				name: 'onExecutionError',
				type: 'options',
				options: [
					{
						name: 'Mark for Review (Unknown Outcome)',
						value: 'unknown',
						description:
							'The protected node may have run before the error: nothing runs again until a person resolves the claim',
					},
					{
						name: 'Let the Next Delivery Run It Again (Retryable)',
						value: 'retryable',
						description:
							'Only when the protected node honours the idempotency key: a delivery after the retry backoff wins and runs it again',
					},
					{
						name: 'Give Up (Permanent)',
						value: 'permanent',
						description: 'The claim is dead-lettered: no delivery runs it again',
					},
				],
				default: 'unknown',
				description:
					'How the claim is settled when the execution ends in an error (read by the Idempotent Claim hook as idempotency.on_error); a successful execution completes it',
			},
			{
				displayName: 'Raw Body',
				name: 'rawBody',
				type: 'boolean',
				default: false,
				description:
					'Whether to add the request body as received, byte for byte, as binary property "data"',
			},
			{
				displayName: 'Shadow Mode (Observe Only)',
				name: 'shadow',
				type: 'boolean',
				default: false,
				description:
					"Whether to only observe: every delivery starts an execution, as without claimd, while claimd decides and records what it would have done (idempotency.shadow.would_be: duplicate, in_progress, conflict…, and its cause). Only the delivery that would have won gets a claim token. The records are real: turn this off and the next copy is stopped. A source with shadow: true in claimd's sources file is observed whatever this says.",
			},
			{
				displayName: 'Wait Seconds',
				name: 'waitSeconds',
				type: 'number',
				typeOptions: { minValue: 1, maxValue: MAX_WAIT_SECONDS },
				default: DEFAULT_WAIT_SECONDS,
				description: `How long claimd waits for the holder, 1 to ${MAX_WAIT_SECONDS} seconds; keep it below the provider's timeout`,
				displayOptions: { show: { inProgress: ['wait'] } },
			},
			exactNumbersOption,
		],
	},
];
