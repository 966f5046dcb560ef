import type { JsonObject } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import {
	isRetryable,
	mapSidecarError,
	sidecarEntryError,
} from '../nodes/IdempotentClaim/transport/errors';
import { AxiosError, BASE_URL, NODE } from './helpers';

/** What httpRequestWithAuthentication throws: the client's error wrapped in a NodeApiError. */
function wrapped(error: Error): NodeApiError {
	return new NodeApiError(NODE, error as unknown as JsonObject);
}

function httpError(status: number, body: unknown): AxiosError {
	return new AxiosError(
		`Request failed with status code ${status}`,
		'ERR_BAD_REQUEST',
		{
			status,
			data: body,
		},
		{ headers: { Authorization: 'Bearer very-secret-key' } },
	);
}

describe('mapSidecarError', () => {
	it('explains a refused connection as an unreachable sidecar, with the base URL', () => {
		const refused = new AxiosError('connect ECONNREFUSED 127.0.0.1:8080', 'ECONNREFUSED');
		for (const thrown of [refused, wrapped(refused)]) {
			const error = mapSidecarError(NODE, thrown, { baseUrl: BASE_URL });
			expect(error).toBeInstanceOf(NodeApiError);
			expect(error).not.toBe(thrown);
			expect(error.message).toBe(`Cannot reach the Idempotent Claim sidecar at ${BASE_URL}`);
			expect(error.description).toContain('ECONNREFUSED');
			expect(error.description).toContain('No claim was made');
			expect(error.httpCode).toBeNull();
		}
	});

	it('explains a broken connection as an unknown outcome', () => {
		const reset = wrapped(new AxiosError('socket hang up', 'ECONNRESET'));
		const error = mapSidecarError(NODE, reset, { baseUrl: BASE_URL });
		expect(error.message).toBe(
			`Lost the connection to the Idempotent Claim sidecar at ${BASE_URL}`,
		);
		expect(error.description).toContain('outcome is unknown');
	});

	it('explains 401 as a rejected API key without repeating the key', () => {
		const error = mapSidecarError(
			NODE,
			wrapped(httpError(401, { error: { code: 'unauthorized', message: 'unknown api key' } })),
			{ baseUrl: BASE_URL, itemIndex: 2 },
		);
		expect(error.message).toBe('The Idempotent Claim sidecar rejected the API key');
		expect(error.httpCode).toBe('401');
		expect(error.context.itemIndex).toBe(2);
		expect(JSON.stringify([error.message, error.description, error.context])).not.toContain(
			'very-secret-key',
		);
	});

	it('explains 429 rate_limited as too many rejected keys, not retried, without the key', () => {
		const error = mapSidecarError(
			NODE,
			wrapped(
				httpError(429, {
					error: {
						code: 'rate_limited',
						message: 'too many failed authentications from this address; retry in 42 s',
					},
				}),
			),
			{ baseUrl: BASE_URL },
		);
		expect(error.message).toBe(
			'The Idempotent Claim sidecar is refusing API keys from this n8n for now',
		);
		expect(error.description).toContain('retry in 42 s');
		expect(error.description).toContain('No claim was made');
		expect(error.httpCode).toBe('429');
		expect(error.context.sidecar).toMatchObject({ code: 'rate_limited' });
		expect(isRetryable(error)).toBe(false);
		expect(JSON.stringify([error.message, error.description, error.context])).not.toContain(
			'very-secret-key',
		);
		// A 429 without the sidecar's body is a proxy's: not blamed on the API key.
		const proxy = mapSidecarError(NODE, wrapped(httpError(429, 'Too Many Requests')));
		expect(proxy.message).toBe('Idempotent Claim sidecar error (HTTP 429)');
		expect(proxy.httpCode).toBe('429');
	});

	it('names the invalid field of a 400 answer by its parameter', () => {
		const error = mapSidecarError(
			NODE,
			wrapped(
				httpError(400, {
					error: { code: 'invalid', message: 'must not be empty', field: 'source' },
				}),
			),
		);
		expect(error.message).toBe('Invalid Source (source): must not be empty');
		expect(error.description).toContain('"source"');
		expect(error.httpCode).toBe('400');
		expect(error.context.sidecar).toMatchObject({ code: 'invalid', field: 'source' });
	});

	it('names the field of one claim of a batch without its claims[n] prefix', () => {
		const error = sidecarEntryError(NODE, {
			code: 'invalid',
			message: 'must be at most 200 characters',
			field: 'claims[3].action',
		});
		expect(error.message).toBe('Invalid Action Name (action): must be at most 200 characters');
		expect(error.httpCode).toBe('422');
	});

	it("explains a batch over the sidecar's limit", () => {
		const error = mapSidecarError(
			NODE,
			wrapped(
				httpError(422, {
					error: { code: 'invalid', message: 'must hold at most 1000 claims', field: 'claims' },
				}),
			),
		);
		expect(error.message).toBe('Invalid Items (claims): must hold at most 1000 claims');
		expect(error.description).toContain('CLAIMD_MAX_BATCH');
	});

	it('treats a malformed field like an invalid one, and reports a wrong state', () => {
		const malformed = mapSidecarError(
			NODE,
			wrapped(
				httpError(400, {
					error: { code: 'malformed', message: 'must be a number', field: 'lease_seconds' },
				}),
			),
		);
		expect(malformed.message).toBe(
			'Invalid Time Limit for the Side Effect (Seconds) (lease_seconds): must be a number',
		);
		const state = mapSidecarError(
			NODE,
			wrapped(httpError(409, { error: { code: 'invalid_state', message: 'claim is completed' } })),
		);
		expect(state.message).toBe('The claim is not in a state that allows this operation');
		expect(state.description).toBe('claim is completed');
		expect(state.httpCode).toBe('409');
	});

	it('names an invalid field of a 422 answer, and a field it has no label for as sent', () => {
		const error = mapSidecarError(
			NODE,
			httpError(422, { error: { code: 'invalid', message: 'too deep', field: 'payload.items' } }),
		);
		expect(error.message).toBe('Invalid payload.items: too deep');
		expect(error.httpCode).toBe('422');
	});

	it('reads the status when the answer has no error body', () => {
		expect(mapSidecarError(NODE, wrapped(httpError(400, 'bad'))).message).toBe(
			'Invalid request: rejected by the sidecar',
		);
		expect(mapSidecarError(NODE, wrapped(httpError(401, ''))).message).toBe(
			'The Idempotent Claim sidecar rejected the API key',
		);
	});

	it('maps lease lost, not found, too large, unavailable and internal', () => {
		const cases: Array<[number, string, string]> = [
			[409, 'lease_lost', 'Lease lost: this claim token is no longer current'],
			[404, 'not_found', 'Claim not found'],
			[413, 'body_too_large', 'Request too large for the Idempotent Claim sidecar'],
			[413, 'too_large', 'Request too large for the Idempotent Claim sidecar'],
			[503, 'unavailable', 'The Idempotent Claim sidecar is unavailable'],
			[500, 'internal', 'The Idempotent Claim sidecar failed to process the request'],
		];
		for (const [status, code, message] of cases) {
			const error = mapSidecarError(
				NODE,
				wrapped(httpError(status, { error: { code, message: 'detail' } })),
			);
			expect(error.message).toBe(message);
			expect(error.httpCode).toBe(String(status));
		}
	});

	it('keeps an unexpected status visible', () => {
		const error = mapSidecarError(NODE, wrapped(httpError(418, { error: { message: 'teapot' } })));
		expect(error.message).toBe('Idempotent Claim sidecar error (HTTP 418): teapot');
	});
});

describe('sidecarEntryError', () => {
	it('maps an error entry of a batch answer with the status of its code and the item index', () => {
		const error = sidecarEntryError(
			NODE,
			{
				code: 'invalid',
				message: 'exactly one of event_id, key_parts, key_fields',
				field: 'event_id',
			},
			{ itemIndex: 4 },
		);
		expect(error.message).toBe(
			'Invalid Event ID (event_id): exactly one of event_id, key_parts, key_fields',
		);
		expect(error.httpCode).toBe('422');
		expect(error.context.itemIndex).toBe(4);
	});
});
