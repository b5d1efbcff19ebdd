/**
 * The rendezvous key-value store that ranks use to find each other before any collective can run: the
 * {@linkcode Store} interface, with the semantics of PyTorch's c10d stores (`TCPStore`, `HashStore`,
 * `PrefixStore`), and the argument checks every implementation shares.
 *
 * Implementations: {@linkcode MemoryStore} (one process), {@linkcode TcpStore} (a client of a
 * {@linkcode TcpStoreServer}, across processes and hosts) and {@linkcode PrefixStore} (a namespace inside
 * another store, for sub-groups).
 *
 * @module
 */

/**
 * A value as callers may pass it: bytes, or a string stored as its UTF-8 bytes.
 *
 * @example A string comes back as its bytes
 * ```ts
 * import { MemoryStore, type StoreValue } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * await using store = new MemoryStore();
 * const address: StoreValue = "10.0.0.1:29400";
 * const id: StoreValue = new Uint8Array([7, 7, 7]);
 * await store.set("address", address);
 * await store.set("id", id);
 * assert.deepEqual(await store.get("address"), new TextEncoder().encode(address));
 * assert.deepEqual(await store.get("id"), id);
 * ```
 */
export type StoreValue = Uint8Array | string;

/**
 * Options every store accepts when it is created.
 *
 * @example A store whose blocking calls give up after 20 ms
 * ```ts
 * import { MemoryStore, type StoreOptions } from "@dcomm/dcomm/store";
 * import { TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: StoreOptions = { timeoutMs: 20 };
 * await using store = new MemoryStore(options);
 * await assert.rejects(store.get("rank1/address"), TimeoutError); // nobody sets it
 * ```
 */
export interface StoreOptions {
  /**
   * How long a blocking call ({@linkcode Store.get}, {@linkcode Store.wait}) waits before it throws a
   * `TimeoutError`, unless the call gives its own `timeoutMs`. `Infinity` waits forever.
   *
   * @default {300000}
   */
  timeoutMs?: number;
}

/**
 * Options of one blocking call.
 *
 * @example A wait stopped by its signal
 * ```ts
 * import { MemoryStore, type StoreWaitOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * await using store = new MemoryStore();
 * const controller = new AbortController();
 * const options: StoreWaitOptions = { timeoutMs: 60_000, signal: controller.signal };
 * const waiting = store.wait(["rank1/ready"], options);
 * controller.abort(new Error("shutting down"));
 * await assert.rejects(waiting, /shutting down/);
 * ```
 */
export interface StoreWaitOptions {
  /**
   * How long this call waits before it throws a `TimeoutError`. `Infinity` waits forever.
   *
   * @default {the store's `timeoutMs`}
   */
  timeoutMs?: number;
  /** Stops waiting: the call rejects with the signal's reason. @default {none} */
  signal?: AbortSignal;
}

/**
 * A key-value store shared by every rank of a job. Keys are non-empty strings, values are bytes. Every
 * call is atomic with respect to the others: concurrent {@linkcode Store.add}s never lose an increment.
 *
 * @example Exchanging addresses through any store
 * ```ts
 * import {
 *   MemoryStore,
 *   type Store,
 *   type StoreOptions,
 *   type StoreValue,
 *   type StoreWaitOptions,
 * } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * // Each rank publishes its address, then reads everyone's in one request (an all-gather through the
 * // store; a world of N ranks then makes 2N requests, where a get per key would make N²).
 * async function exchange(store: Store, rank: number, size: number, address: StoreValue): Promise<string[]> {
 *   await store.set(`address/${rank}`, address);
 *   const options: StoreWaitOptions = { timeoutMs: 5_000 };
 *   const keys = Array.from({ length: size }, (_, r) => `address/${r}`);
 *   const values = await store.multiGet(keys, options);
 *   return values.map((value) => new TextDecoder().decode(value));
 * }
 *
 * const options: StoreOptions = { timeoutMs: 10_000 };
 * await using store = new MemoryStore(options);
 * const all = await Promise.all([0, 1, 2].map((rank) => exchange(store, rank, 3, `10.0.0.${rank}:29400`)));
 * assert.deepEqual(all[2], ["10.0.0.0:29400", "10.0.0.1:29400", "10.0.0.2:29400"]);
 * assert.equal(await store.add("arrived", 3), 3); // counters are decimal strings
 * assert.equal(new TextDecoder().decode(await store.get("arrived")), "3");
 * ```
 */
export interface Store extends AsyncDisposable {
  /** The default timeout of blocking calls, in milliseconds. */
  readonly timeoutMs: number;

  /**
   * Sets `key` to `value`, replacing any old value, and releases every call waiting for `key`.
   *
   * @param key A non-empty string.
   * @param value The bytes, or a string stored as UTF-8.
   * @throws {TypeError | RangeError} If `key` or `value` is not valid.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  set(key: string, value: StoreValue): Promise<void>;

  /**
   * Returns the value of `key`, waiting until some rank sets it.
   *
   * @param key A non-empty string.
   * @param options The timeout and an abort signal.
   * @returns A copy of the value.
   * @throws {TimeoutError} If `key` was not set within the timeout; the message names the key and the time.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  get(key: string, options?: StoreWaitOptions): Promise<Uint8Array>;

  /**
   * Waits until every one of `keys` has been set.
   *
   * @param keys Non-empty strings; an empty list resolves at once.
   * @param options The timeout and an abort signal.
   * @throws {TimeoutError} If a key was still missing when the timeout ran out.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  wait(keys: readonly string[], options?: StoreWaitOptions): Promise<void>;

  /**
   * Returns the values of `keys`, waiting until every one is set: one request to a network store, where
   * a loop of `get` is one per key (torch's `multi_get`).
   *
   * @param keys Non-empty strings; an empty list gives `[]`.
   * @param options The timeout and an abort signal.
   * @returns A copy of each value, in the order of `keys`.
   * @throws {TimeoutError} If a key was still missing when the timeout ran out.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  multiGet(keys: readonly string[], options?: StoreWaitOptions): Promise<Uint8Array[]>;

  /**
   * Sets every key to its value in one request (torch's `multi_set`), releasing the calls waiting for them.
   *
   * @param entries Pairs of a non-empty key and a value.
   * @throws {TypeError | RangeError} If a key or value is not valid.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  multiSet(entries: readonly (readonly [string, StoreValue])[]): Promise<void>;

  /**
   * Adds `delta` to the counter at `key` and returns the new value. The counter is stored as its decimal
   * string (as PyTorch does, so `get` returns e.g. `"3"`); a missing key starts at 0.
   *
   * @param key A non-empty string.
   * @param delta A safe integer, possibly negative.
   * @returns The value after the addition.
   * @throws {RangeError} If `delta` is not a safe integer.
   * @throws {StoreError} If the key holds something other than a decimal integer, or the store is closed.
   */
  add(key: string, delta: number): Promise<number>;

  /**
   * Sets `key` to `desired` if its value equals `expected`, with PyTorch's semantics: a missing key is set
   * when `expected` is empty; otherwise a missing key is left missing and `expected` is returned.
   *
   * @param key A non-empty string.
   * @param expected The value the caller believes the key holds (empty for "missing").
   * @param desired The value to store.
   * @returns The value of the key after the call (`expected` for a missing key left missing).
   * @throws {StoreError} If the store is closed or unreachable.
   */
  compareSet(key: string, expected: StoreValue, desired: StoreValue): Promise<Uint8Array>;

  /**
   * Deletes `key`.
   *
   * @param key A non-empty string.
   * @returns Whether the key existed.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  delete(key: string): Promise<boolean>;

  /**
   * Counts the keys in the store.
   *
   * @returns The number of keys set and not deleted.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  numKeys(): Promise<number>;

  /**
   * Tells whether every one of `keys` exists, without waiting.
   *
   * @param keys Non-empty strings; an empty list gives `true`.
   * @returns `true` if all exist.
   * @throws {StoreError} If the store is closed or unreachable.
   */
  check(keys: readonly string[]): Promise<boolean>;

  /**
   * Closes the store: pending calls reject with a `StoreError`, later calls too. Closing twice is a no-op.
   */
  close(): Promise<void>;
}
