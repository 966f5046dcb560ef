import type { INodeProperties } from 'n8n-workflow';

import type { Operation } from '../types';
import * as claim from './claim.operation';
import * as complete from './complete.operation';
import * as extendLease from './extendLease.operation';
import * as fail from './fail.operation';
import * as getMany from './getMany.operation';
import * as lookup from './lookup.operation';
import * as reconcileAnswer from './reconcileAnswer.operation';
import * as resolve from './resolve.operation';

/** Every operation of the node by its `operation` parameter value. */
export const operations: Record<string, Operation> = {
	claim,
	complete,
	extendLease,
	fail,
	getMany,
	lookup,
	reconcileAnswer,
	resolve,
};

export const operationProperty: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	default: 'claim',
	options: [
		{
			name: 'Answer Reconcile',
			value: 'reconcileAnswer',
			action: 'Answer a reconcile call',
			description:
				"In a reconciler workflow (Webhook node receiving claimd's reconcile request): tell claimd whether the effect of an unknown claim is at the destination: done, not done, or still unknown",
		},
		{
			name: 'Claim',
			value: 'claim',
			action: 'Claim events before their side effect',
			description:
				'Claim the idempotency key of every item in one request; only the winner goes on to the side effect',
		},
		{
			name: 'Complete',
			value: 'complete',
			action: 'Complete a claim',
			description: 'Record that the side effect happened, with an optional result reference',
		},
		{
			name: 'Extend Lease',
			value: 'extendLease',
			action: 'Extend the time limit of a claim',
			description:
				"Give this execution more time to finish the side effect before other deliveries may act (extends the claim's lease)",
		},
		{
			name: 'Fail',
			value: 'fail',
			action: 'Fail a claim',
			description:
				'Record that the side effect failed (retryable, permanent or unknown outcome), for one claim or, in an Error Trigger workflow, for all claims of a crashed execution',
		},
		{
			name: 'Get Many',
			value: 'getMany',
			action: 'Get many claims',
			description:
				'List claims in a state (e.g. unknown ones to review) or won by an n8n execution',
		},
		{
			name: 'Lookup',
			value: 'lookup',
			action: 'Look up a claim',
			description: 'Read a claim record and its delivery log',
		},
		{
			name: 'Resolve',
			value: 'resolve',
			action: 'Resolve a claim',
			description: 'Settle a claim in state unknown or dead_lettered by hand: completed or retry',
		},
	],
};

/** All parameters of the node: the operation selector, then each operation's fields. */
export const properties: INodeProperties[] = [
	operationProperty,
	...claim.description,
	...complete.description,
	...extendLease.description,
	...fail.description,
	...getMany.description,
	...lookup.description,
	...reconcileAnswer.description,
	...resolve.description,
];
