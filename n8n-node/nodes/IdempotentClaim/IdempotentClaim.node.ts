import type {
	IExecuteFunctions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

import { properties } from './actions/claim';
import { OUTPUTS_EXPRESSION } from './actions/outputs';
import { router } from './actions/router';

export class IdempotentClaim implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotent Claim',
		name: 'idempotentClaim',
		icon: {
			light: 'file:../../icons/idempotent-claim.svg',
			dark: 'file:../../icons/idempotent-claim.dark.svg',
		},
		group: ['transform'],
		version: 1,
		subtitle:
			'={{ $parameter["operation"] === "claim" ? "claim: " + $parameter["source"] : $parameter["operation"] }}',
		description:
			'Run a side effect once per event: claim the idempotency key before the protected node, complete or fail it after',
		defaults: {
			name: 'Idempotent Claim',
		},
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: OUTPUTS_EXPRESSION,
		credentials: [
			{
				name: 'idempotentClaimApi',
				required: true,
			},
		],
		properties,
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		return await router.call(this);
	}
}
