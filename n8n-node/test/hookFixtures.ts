/**
 * Workflow nodes, items and run data as n8n hands them to the settle hook.
 */

export const PKG = 'n8n-nodes-idempotent-claim';

export const trigger = (name = 'Stripe Trigger', type = `${PKG}.idempotentClaimTrigger`) => ({
	id: `id-${name}`,
	name,
	type,
	typeVersion: 1,
	position: [0, 0],
	parameters: { source: 'stripe' },
});

export const claimNode = (
	name = 'Idempotent Claim',
	typeVersion = 2,
	parameters: Record<string, unknown> = { source: 'stripe' },
	type = `${PKG}.idempotentClaim`,
) => ({ id: `id-${name}`, name, type, typeVersion, position: [0, 0], parameters });

export const otherNode = (name: string, type: string) => ({
	id: `id-${name}`,
	name,
	type,
	typeVersion: 1,
	position: [0, 0],
	parameters: {},
});

/** The `idempotency` object of a won claim, as the trigger and Claim put it on an item. */
export const won = (n: number, extra: Record<string, unknown> = {}) => ({
	key: `stripe/evt_${n}`,
	source: 'stripe',
	event_id: `evt_${n}`,
	action: '',
	claim_id: `claim-${n}`,
	claim_token: `token-${n}`,
	attempt: 1,
	outcome: 'won',
	state: 'processing',
	result_ref: null,
	retry_after_seconds: null,
	next_attempt_at: null,
	lease_until: '2030-01-01T00:00:00Z',
	...extra,
});

export const item = (idempotency: Record<string, unknown>, json: Record<string, unknown> = {}) => ({
	json: { body: { id: 'evt' }, ...json, idempotency },
	pairedItem: { item: 0 },
});

/** One run of a node: `outputs` are its main outputs. */
export const task = (...outputs: Array<Array<Record<string, unknown>> | null>) => ({
	startTime: 0,
	executionIndex: 0,
	executionTime: 1,
	source: [],
	data: { main: outputs },
});
