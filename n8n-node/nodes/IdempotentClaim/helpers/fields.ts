import type { IDataObject } from 'n8n-workflow';

/**
 * Splits a comma-separated list of field paths ("type, data.object.id") into
 * trimmed, non-empty paths, keeping their order and dropping repeats.
 */
export function parseFieldList(list: string | string[] | undefined): string[] {
	const raw = Array.isArray(list) ? list : String(list ?? '').split(',');
	const seen = new Set<string>();
	for (const entry of raw) {
		const path = String(entry).trim();
		if (path !== '') seen.add(path);
	}
	return [...seen];
}

function own(object: unknown, key: string): object is Record<string, unknown> {
	return (
		typeof object === 'object' &&
		object !== null &&
		Object.prototype.hasOwnProperty.call(object, key)
	);
}

/**
 * Reads a field of an item by path. A key that itself contains dots wins over
 * the dotted path ("a.b" as one key before a → b); array indexes are plain
 * segments ("items.0.id"). Returns `found: false` when any segment is missing.
 */
export function getField(json: IDataObject, path: string): { found: boolean; value?: unknown } {
	if (own(json, path)) return { found: true, value: json[path] };
	let current: unknown = json;
	for (const segment of path.split('.')) {
		if (!own(current, segment)) return { found: false };
		current = current[segment];
	}
	return { found: true, value: current };
}

/**
 * Builds an object of the chosen fields keyed by their path, for hashing by the
 * sidecar (the payload for conflict detection). Throws (with the path) when a
 * field is missing, so that items without the field never share one payload
 * hash by accident. Key fields have stricter rules: see keyFieldValues.
 */
export function pickFields(json: IDataObject, paths: string[], what: string): IDataObject {
	const picked: IDataObject = {};
	for (const path of paths) {
		const { found, value } = getField(json, path);
		if (!found || value === undefined) {
			throw new FieldError(`${what}: field "${path}" is missing from the item`);
		}
		picked[path] = value as IDataObject[keyof IDataObject];
	}
	return picked;
}

/** A parameter value of one item that cannot be sent; becomes a NodeOperationError for that item. */
export class FieldError extends Error {
	constructor(
		message: string,
		readonly description?: string,
	) {
		super(message);
		this.name = 'FieldError';
	}
}
