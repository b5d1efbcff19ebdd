/**
 * {@linkcode MemoryStore}: a {@linkcode Store} inside one process, like c10d's `HashStore`. Ranks that run
 * as Workers or as tasks of one event loop rendezvous through it; blocking calls wait on promises that
 * the completing `set` resolves, never by polling.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import {
  checkDelta,
  checkEntries,
  checkKey,
  checkKeys,
  checkTimeout,
  DEFAULT_STORE_TIMEOUT_MS,
  nameKeys,
  valueBytes,
} from "./_checks.ts";
import { KeyTable } from "./_table.ts";
import { waitWithDeadline } from "./_wait.ts";
import type { Store, StoreOptions, StoreValue, StoreWaitOptions } from "./store.ts";

/**
 * Options of {@linkcode MemoryStore}.
 *
 * @example
 * ```ts
 * import { MemoryStore, type MemoryStoreOptions } from "@dcomm/dcomm/store";
 * import { TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: MemoryStoreOptions = { timeoutMs: 20 };
 * await using store = new MemoryStore(options);
 * await assert.rejects(store.wait(["rank1/ready"]), TimeoutError);
 * ```
 */
export type MemoryStoreOptions = StoreOptions;

const WHERE = " in the in-memory store";

/**
 * A {@linkcode Store} in this process's memory. Values are copied in and out, so callers may reuse their
 * arrays.
 *
 * @example A get released by a later set
 * ```ts
 * import { MemoryStore, type MemoryStoreOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * const options: MemoryStoreOptions = { timeoutMs: 5_000 };
 * await using store = new MemoryStore(options);
 * const address = store.get("rank0/address");
 * await store.set("rank0/address", "10.0.0.1:29400");
 * assert.equal(new TextDecoder().decode(await address), "10.0.0.1:29400");
 * ```
 */
export class MemoryStore implements Store {
  #table = new KeyTable();
  #closed = new AbortController();
  #timeoutMs: number;

  /**
   * Creates an empty store.
   *
   * @param options The default timeout.
   * @throws {RangeError} If `timeoutMs` is negative or not a number.
   */
  constructor(options: MemoryStoreOptions = {}) {
    this.#timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS);
  }

  /** The default timeout of blocking calls, in milliseconds. */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /** Whether {@linkcode MemoryStore.close} was called. */
  get closed(): boolean {
    return this.#closed.signal.aborted;
  }

  /** {@inheritDoc Store.set} */
  set(key: string, value: StoreValue): Promise<void> {
    return this.#run(() => {
      this.#table.set(checkKey(key), valueBytes(value));
    });
  }

  /** {@inheritDoc Store.get} */
  get(key: string, options: StoreWaitOptions = {}): Promise<Uint8Array> {
    return this.#run(() => {
      checkKey(key);
      return this.#wait<Uint8Array>(
        [key],
        options,
        (resolve) => this.#table.whenAll([key], () => resolve(this.#copyOf(key))),
      );
    });
  }

  /** {@inheritDoc Store.wait} */
  wait(keys: readonly string[], options: StoreWaitOptions = {}): Promise<void> {
    return this.#run(() => {
      checkKeys(keys);
      return this.#wait<void>(keys, options, (resolve) => this.#table.whenAll(keys, resolve));
    });
  }

  /** {@inheritDoc Store.multiGet} */
  multiGet(keys: readonly string[], options: StoreWaitOptions = {}): Promise<Uint8Array[]> {
    return this.#run(() => {
      checkKeys(keys);
      if (keys.length === 0) return Promise.resolve([]);
      return this.#wait<Uint8Array[]>(
        keys,
        options,
        (resolve) => this.#table.whenAll(keys, () => resolve(keys.map((k) => this.#copyOf(k)))),
      );
    });
  }

  /** {@inheritDoc Store.multiSet} */
  multiSet(entries: readonly (readonly [string, StoreValue])[]): Promise<void> {
    return this.#run(() => {
      const checked = checkEntries(entries).map(([k, v]) => [checkKey(k), valueBytes(v)] as const);
      for (const [k, v] of checked) this.#table.set(k, v);
    });
  }

  /** {@inheritDoc Store.add} */
  add(key: string, delta: number): Promise<number> {
    return this.#run(() => this.#table.add(checkKey(key), checkDelta(delta)));
  }

  /** {@inheritDoc Store.compareSet} */
  compareSet(key: string, expected: StoreValue, desired: StoreValue): Promise<Uint8Array> {
    return this.#run(() =>
      this.#table.compareSet(checkKey(key), valueBytes(expected), valueBytes(desired)).slice()
    );
  }

  /** {@inheritDoc Store.delete} */
  delete(key: string): Promise<boolean> {
    return this.#run(() => this.#table.delete(checkKey(key)));
  }

  /** {@inheritDoc Store.numKeys} */
  numKeys(): Promise<number> {
    return this.#run(() => this.#table.size);
  }

  /** {@inheritDoc Store.check} */
  check(keys: readonly string[]): Promise<boolean> {
    return this.#run(() => this.#table.hasAll(checkKeys(keys)));
  }

  /** Closes the store: pending `get`/`wait` calls reject with a StoreError, and so do later calls. */
  close(): Promise<void> {
    if (!this.closed) {
      this.#closed.abort(new StoreError("The in-memory store was closed"));
      this.#table.clear();
    }
    return Promise.resolve();
  }

  /** Same as {@linkcode MemoryStore.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Runs `body` unless the store is closed, turning synchronous throws into rejections. */
  async #run<T>(body: () => T | Promise<T>): Promise<T> {
    if (this.closed) throw new StoreError("Cannot use the in-memory store: it was closed");
    return await body();
  }

  #wait<T>(
    keys: readonly string[],
    options: StoreWaitOptions,
    start: (resolve: (value: T) => void) => () => void,
  ): Promise<T> {
    const timeoutMs = checkTimeout(options.timeoutMs ?? this.#timeoutMs);
    return waitWithDeadline<T>((resolve) => start(resolve), {
      timeoutMs,
      signal: options.signal,
      closed: this.#closed.signal,
      what: nameKeys(keys),
      where: WHERE,
      timeoutDetail: () => {
        const left = this.#table.missing(keys);
        return left.length === keys.length ? "" : ` (still missing: ${nameKeys(left)})`;
      },
    });
  }

  #copyOf(key: string): Uint8Array {
    // whenAll fires from the set that completed the key, so the key exists here.
    return (this.#table.get(key) ?? new Uint8Array()).slice();
  }
}
