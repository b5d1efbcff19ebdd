/**
 * Pairwise-exchange all-to-all (MPICH's long-message all-to-all).
 *
 * Steps: rank r copies block r of its input to block r of its output. Then in step s = 1..n−1 it sends
 * input block `to` to rank `to` and receives output block `from` from rank `from`, where to = from = r ^ s
 * when n is a power of two (each step pairs the ranks off) and to = (r + s) mod n, from = (r − s) mod n
 * otherwise. Each step waits for the one before, so a rank talks to one peer at a time each way. Blocks
 * move in chunks of at most `ctx.chunkBytes`.
 *
 * Bytes each rank sends: (n−1)·b = (n−1)/n·m, b the block bytes, m = n·b the input bytes.
 *
 * Cost (sim/cost_model.ts `pairwiseAllToAllCost`, m = input bytes), k = ⌈m/(n·chunkBytes)⌉:
 *   T = (n−1)·(k·α + (m/n)·β)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { blockOf, type Blocks, checkBlocksFit, equalBlocks } from "./_blocks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Sends block j of this rank's `input` to rank j, which stores it as block r of its `output`.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param input n equal blocks, block j for rank j.
 * @param output n equal blocks, block i from rank i.
 * @param layout Uneven blocks (the v-form: `sendCounts`, `recvCounts`), in bytes: the input's, block j for
 *   rank j, and the output's, block i from rank i; equal blocks if omitted.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If the lengths differ, are not whole elements, or do not split into n blocks.
 */
export async function pairwiseAllToAll(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
  layout?: { readonly send: Blocks; readonly recv: Blocks },
): Promise<void> {
  const check = argChecks(ctx, "all-to-all");
  const { rank, size } = ctx.comm;
  let send: Blocks, recv: Blocks;
  if (layout === undefined) {
    if (input.length !== output.length || input.length % size !== 0) {
      throw new RangeError(
        `Cannot all-to-all: expected input and output of equal length divisible by ${size}, ` +
          `found ${input.length} and ${output.length}`,
      );
    }
    const b = input.length / size;
    check.blocks(input.subarray(0, b), input, { block: "block", whole: "input" });
    send = recv = equalBlocks(size, b);
  } else {
    ({ send, recv } = layout);
    checkBlocksFit("all-to-all", "input", input, send);
    checkBlocksFit("all-to-all", "output", output, recv);
    if (send.lengths[rank] !== recv.lengths[rank]) {
      throw new RangeError(
        `Cannot all-to-all: this rank sends itself ${send.lengths[rank]} bytes but receives ` +
          `${recv.lengths[rank]} from itself`,
      );
    }
  }
  blockOf(output, recv, rank).set(blockOf(input, send, rank));
  // (Uneven blocks go on even when this rank has nothing to move: its peers may.)
  if (size === 1 || (layout === undefined && send.total === 0)) return;
  const pow2 = (size & (size - 1)) === 0;
  const plan = new Plan(ctx);
  let stage: Step = plan.join([]);
  for (let s = 1; s < size; s++) {
    const to = pow2 ? rank ^ s : mod(rank + s, size);
    const from = pow2 ? rank ^ s : mod(rank - s, size);
    const after = [stage];
    stage = plan.join([
      ...chunks(ctx, blockOf(input, send, to)).map((chunk) => plan.send(to, chunk, { after })),
      ...chunks(ctx, blockOf(output, recv, from)).map((chunk) => plan.recv(from, chunk, { after })),
    ]);
  }
  await plan.run();
}
