/**
 * Ring all-gather.
 *
 * Steps: rank r copies its input into block r of the output; then for t = 0..n−2 it sends block (r − t)
 * to its right neighbour and receives block (r − t − 1) from its left. Blocks move in chunks of at most
 * `ctx.chunkBytes`, and chunk c is forwarded as soon as it arrives, so the ring is a pipeline.
 *
 * Uneven blocks (the all-gather-v) take the same steps, each block its own length.
 *
 * Bytes each rank sends: (n−1)·b, with b the input bytes and m = n·b the output bytes: (n−1)/n·m.
 *
 * Cost (sim/cost_model.ts `ringAllGatherCost`, m = output bytes), k = ⌈m/(n·chunkBytes)⌉:
 *   T = (n−1)·k·α + (n−1)/n·m·β
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { checkedBlocks } from "./_checks.ts";
import { blockOf, type Blocks } from "./_blocks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Gathers every rank's `input` into every rank's `output` around the ring.
 *
 * @param ctx The group's context; every rank calls with the same lengths.
 * @param input This rank's block.
 * @param output n blocks; block r receives rank r's input.
 * @param layout Uneven blocks (the v-form, `counts`), in bytes; equal blocks of the input's size if omitted.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If `output` is not n × `input` bytes or either is not whole elements.
 */
export async function ringAllGather(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
): Promise<void> {
  const { rank, size } = ctx.comm;
  const blocks = checkedBlocks(ctx, "all-gather", input, output, { block: "input", whole: "output" }, layout);
  blockOf(output, blocks, rank).set(input);
  if (size === 1 || blocks.total === 0) return;
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const block = (i: number): Uint8Array[] => chunks(ctx, blockOf(output, blocks, i));
  const plan = new Plan(ctx);
  let arrived: Step[] = [];
  for (let t = 0; t < size - 1; t++) {
    const prev = arrived;
    block(mod(rank - t, size)).forEach((chunk, c) =>
      plan.send(right, chunk, { after: t > 0 ? [prev[c]] : [] })
    );
    arrived = block(mod(rank - t - 1, size)).map((chunk) => plan.recv(left, chunk));
  }
  await plan.run();
}
