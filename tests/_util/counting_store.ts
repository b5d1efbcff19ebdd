/**
 * A store that counts the requests made through it (each call is one request: a `multiGet` or a `wait`
 * of many keys is one), for the tests and the benchmark of the O(N) rendezvous.
 *
 * @module
 */
import type { Store } from "../../store/store.ts";

/** `store`, counting into `count.n` every call but `close`. */
export function countingStore(store: Store, count: { n: number }): Store {
  return new Proxy(store, {
    get(target, name, receiver): unknown {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== "function" || name === "close") return value;
      return (...args: unknown[]): unknown => {
        count.n++;
        return value.apply(target, args);
      };
    },
  });
}
