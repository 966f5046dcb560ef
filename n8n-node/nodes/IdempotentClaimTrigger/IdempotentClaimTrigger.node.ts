import type {
	IHookFunctions,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import { properties, webhooks } from './description';
import { handleDelivery, readSettings } from './webhook';

/** Shown in the trigger panel: what the Test URL does and does not do. */
const TEST_URL_HELP =
	'<b>Test URL</b>: claimd checks the delivery with the source\'s rules (signature, event ID) and claims <b>nothing</b>; the execution shows the items with <code>idempotency.outcome</code> "test" and no claim token, and the nodes after this one run as for a real delivery. A duplicate, a refused delivery or a handshake is answered and starts no execution, so the editor keeps waiting.<br /><br /><b>Production URL</b>: publish the workflow. Only a delivery that wins its claim starts an execution; the Idempotent Claim hook completes the claim when the execution succeeds.';

export class IdempotentClaimTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotent Claim Trigger',
		name: 'idempotentClaimTrigger',
		icon: {
			light: 'file:../../icons/idempotent-claim.svg',
			dark: 'file:../../icons/idempotent-claim.dark.svg',
		},
		group: ['trigger'],
		// 1 and 1.1 behave the same; new nodes get 1.1 because n8n 2.41
		// evaluates an expression (Webhook node v1's binary-data option) for
		// every delivery to a start node at version 1, which takes an
		// expression isolate before the execution's own.
		version: [1, 1.1],
		defaultVersion: 1.1,
		subtitle: '={{"Source: " + ($parameter["source"] || "?")}}',
		description:
			'Starts the workflow once per event: claimd decides each webhook delivery before any execution exists, and only a won event runs',
		eventTriggerDescription: 'Waiting for you to call the Test URL',
		activationMessage:
			'You can now make calls to your production webhook URL. Only deliveries that win their claim start an execution.',
		defaults: {
			name: 'Idempotent Claim Trigger',
		},
		triggerPanel: {
			header: '',
			executionsHelp: {
				inactive: TEST_URL_HELP,
				active: TEST_URL_HELP,
			},
			activationHint:
				'Once the workflow works, publish it and give the provider the production URL.',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [
			{
				name: 'idempotentClaimApi',
				required: true,
			},
		],
		webhooks,
		sensitiveOutputFields: ['headers.authorization', 'headers.cookie'],
		hints: [
			{
				message:
					'Only deliveries with a won event start an execution: a duplicate, a conflict, an event in progress or a refused delivery was answered by the trigger and started none. Items with <code>idempotency.outcome</code> "test" come from the Test URL: nothing was claimed.',
				type: 'info',
				location: 'outputPane',
				whenToDisplay: 'always',
			},
		],
		properties,
	};

	/**
	 * Nothing is registered with the provider (its URL is set there by
	 * hand, as for n8n's Webhook node): create only checks the parameters
	 * when the workflow is published or the Test URL starts listening, so a
	 * status code that is not allowed is named then, not at a delivery.
	 */
	webhookMethods = {
		default: {
			async checkExists(this: IHookFunctions): Promise<boolean> {
				return false;
			},
			async create(this: IHookFunctions): Promise<boolean> {
				const { problems } = readSettings.call(this);
				const source = this.getNode().parameters.source;
				const shown = problems.filter(
					// A Source from an expression may read the request, which does not exist yet.
					(p) =>
						!(p.parameter === 'source' && typeof source === 'string' && source.startsWith('=')),
				);
				if (shown.length > 0) {
					throw new NodeOperationError(
						this.getNode(),
						'The Idempotent Claim Trigger is not set up right',
						{
							description: shown.map((p) => p.message).join('. '),
						},
					);
				}
				return true;
			},
			async delete(this: IHookFunctions): Promise<boolean> {
				return true;
			},
		},
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		return await handleDelivery.call(this);
	}
}
