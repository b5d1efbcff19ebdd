/**
 * The key-value table behind {@linkcode MemoryStore} and {@linkcode TcpStoreServer}: PyTorch's store
 * semantics in one place, and waiters per key so that blocking calls are released by the write that
 * completes them, never by polling.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";

const decoder = new TextDecoder();
const encoder = new TextEncoder();
const INTEGER = /^-?[0-9]+$/;

interface Waiter {
  /** Keys still missing; the waiter fires when this empties. */
  readonly missing: Set<string>;
  readonly onReady: () => void;
}

/**
 * A map from keys to bytes with waiters. It stores the arrays it is given and returns its own arrays:
 * callers copy on the way in and out where they need to.
 */
export class KeyTable {
  #values = new Map<string, Uint8Array>();
  #waiters = new Map<string, Set<Waiter>>();

  /** The number of keys. */
  get size(): number {
    return this.#values.size;
  }

  /** The value of `key`, if set. */
  get(key: string): Uint8Array | undefined {
    return this.#values.get(key);
  }

  /** Whether every key exists. */
  hasAll(keys: readonly string[]): boolean {
    return keys.every((key) => this.#values.has(key));
  }

  /** Sets `key` and fires the waiters it completes. */
  set(key: string, value: Uint8Array): void {
    this.#values.set(key, value);
    this.#notify(key);
  }

  /**
   * Adds to the decimal counter at `key` (missing: 0) and returns the new value.
   *
   * @throws {StoreError} If the value is not a decimal integer or the sum is not a safe integer.
   */
  add(key: string, delta: number): number {
    const old = this.#values.get(key);
    let base = 0;
    if (old !== undefined) {
      const text = decoder.decode(old);
      base = Number(text);
      if (!INTEGER.test(text) || !Number.isSafeInteger(base)) {
        throw new StoreError(
          `Cannot add to key ${JSON.stringify(key)}: expected a decimal integer, found ${preview(old)}`,
        );
      }
    }
    const sum = base + delta;
    if (!Number.isSafeInteger(sum)) {
      throw new StoreError(
        `Cannot add ${delta} to key ${JSON.stringify(key)}: ${base} + ${delta} is not a safe integer`,
      );
    }
    this.set(key, encoder.encode(String(sum)));
    return sum;
  }

  /**
   * Compare-and-set with c10d's semantics: a missing key is set only when `expected` is empty, and
   * otherwise the call returns `expected` (c10d's `HashStore` and `TCPStore` both do so).
   *
   * @returns The value after the call.
   */
  compareSet(key: string, expected: Uint8Array, desired: Uint8Array): Uint8Array {
    const current = this.#values.get(key);
    if (current === undefined) {
      if (expected.length !== 0) return expected;
      this.set(key, desired);
      return desired;
    }
    if (!equal(current, expected)) return current;
    this.set(key, desired);
    return desired;
  }

  /** Deletes `key`; returns whether it existed. Waiters already released stay released. */
  delete(key: string): boolean {
    return this.#values.delete(key);
  }

  /**
   * Calls `onReady` once every key has been set: at once (synchronously) if they all exist, otherwise
   * from the `set` that completes them, synchronously too, so that it sees the value that was set.
   *
   * @returns A function that drops the waiter; harmless after it fired.
   */
  whenAll(keys: readonly string[], onReady: () => void): () => void {
    const missing = new Set(keys.filter((key) => !this.#values.has(key)));
    if (missing.size === 0) {
      onReady();
      return () => {};
    }
    const waiter: Waiter = { missing, onReady };
    for (const key of missing) {
      let set = this.#waiters.get(key);
      if (set === undefined) this.#waiters.set(key, set = new Set());
      set.add(waiter);
    }
    return () => {
      for (const key of waiter.missing) {
        const set = this.#waiters.get(key);
        set?.delete(waiter);
        if (set?.size === 0) this.#waiters.delete(key);
      }
      waiter.missing.clear();
    };
  }

  /** The keys of a waiter that are still missing, for timeout messages. */
  missing(keys: readonly string[]): string[] {
    return keys.filter((key) => !this.#values.has(key));
  }

  /** The number of keys with at least one waiter (for tests of cleanup). */
  get waitedKeys(): number {
    return this.#waiters.size;
  }

  /** Drops every value and waiter. */
  clear(): void {
    this.#values.clear();
    this.#waiters.clear();
  }

  #notify(key: string): void {
    const waiters = this.#waiters.get(key);
    if (waiters === undefined) return;
    this.#waiters.delete(key);
    for (const waiter of waiters) {
      waiter.missing.delete(key);
      if (waiter.missing.size === 0) waiter.onReady();
    }
  }
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function preview(bytes: Uint8Array): string {
  const text = decoder.decode(bytes.subarray(0, 32));
  return JSON.stringify(bytes.length > 32 ? `${text}…` : text);
}
