/**
 * Argument checks and message helpers shared by every store.
 *
 * @module
 */

/** The default of `StoreOptions.timeoutMs`: five minutes, as PyTorch's default store timeout. */
export const DEFAULT_STORE_TIMEOUT_MS = 300_000;

const encoder = new TextEncoder();

/**
 * Throws unless `key` is a non-empty string.
 *
 * @param key The key to check.
 * @returns The key.
 * @throws {TypeError} If `key` is not a string.
 * @throws {RangeError} If `key` is empty.
 */
export function checkKey(key: unknown): string {
  if (typeof key !== "string") {
    throw new TypeError(`Invalid store key: expected a non-empty string, found ${describe(key)}`);
  }
  if (key.length === 0) {
    throw new RangeError('Invalid store key: expected a non-empty string, found ""');
  }
  return key;
}

/**
 * Throws unless `keys` is an array of non-empty strings.
 *
 * @param keys The keys to check.
 * @returns The keys.
 * @throws {TypeError} If `keys` is not an array, or holds something other than strings.
 * @throws {RangeError} If a key is empty.
 */
export function checkKeys(keys: unknown): readonly string[] {
  if (!Array.isArray(keys)) {
    throw new TypeError(
      `Invalid store keys: expected an array of non-empty strings, found ${describe(keys)}`,
    );
  }
  for (const key of keys) checkKey(key);
  return keys;
}

/**
 * The bytes of a value: a copy of a `Uint8Array`, or the UTF-8 encoding of a string.
 *
 * @param value The value to convert.
 * @returns Bytes the caller may keep: later changes to `value` do not reach them.
 * @throws {TypeError} If `value` is neither a `Uint8Array` nor a string.
 */
export function valueBytes(value: unknown): Uint8Array {
  if (typeof value === "string") return encoder.encode(value);
  if (value instanceof Uint8Array) return value.slice();
  throw new TypeError(`Invalid store value: expected a Uint8Array or a string, found ${describe(value)}`);
}

/**
 * Throws unless `entries` is an array of `[key, value]` pairs (each checked where it is used).
 *
 * @param entries What `multiSet` was given.
 * @returns The entries.
 * @throws {TypeError} If `entries` is not an array of pairs.
 */
export function checkEntries(entries: unknown): readonly (readonly [string, unknown])[] {
  if (!Array.isArray(entries) || !entries.every((e) => Array.isArray(e) && e.length === 2)) {
    throw new TypeError(
      `Invalid multiSet entries: expected an array of [key, value] pairs, found ${describe(entries)}`,
    );
  }
  return entries as readonly (readonly [string, unknown])[];
}

/**
 * Throws unless `ms` is a valid timeout.
 *
 * @param ms The timeout in milliseconds.
 * @param name The option's name, for the message.
 * @returns The timeout.
 * @throws {RangeError} If `ms` is not a non-negative number (`Infinity` is allowed).
 */
export function checkTimeout(ms: unknown, name = "timeoutMs"): number {
  if (typeof ms !== "number" || Number.isNaN(ms) || ms < 0) {
    throw new RangeError(
      `Invalid ${name}: expected a non-negative number of milliseconds, found ${describe(ms)}`,
    );
  }
  return ms;
}

/**
 * Throws unless `delta` is a safe integer.
 *
 * @param delta The increment of {@linkcode Store.add}.
 * @returns The increment.
 * @throws {RangeError} If `delta` is not a safe integer.
 */
export function checkDelta(delta: unknown): number {
  if (typeof delta !== "number" || !Number.isSafeInteger(delta)) {
    throw new RangeError(`Invalid add() delta: expected a safe integer, found ${describe(delta)}`);
  }
  return delta;
}

/**
 * Names keys for an error message, at most ten of them.
 *
 * @param keys The keys.
 * @returns For example `key "a"` or `keys "a", "b"`.
 */
export function nameKeys(keys: readonly string[]): string {
  const shown = keys.slice(0, 10).map((k) => JSON.stringify(k)).join(", ");
  const more = keys.length > 10 ? ` and ${keys.length - 10} more` : "";
  return `${keys.length === 1 ? "key" : "keys"} ${shown}${more}`;
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") {
    return `${typeof value} ${String(value)}`;
  }
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return "an array";
  return (value as object).constructor?.name ?? typeof value;
}
