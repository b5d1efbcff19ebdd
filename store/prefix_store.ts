/**
 * {@linkcode PrefixStore}: a namespace inside another {@linkcode Store}, like c10d's `PrefixStore`. Each
 * sub-group of ranks rendezvous under its own prefix on the one store of the job, so their keys never
 * collide.
 *
 * @module
 */
import { StoreError } from "../core/errors.ts";
import { checkEntries, checkKey, checkKeys, checkTimeout } from "./_checks.ts";
import type { Store, StoreValue, StoreWaitOptions } from "./store.ts";

/**
 * Options of {@linkcode PrefixStore}.
 *
 * @example A namespace whose waits are shorter than the store's
 * ```ts
 * import { MemoryStore, PrefixStore, type PrefixStoreOptions } from "@dcomm/dcomm/store";
 * import { TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using store = new MemoryStore({ timeoutMs: 60_000 });
 * const options: PrefixStoreOptions = { timeoutMs: 20 };
 * await using group = new PrefixStore("group1", store, options);
 * await assert.rejects(group.get("leader"), TimeoutError);
 * ```
 */
export interface PrefixStoreOptions {
  /**
   * The default timeout of blocking calls through this store.
   *
   * @default {the wrapped store's `timeoutMs`}
   */
  timeoutMs?: number;
}

/**
 * A {@linkcode Store} whose keys live under `${prefix}/` in another store. Prefix stores nest
 * (`new PrefixStore("b", new PrefixStore("a", store))` uses `a/b/key`).
 *
 * Closing it rejects the calls waiting through it but leaves the wrapped store open: that store is shared
 * by the whole job. {@linkcode PrefixStore.numKeys} counts every key of the wrapped store, as c10d does.
 *
 * @example A sub-group's namespace
 * ```ts
 * import { MemoryStore, PrefixStore, type PrefixStoreOptions } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 *
 * await using store = new MemoryStore();
 * const options: PrefixStoreOptions = { timeoutMs: 60_000 };
 * await using group = new PrefixStore("group1", store, options);
 * await group.set("leader", "rank2");
 * assert.equal(await store.check(["group1/leader"]), true);
 * assert.equal(new TextDecoder().decode(await group.get("leader")), "rank2");
 * ```
 */
export class PrefixStore implements Store {
  #prefix: string;
  #inner: Store;
  #timeoutMs: number | undefined;
  #closed = new AbortController();

  /**
   * Wraps `store`; nothing is written until the first call.
   *
   * @param prefix A non-empty string; keys become `${prefix}/${key}`.
   * @param store The store to wrap.
   * @param options The default timeout.
   * @throws {TypeError | RangeError} If `prefix` is not a non-empty string, or `timeoutMs` is invalid.
   */
  constructor(prefix: string, store: Store, options: PrefixStoreOptions = {}) {
    try {
      this.#prefix = checkKey(prefix);
    } catch (error) {
      const Kind = error instanceof RangeError ? RangeError : TypeError;
      throw new Kind(
        `Invalid PrefixStore prefix: expected a non-empty string, found ${JSON.stringify(prefix)}`,
      );
    }
    if (typeof store?.get !== "function") {
      throw new TypeError(`Invalid PrefixStore store: expected a Store, found ${String(store)}`);
    }
    this.#inner = store;
    this.#timeoutMs = options.timeoutMs === undefined ? undefined : checkTimeout(options.timeoutMs);
  }

  /** The prefix, without the trailing `/`. */
  get prefix(): string {
    return this.#prefix;
  }

  /** The wrapped store. */
  get store(): Store {
    return this.#inner;
  }

  /** The default timeout of blocking calls, in milliseconds. */
  get timeoutMs(): number {
    return this.#timeoutMs ?? this.#inner.timeoutMs;
  }

  /** {@inheritDoc Store.set} */
  set(key: string, value: StoreValue): Promise<void> {
    return this.#run(() => this.#inner.set(this.#key(key), value));
  }

  /** {@inheritDoc Store.get} */
  get(key: string, options: StoreWaitOptions = {}): Promise<Uint8Array> {
    return this.#run(() => this.#inner.get(this.#key(key), this.#waitOptions(options)));
  }

  /** {@inheritDoc Store.wait} */
  wait(keys: readonly string[], options: StoreWaitOptions = {}): Promise<void> {
    return this.#run(() => this.#inner.wait(this.#keys(keys), this.#waitOptions(options)));
  }

  /** {@inheritDoc Store.multiGet} */
  multiGet(keys: readonly string[], options: StoreWaitOptions = {}): Promise<Uint8Array[]> {
    return this.#run(() => this.#inner.multiGet(this.#keys(keys), this.#waitOptions(options)));
  }

  /** {@inheritDoc Store.multiSet} */
  multiSet(entries: readonly (readonly [string, StoreValue])[]): Promise<void> {
    return this.#run(() =>
      this.#inner.multiSet(checkEntries(entries).map(([k, v]) => [this.#key(k), v as StoreValue] as const))
    );
  }

  /** {@inheritDoc Store.add} */
  add(key: string, delta: number): Promise<number> {
    return this.#run(() => this.#inner.add(this.#key(key), delta));
  }

  /** {@inheritDoc Store.compareSet} */
  compareSet(key: string, expected: StoreValue, desired: StoreValue): Promise<Uint8Array> {
    return this.#run(() => this.#inner.compareSet(this.#key(key), expected, desired));
  }

  /** {@inheritDoc Store.delete} */
  delete(key: string): Promise<boolean> {
    return this.#run(() => this.#inner.delete(this.#key(key)));
  }

  /** Counts every key of the wrapped store, not only those under the prefix (as c10d's PrefixStore). */
  numKeys(): Promise<number> {
    return this.#run(() => this.#inner.numKeys());
  }

  /** {@inheritDoc Store.check} */
  check(keys: readonly string[]): Promise<boolean> {
    return this.#run(() => this.#inner.check(this.#keys(keys)));
  }

  /** Rejects the calls waiting through this store and refuses later ones; the wrapped store stays open. */
  close(): Promise<void> {
    if (!this.#closed.signal.aborted) {
      this.#closed.abort(new StoreError(`Stopped waiting: the PrefixStore "${this.#prefix}" was closed`));
    }
    return Promise.resolve();
  }

  /** Same as {@linkcode PrefixStore.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed.signal.aborted) {
      throw new StoreError(`Cannot use the PrefixStore "${this.#prefix}": it was closed`);
    }
    return await body();
  }

  #key(key: string): string {
    return `${this.#prefix}/${checkKey(key)}`;
  }

  #keys(keys: readonly string[]): string[] {
    return checkKeys(keys).map((key) => `${this.#prefix}/${key}`);
  }

  #waitOptions(options: StoreWaitOptions): StoreWaitOptions {
    const signals = [this.#closed.signal];
    if (options.signal !== undefined) signals.push(options.signal);
    return {
      timeoutMs: options.timeoutMs ?? this.#timeoutMs,
      signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals),
    };
  }
}
