/**
 * Logarithmic all-gather: recursive doubling when n is a power of two, Bruck's algorithm otherwise.
 *
 * Steps (recursive doubling): rank r copies its input into block r of the output; for mask = 1, 2, …,
 * n/2 it swaps the aligned group of `mask` blocks it holds with rank r ^ mask, doubling what it holds.
 *
 * Steps (Bruck): for d = 1, 2, 4, … < n, rank r sends blocks r, r+1, …, r+cnt−1 (mod n), cnt = min(d,
 * n − d), to rank r − d, and receives blocks r+d, …, r+d+cnt−1 from rank r + d. Blocks are written straight
 * into their final place in the output (a range that wraps past the end travels as two messages), so the
 * final rotation of the textbook algorithm is not needed.
 *
 * Every message moves in chunks of at most `ctx.chunkBytes`; each round waits for the one before.
 *
 * Bytes each rank sends: (n−1)·b = (n−1)/n·m, b the input bytes, m = n·b the output bytes.
 *
 * Cost (sim/cost_model.ts `recursiveDoublingAllGatherCost`, m = output bytes), rounds i = 0..⌈log2 n⌉−1
 * each moving cnt_i = min(2^i, n − 2^i) blocks, k(x) = ⌈x/chunkBytes⌉:
 *   T = Σ_i k(cnt_i·b)·α + (n−1)/n·m·β
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Gathers every rank's `input` into every rank's `output` in ⌈log2 n⌉ rounds.
 *
 * @param ctx The group's context; every rank calls with the same lengths.
 * @param input This rank's block.
 * @param output n blocks; block r receives rank r's input.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If `output` is not n × `input` bytes or either is not whole elements.
 */
export async function recursiveDoublingAllGather(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
): Promise<void> {
  argChecks(ctx, "all-gather").blocks(input, output, { block: "input", whole: "output" });
  const { rank, size } = ctx.comm;
  const b = input.length;
  output.set(input, rank * b);
  if (size === 1 || b === 0) return;
  /** Chunks of blocks [first, first + count) mod n, split where the range wraps. */
  const blocks = (first: number, count: number): Uint8Array[] => {
    const end = first + count;
    const pieces = end <= size
      ? [output.subarray(first * b, end * b)]
      : [output.subarray(first * b), output.subarray(0, (end - size) * b)];
    return pieces.flatMap((piece) => chunks(ctx, piece));
  };
  const plan = new Plan(ctx);
  let held: Step = plan.join([]);
  const pow2 = (size & (size - 1)) === 0;
  for (let d = 1; d < size; d *= 2) {
    const after = [held];
    const [to, from, mine, theirs, count] = pow2
      ? [rank ^ d, rank ^ d, rank & ~(d - 1), (rank ^ d) & ~(d - 1), d]
      : [mod(rank - d, size), mod(rank + d, size), rank, mod(rank + d, size), Math.min(d, size - d)];
    held = plan.join([
      held,
      ...blocks(mine, count).map((chunk) => plan.send(to, chunk, { after })),
      ...blocks(theirs, count).map((chunk) => plan.recv(from, chunk)),
    ]);
  }
  await plan.run();
}
