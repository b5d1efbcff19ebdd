/**
 * Ring reduce-scatter: the first half of the ring all-reduce, out of place.
 *
 * Steps: the input holds n blocks. For t = 0..n−2, rank r sends block (r − 1 − t), reduced so far, to its
 * right neighbour and receives block (r − 2 − t) from its left, which it reduces with its own input block;
 * after n − 1 steps the block it reduces is block r, complete, and it lands in the output. Blocks move in
 * chunks of at most `ctx.chunkBytes`, and chunk c leaves as soon as it is reduced (a pipeline). The input
 * is never written; partial blocks live in two scratch blocks used alternately.
 *
 * Bytes each rank sends: (n−1)·b = (n−1)/n·m, b the output bytes, m = n·b the input bytes; it reduces as
 * much.
 *
 * Cost (sim/cost_model.ts `ringReduceScatterCost`, m = input bytes), k = ⌈m/(n·chunkBytes)⌉:
 *   T = (n−1)·k·α + (n−1)/n·m·β + (n−1)/n·m·γ
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { checkedBlocks } from "./_checks.ts";
import { blockOf, type Blocks } from "./_blocks.ts";
import { chunks, EMPTY, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Reduces block r of every rank's `input` into rank r's `output`, around the ring.
 *
 * @param ctx The group's context; every rank calls with the same lengths.
 * @param input n blocks, unchanged.
 * @param output One block: the reduction of every rank's block r, on rank r.
 * @param layout Uneven blocks (the v-form, `counts`), in bytes; equal blocks of the output's size if omitted.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If `input` is not n × `output` bytes or either is not whole elements.
 */
export async function ringReduceScatter(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: Blocks,
): Promise<void> {
  const { rank, size } = ctx.comm;
  const blocks = checkedBlocks(
    ctx,
    "reduce-scatter",
    output,
    input,
    { block: "output", whole: "input" },
    layout,
  );
  if (size === 1 || blocks.total === 0) {
    output.set(blockOf(input, blocks, rank));
    return;
  }
  const right = mod(rank + 1, size);
  const left = mod(rank - 1, size);
  const inputBlock = (i: number): Uint8Array[] => chunks(ctx, blockOf(input, blocks, i));
  // Two scratch blocks used alternately, each as large as the largest block.
  const b = Math.max(...blocks.lengths);
  const work = size > 2 ? ctx.scratch(2 * b) : EMPTY;
  const plan = new Plan(ctx);
  let reduced: Uint8Array[] = inputBlock(mod(rank - 1, size));
  let arrived: Step[] = [];
  let sentFromWork: Step[] = [];
  for (let t = 0; t < size - 1; t++) {
    const prev = arrived;
    const sends = reduced.map((chunk, c) => plan.send(right, chunk, { after: t > 0 ? [prev[c]] : [] }));
    const last = t === size - 2;
    const length = blocks.lengths[mod(rank - 2 - t, size)];
    const target = last ? output : work.subarray((t % 2) * b, (t % 2) * b + length);
    const bases = inputBlock(mod(rank - 2 - t, size));
    const dst = chunks(ctx, target);
    // This scratch block was filled two steps ago and sent in the previous step: that send goes first.
    const gone = last ? [] : sentFromWork;
    arrived = dst.map((chunk, c) =>
      plan.recvReduce(left, chunk, { base: bases[c], after: gone.length > 0 ? [gone[c]] : [] })
    );
    sentFromWork = t > 0 ? sends : [];
    reduced = dst;
  }
  await plan.run();
}
