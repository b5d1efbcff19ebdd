/**
 * Ordered reduce-scatter, the deterministic mode's: every rank's block r goes straight to rank r, which
 * folds the n contributions in rank order (0, 1, …, n−1) with `ctx.reduceMany`, the fold the host
 * segment's plans make, so the result's bits depend only on the inputs: not on the algorithm, the chunk
 * size, the transport, the order messages arrive in or the hosts.
 *
 * Steps: rank r sends block q of its input to rank q for every q ≠ r (in chunks of at most
 * `ctx.chunkBytes`, starting with rank r + 1), and receives block r of every other rank's input, reducing
 * chunk c of its output from the n chunks c once all have arrived (its own from its input). Uneven blocks
 * (the v-form) go the same way.
 *
 * Bytes each rank sends: (n−1)·b = (n−1)/n·m, b the output bytes, m = n·b the input bytes; it reduces as
 * much.
 *
 * Cost (sim/cost_model.ts `ringReduceScatterCost`, the same bytes and messages; m = input bytes),
 * k = ⌈m/(n·chunkBytes)⌉:
 *   T = (n−1)·(k·α + (m/n)·β + (m/n)·γ)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { checkedBlocks } from "./_checks.ts";
import { blockOf, type Blocks } from "./_blocks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/**
 * Reduces block r of every rank's `input` into rank r's `output`, folding in rank order.
 *
 * @param ctx The group's context; every rank calls with the same lengths.
 * @param input n blocks, unchanged.
 * @param output One block: the fold over ranks of every rank's block r, on rank r.
 * @param layout Uneven blocks (the v-form, `counts`), in bytes; equal blocks of the output's size if omitted.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If `input` is not n × `output` bytes or either is not whole elements.
 */
export async function orderedReduceScatter(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
): Promise<void> {
  const blocks = checkedBlocks(
    ctx,
    "reduce-scatter",
    output,
    input,
    { block: "output", whole: "input" },
    layout,
  );
  await orderedReduceScatterPlan(ctx, input, output, blocks).run();
}

/**
 * The plan of {@linkcode orderedReduceScatter} on checked buffers (the ordered all-reduce and reduce run
 * it first). `output` may be this rank's own block of `input`.
 *
 * @param ctx The context.
 * @param input n blocks.
 * @param output This rank's block of the result.
 * @param blocks Where each block lies, in bytes.
 * @returns The plan, not yet run.
 */
export function orderedReduceScatterPlan(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  blocks: Blocks,
): Plan {
  const { rank, size } = ctx.comm;
  const plan = new Plan(ctx);
  for (let s = 1; s < size; s++) {
    const q = mod(rank + s, size);
    for (const chunk of chunks(ctx, blockOf(input, blocks, q))) plan.send(q, chunk);
  }
  // The fold's own source is a copy where it is also the output (the all-reduce folds in place).
  let mine = blockOf(input, blocks, rank);
  if (size > 1 && mine.buffer === output.buffer && mine.byteOffset === output.byteOffset) {
    mine = ctx.scratch(mine.length);
    mine.set(output);
  }
  const own = chunks(ctx, mine);
  chunks(ctx, output).forEach((dst, c) => {
    plan.recvReduceMany(dst, Array.from({ length: size }, (_, r) => r === rank ? own[c] : r));
  });
  if (size === 1) output.set(blockOf(input, blocks, rank));
  return plan;
}
