/**
 * From a call to an algorithm: the name `"auto"` resolves through the cost model with the transport's
 * constants, and each collective's registry runs the chosen one on the call's buffers.
 *
 * @module
 */
import {
  ALGORITHMS,
  ALL_GATHER_ALGORITHMS,
  ALL_REDUCE_ALGORITHMS,
  ALL_TO_ALL_ALGORITHMS,
  BARRIER_ALGORITHMS,
  blocksOf,
  BROADCAST_ALGORITHMS,
  chooseAlgorithm,
  GATHER_ALGORITHMS,
  REDUCE_ALGORITHMS,
  REDUCE_SCATTER_ALGORITHMS,
  SCATTER_ALGORITHMS,
  UNEVEN_ALGORITHMS,
} from "../../collectives/mod.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { VERB } from "../_front.ts";
import type { CollectiveContext } from "../../collectives/comm.ts";
import { type CostConstants, DEFAULT_CONSTANTS, type TransportKind } from "../../sim/cost_model.ts";
import type { Collective, OpRequest } from "./_protocol.ts";

/** Every algorithm name of every collective, once, in a fixed order: their descriptor codes. */
export const ALGORITHM_NAMES: readonly string[] = [...new Set(Object.values(ALGORITHMS).flat())];

/**
 * Checks that an algorithm runs a collective's v-form (uneven `counts`).
 *
 * @throws {UnsupportedError} If it does not.
 */
export function checkUneven(collective: Collective, name: string): void {
  if (name === "auto") return;
  const names = UNEVEN_ALGORITHMS[collective as keyof typeof UNEVEN_ALGORITHMS] ?? [];
  if (!names.includes(name)) {
    throw new UnsupportedError(
      `Cannot ${VERB[collective]} with uneven counts by algorithm "${name}": expected "auto" or one of ${
        names.map((n) => `"${n}"`).join(", ") || "none"
      }`,
    );
  }
}

/**
 * Checks an algorithm name for a collective.
 *
 * @throws {TypeError} If the collective has no algorithm of that name.
 */
export function checkAlgorithm(collective: Collective, name: string): void {
  if (name === "auto" || collective === "send" || collective === "recv") return;
  const names = ALGORITHMS[collective] as readonly string[];
  if (!names.includes(name)) {
    throw new TypeError(
      `Unknown ${collective} algorithm: expected "auto" or one of ${
        names.map((n) => `"${n}"`).join(", ")
      }, ` +
        `found "${name}"`,
    );
  }
}

/**
 * The algorithm a call runs: its own choice, or the cost model's for `"auto"`.
 *
 * @param collective The collective.
 * @param name The name asked for.
 * @param shape The call's bytes (as the cost model counts them), group size and transport.
 * @returns The name (`""` for send/recv).
 */
export function resolveAlgorithm(
  collective: Collective,
  name: string,
  shape: {
    bytes: number;
    size: number;
    transport: string;
    chunkBytes: number;
    servers?: number;
    segment?: boolean;
    hosts?: readonly number[];
    uneven?: boolean;
    deterministic?: boolean;
  },
): string {
  if (collective === "send" || collective === "recv") return "";
  checkAlgorithm(collective, name);
  if (shape.uneven) checkUneven(collective, name);
  if (name !== "auto") return name;
  // The segment is the choice wherever it is available (`runsOnSegment`, collectives/mod.ts). Between
  // hosts, TCP's constants; within them, shared memory's where the transport has it.
  const table = constantsTable();
  const constants = table[shape.transport as TransportKind] ?? table.tcp;
  const intra = shape.transport === "shm+tcp" ? table.shm : constants;
  return chooseAlgorithm(collective, { ...shape, constants, intra });
}

let table: Readonly<Record<TransportKind, CostConstants>> | undefined;

/**
 * The constants `"auto"` prices with: the measured ones (`sim/measured.ts`), or those of
 * `DCOMM_COST_MODEL`, a JSON object of `{ "tcp": { "alpha": s, "beta": s/B, "gamma": s/B }, "shm": ... }`
 * (what `bench:calibrate` fitted on the machines at hand, e.g. `bench/network.ts`'s emulated links), every
 * rank the same.
 */
export function constantsTable(): Readonly<Record<TransportKind, CostConstants>> {
  if (table !== undefined) return table;
  let text: string | undefined;
  try {
    text = Deno.env.get("DCOMM_COST_MODEL");
  } catch {
    text = undefined; // no --allow-env: the measured constants
  }
  table = DEFAULT_CONSTANTS;
  if (text) {
    let given: Partial<Record<TransportKind, CostConstants>>;
    try {
      given = JSON.parse(text);
    } catch (e) {
      throw new TypeError(
        `Invalid DCOMM_COST_MODEL: expected JSON, found ${JSON.stringify(text.slice(0, 80))}`,
        {
          cause: e,
        },
      );
    }
    const merged = { ...DEFAULT_CONSTANTS };
    for (const [kind, k] of Object.entries(given) as [TransportKind, CostConstants][]) {
      if (
        !["tcp", "shm", "inproc"].includes(kind) ||
        ![k?.alpha, k?.beta, k?.gamma].every((v) => typeof v === "number" && v >= 0)
      ) {
        throw new TypeError(
          `Invalid DCOMM_COST_MODEL: expected { tcp | shm | inproc: { alpha, beta, gamma } } with numbers >= 0, ` +
            `found ${JSON.stringify({ [kind]: k })}`,
        );
      }
      merged[kind] = k;
    }
    table = merged;
  }
  return table;
}

/**
 * Bytes of a call as the cost model counts them (the whole n-block buffer for block collectives; a
 * gather's and a scatter's count is one rank's block).
 */
export function modelBytes(op: OpRequest, elemSize: number, size: number): number {
  const bytes = op.count * elemSize;
  if (op.counts !== undefined) return bytes;
  return op.collective === "allGather" || op.collective === "gather" || op.collective === "scatter"
    ? bytes * size
    : bytes;
}

/**
 * Runs the chosen algorithm of a call on its buffers.
 *
 * @param ctx The context.
 * @param op The call.
 * @param algorithm The resolved name.
 * @param buffers The call's input (or in-place tensor) and output.
 */
export async function runAlgorithm(
  ctx: CollectiveContext,
  op: OpRequest,
  algorithm: string,
  buffers: { input?: Uint8Array; output?: Uint8Array },
): Promise<void> {
  const { input, output } = buffers;
  const need = (b: Uint8Array | undefined, what: string): Uint8Array => {
    if (!b) throw new TypeError(`A ${op.collective} call needs ${what}`);
    return b;
  };
  // A v-form's blocks, in bytes.
  const layout = op.counts === undefined ? undefined : blocksOf(op.counts, ctx.elemSize);
  switch (op.collective) {
    case "allReduce":
      return await ALL_REDUCE_ALGORITHMS[algorithm as keyof typeof ALL_REDUCE_ALGORITHMS](
        ctx,
        need(input, "a tensor"),
        op.servers === undefined ? undefined : { servers: op.servers },
      );
    case "broadcast":
      return await BROADCAST_ALGORITHMS[algorithm as keyof typeof BROADCAST_ALGORITHMS](
        ctx,
        need(input, "a tensor"),
        op.root,
      );
    case "reduce":
      return await REDUCE_ALGORITHMS[algorithm as keyof typeof REDUCE_ALGORITHMS](
        ctx,
        need(input, "a tensor"),
        op.root,
      );
    case "allGather":
      return await ALL_GATHER_ALGORITHMS[algorithm as keyof typeof ALL_GATHER_ALGORITHMS](
        ctx,
        need(input, "an input"),
        need(output, "an output"),
        layout,
      );
    case "reduceScatter":
      return await REDUCE_SCATTER_ALGORITHMS[algorithm as keyof typeof REDUCE_SCATTER_ALGORITHMS](
        ctx,
        need(input, "an input"),
        need(output, "an output"),
        layout,
      );
    case "allToAll":
      return await ALL_TO_ALL_ALGORITHMS[algorithm as keyof typeof ALL_TO_ALL_ALGORITHMS](
        ctx,
        need(input, "an input"),
        need(output, "an output"),
        layout && { send: layout, recv: blocksOf(op.recvCounts ?? op.counts ?? [], ctx.elemSize) },
      );
    case "barrier":
      return await BARRIER_ALGORITHMS[algorithm as keyof typeof BARRIER_ALGORITHMS](ctx);
    case "gather":
      return await GATHER_ALGORITHMS[algorithm as keyof typeof GATHER_ALGORITHMS](
        ctx,
        need(input, "an input"),
        output,
        op.root,
        layout,
      );
    case "scatter":
      return await SCATTER_ALGORITHMS[algorithm as keyof typeof SCATTER_ALGORITHMS](
        ctx,
        input,
        need(output, "an output"),
        op.root,
        layout,
      );
    case "send":
      return await ctx.comm.send(op.root, need(input, "a tensor"));
    case "recv":
      return await ctx.comm.recv(op.root, need(output, "a tensor"));
  }
}
