/**
 * A world of ranks as threads of one process: each rank is a Worker that joins the world with the
 * in-process transport (SharedArrayBuffer rings) and runs the `main(pg, context)` function exported by a
 * module. For tests, and for CPU training on one machine without a launcher.
 *
 * ```ts
 * import { spawnThreads } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * // train.ts, the rank module (written to a temporary file here)
 * const train = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(train, `
 *   import type { ProcessGroup, ThreadContext } from "@dcomm/dcomm";
 *   export async function main(pg: ProcessGroup, ctx: ThreadContext): Promise<number> {
 *     const grad = new Float32Array(4).fill(pg.rank);
 *     await pg.allReduce(grad);
 *     return grad[0];
 *   }
 * `);
 * // run.ts
 * const results = await spawnThreads(new URL(`file://${train}`), { worldSize: 4 });
 * assert.deepEqual(results, [6, 6, 6, 6]); // 0 + 1 + 2 + 3 on every rank
 * await Deno.remove(train);
 * ```
 *
 * @module
 */
import { fromWire } from "../core/wire_error.ts";
import { DistError } from "../core/errors.ts";
import { generateSecret } from "../store/secret.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { createInprocMesh } from "../transport/inproc.ts";
import type { ThreadReply, ThreadStart } from "./_thread_protocol.ts";

/**
 * What a thread's `main` receives besides its process group.
 *
 * @example A `main` that reads its `args` (called here on a world of one, as a test would)
 * ```ts
 * import { init, type ProcessGroup, type ThreadContext } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * async function main(pg: ProcessGroup, ctx: ThreadContext): Promise<number> {
 *   const { scale } = ctx.args as { scale: number };
 *   const x = new Float32Array([scale * (pg.rank + 1)]);
 *   await pg.allReduce(x);
 *   return x[0];
 * }
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * assert.equal(await main(pg, { args: { scale: 2 } }), 2);
 * ```
 */
export interface ThreadContext {
  /** The `args` given to {@linkcode spawnThreads}. */
  readonly args: unknown;
}

/**
 * Options of {@linkcode spawnThreads}.
 *
 * @example Two ranks, each handed the same `args`
 * ```ts
 * import { spawnThreads, type SpawnThreadsOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const rank = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(rank, `
 *   export const main = (pg: { size: number }, ctx: { args: unknown }) => [pg.size, ctx.args];
 * `);
 * const options: SpawnThreadsOptions = {
 *   worldSize: 2,
 *   args: { lr: 0.1 },
 *   timeoutMs: 10_000,
 *   init: { chunkBytes: 65536 }, // more options of every rank's init
 * };
 * const results = await spawnThreads(new URL(`file://${rank}`), options);
 * assert.deepEqual(results, [[2, { lr: 0.1 }], [2, { lr: 0.1 }]]);
 * await Deno.remove(rank);
 * ```
 */
export interface SpawnThreadsOptions {
  /** The number of ranks. */
  worldSize: number;
  /** A structured-cloneable value handed to every rank's `main`. @default undefined */
  args?: unknown;
  /** Timeout of every wait of the world (connecting and calls). @default 300000 */
  timeoutMs?: number;
  /** Capacity of each ring between two ranks, in bytes. @default 4194304 */
  ringBytes?: number;
  /** More options for every rank's `init` (checkCalls, chunkBytes…), structured-cloneable. @default {} */
  init?: Record<string, unknown>;
}

/**
 * Runs `module`'s exported `main(pg, context)` on `worldSize` threads, each a rank of one world.
 *
 * @param module The module's URL.
 * @param options The world's size and what each rank gets.
 * @returns Each rank's return value, by rank.
 * @throws {DistError | TypeError | RangeError | Error} Once every rank has ended, what the lowest rank that
 *   failed threw, as it threw it: the same class (a `MismatchError` is `instanceof MismatchError`, a
 *   `TypeError` a `TypeError`), code, fields and cause, its message prefixed with `Rank N failed: `.
 * @throws {DistError} If a rank's thread crashed outside `main` (`Rank N crashed: ...`).
 *
 * @example Two ranks take the maximum of their values
 * ```ts
 * import { spawnThreads } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const rank = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(rank, `
 *   import type { ProcessGroup, ThreadContext } from "@dcomm/dcomm";
 *   export async function main(pg: ProcessGroup, ctx: ThreadContext): Promise<number> {
 *     const x = new Float64Array([pg.rank * (ctx.args as number)]);
 *     await pg.allReduce(x, { op: "max" });
 *     return x[0];
 *   }
 * `);
 * assert.deepEqual(await spawnThreads(new URL(`file://${rank}`), { worldSize: 2, args: 10 }), [10, 10]);
 * await Deno.remove(rank);
 * ```
 *
 * @example A rank's error, rethrown as it was thrown
 * ```ts
 * import { spawnThreads } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const rank = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(rank, `export function main(pg: { rank: number }): number {
 *   if (pg.rank === 1) throw new RangeError("bad batch");
 *   return pg.rank;
 * }`);
 * const run = spawnThreads(new URL(`file://${rank}`), { worldSize: 2 });
 * await assert.rejects(run, { name: "RangeError", message: "Rank 1 failed: bad batch" });
 * await Deno.remove(rank);
 * ```
 */
export async function spawnThreads(module: URL | string, options: SpawnThreadsOptions): Promise<unknown[]> {
  const { worldSize } = options;
  if (!Number.isInteger(worldSize) || worldSize < 1) {
    throw new RangeError(`Invalid worldSize: expected an integer >= 1, found ${worldSize}`);
  }
  const secret = generateSecret();
  await using server = await TcpStoreServer.listen({ hostname: "127.0.0.1", port: 0, secret });
  const mesh = createInprocMesh(worldSize, { ringBytes: options.ringBytes });
  const url = String(module);
  const workers: Worker[] = [];
  const results = await Promise.allSettled(Array.from({ length: worldSize }, (_, rank) => {
    const worker = new Worker(new URL("./_thread_main.ts", import.meta.url), { type: "module" });
    workers.push(worker);
    const done = Promise.withResolvers<unknown>();
    worker.onmessage = (event: MessageEvent<ThreadReply>): void => {
      const reply = event.data;
      if (reply.ok) done.resolve(reply.value);
      else done.reject(prefixed(fromWire(reply.error), `Rank ${rank} failed: `));
    };
    worker.onerror = (event: ErrorEvent): void => {
      event.preventDefault();
      done.reject(new DistError(`Rank ${rank} crashed: ${event.message}`));
    };
    const start: ThreadStart = {
      module: url,
      rank,
      worldSize,
      port: server.port,
      secret,
      mesh,
      args: options.args,
      timeoutMs: options.timeoutMs ?? 300_000,
      init: options.init ?? {},
    };
    worker.postMessage(start);
    return done.promise.finally(() => worker.terminate());
  }));
  const failure = results.find((r) => r.status === "rejected");
  if (failure) throw (failure as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value);
}

// The rank's error with `prefix` before its message, in `stack`'s first line too (the stack is the rank
// thread's own, which says where it was thrown).
function prefixed(error: Error, prefix: string): Error {
  const head = `${error.name}: ${error.message}`;
  const stack = error.stack;
  // A data property of its own: a DOMException's message is a getter on its prototype.
  const set = (key: string, value: string): void => {
    Object.defineProperty(error, key, { value, writable: true, enumerable: false, configurable: true });
  };
  set("message", prefix + error.message);
  if (typeof stack === "string" && stack.startsWith(head)) {
    set("stack", `${error.name}: ${error.message}${stack.slice(head.length)}`);
  }
  return error;
}
