import type {
	IExecuteFunctions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

import { properties } from './actions/claim';
import { NODE_HINTS, OUTPUTS_EXPRESSION } from './actions/outputs';
import { router } from './actions/router';

/** Operation names as the subtitle shows them: "Claim: stripe", "Extend Lease", "Get Many". */
const SUBTITLE =
	'={{ ({"claim": "Claim: " + $parameter["source"], "complete": "Complete", "extendLease": "Extend Lease", "fail": $parameter["claimsToFail"] === "execution" ? "Fail All Claims of an Execution" : "Fail", "getMany": "Get Many", "lookup": "Lookup", "reconcileAnswer": "Answer Reconcile", "resolve": "Resolve"})[$parameter["operation"] || "claim"] }}';

export class IdempotentClaim implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Idempotent Claim',
		name: 'idempotentClaim',
		icon: {
			light: 'file:../../icons/idempotent-claim.svg',
			dark: 'file:../../icons/idempotent-claim.dark.svg',
		},
		group: ['transform'],
		// Version 2 changed Claim's outputs (outputs.ts): in-progress claims
		// always leave by In Progress, failed claims by Error. n8n stores no
		// parameter left at its default, so changing a default in place
		// would change saved workflows silently; they keep version 1, new
		// nodes get version 2.
		version: [1, 2],
		defaultVersion: 2,
		subtitle: SUBTITLE,
		description:
			'Run a side effect once per event: claim the idempotency key before the protected node, complete or fail it after',
		defaults: {
			name: 'Idempotent Claim',
		},
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: OUTPUTS_EXPRESSION,
		hints: NODE_HINTS,
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
