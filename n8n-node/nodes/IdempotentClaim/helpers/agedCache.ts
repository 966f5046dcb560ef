/**
 * A small map whose entries live at most `maxAgeMs` after they were set and
 * of which at most `maxEntries` are kept (the oldest goes first). Expired
 * entries are dropped when looked up and whenever an entry is set: n8n's
 * node linter allows no timers, so nothing is dropped in between.
 *
 * Used for credentials a node read through n8n and lends to its later runs
 * (the Claim node per execution, the trigger per node): `now` is passed in,
 * in ms since the epoch, so callers and tests choose the clock.
 */
export class AgedCache<V> {
	private readonly entries = new Map<string, { value: V; setAt: number }>();

	constructor(
		readonly maxAgeMs: number,
		readonly maxEntries: number,
	) {}

	/** The value under key if it was set less than maxAgeMs before now (a clock gone back counts as expired). */
	get(key: string, now: number): V | undefined {
		const entry = this.entries.get(key);
		if (entry === undefined) return undefined;
		if (this.fresh(entry.setAt, now)) return entry.value;
		this.entries.delete(key);
		return undefined;
	}

	/** Sets key, after dropping the expired entries and, past maxEntries, the oldest. */
	set(key: string, value: V, now: number): void {
		this.entries.delete(key);
		for (const [other, entry] of this.entries) {
			if (!this.fresh(entry.setAt, now)) this.entries.delete(other);
		}
		while (this.entries.size >= this.maxEntries) {
			const oldest = this.entries.keys().next();
			if (oldest.done === true) break;
			this.entries.delete(oldest.value);
		}
		this.entries.set(key, { value, setAt: now });
	}

	/** Forgets key, but only while its value is the one `same` recognises (a newer value stays). */
	forget(key: string, same: (value: V) => boolean): void {
		const entry = this.entries.get(key);
		if (entry !== undefined && same(entry.value)) this.entries.delete(key);
	}

	/** How many entries are kept, expired ones not yet dropped included. */
	get size(): number {
		return this.entries.size;
	}

	clear(): void {
		this.entries.clear();
	}

	private fresh(setAt: number, now: number): boolean {
		const age = now - setAt;
		return age >= 0 && age < this.maxAgeMs;
	}
}
