/**
 * Reduce-scatter by recursive halving (MPICH's), for any world size.
 *
 * Steps: let p be the largest power of two ≤ n and q = n − p. Fold: among ranks 0..2q−1 each even rank
 * sends its whole input to the odd rank above it, which reduces it and stands for both. The p active
 * ranks (virtual ranks v) own groups of consecutive blocks: v < q owns blocks 2v and 2v+1 (its own and its
 * even partner's), v ≥ q owns block v + q. Halving: for mask = p/2 … 1, v and v ^ mask split the range
 * of groups they share; each sends the half the other keeps and reduces the half it keeps, so that v ends
 * with its group reduced. Unfold: each odd rank below 2q sends block 2v to the even rank it stood for.
 * Every message moves in chunks of at most `ctx.chunkBytes`; each round waits for the one before. The
 * input is never written; partial sums live in a scratch copy of the input's size.
 *
 * Bytes each active rank sends: ≈ (p−1)/p·m (halves of group ranges, m the input bytes), plus b = m/n
 * for the unfold on odd ranks below 2q; each folded-away rank sends m. Reduced: ≈ (p−1)/p·m, plus m on
 * the odd ranks below 2q.
 *
 * Cost (sim/cost_model.ts `halvingReduceScatterCost`, m = input bytes), m_i = m/2^i, k(x) = ⌈x/chunkBytes⌉,
 * L = log2 p:
 *   T = Σ_{i=1..L} [k(m_i)·α + m_i·β + m_i·γ]  +  [q > 0]·(k(m)·α + m·β + m·γ + k(m/n)·α + (m/n)·β)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, floorPow2 } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Reduces block r of every rank's `input` into rank r's `output` by recursive halving.
 *
 * @param ctx The group's context; every rank calls with the same lengths.
 * @param input n blocks, unchanged.
 * @param output One block: the reduction of every rank's block r, on rank r.
 * @returns When this rank's output is complete.
 * @throws {RangeError} If `input` is not n × `output` bytes or either is not whole elements.
 */
export async function halvingReduceScatter(
  ctx: CollectiveContext,
  input: Uint8Array,
  output: Uint8Array,
): Promise<void> {
  argChecks(ctx, "reduce-scatter").blocks(output, input, { block: "output", whole: "input" });
  const { rank, size } = ctx.comm;
  const b = output.length;
  if (size === 1 || b === 0) {
    output.set(input.subarray(0, b));
    return;
  }
  const p = floorPow2(size);
  const q = size - p;
  const plan = new Plan(ctx);
  if (rank < 2 * q && rank % 2 === 0) {
    for (const chunk of chunks(ctx, input)) plan.send(rank + 1, chunk);
    for (const chunk of chunks(ctx, output)) plan.recv(rank + 1, chunk);
    await plan.run();
    return;
  }
  const acc = ctx.scratch(input.length);
  let stage: Step = plan.join([]);
  // Where the running sums are read from: the input until the first reduction has written `acc`.
  let src = input;
  if (rank < 2 * q) {
    const bases = chunks(ctx, input);
    stage = plan.join(
      chunks(ctx, acc).map((chunk, c) => plan.recvReduce(rank - 1, chunk, { base: bases[c] })),
    );
    src = acc;
  }
  const v = rank < 2 * q ? rank >> 1 : rank - q;
  const real = (u: number): number => u < q ? 2 * u + 1 : u + q;
  /** Byte offset of the first block of virtual rank u's group (u = p gives the end). */
  const start = (u: number): number => (u < q ? 2 * u : u + q) * b;

  for (let mask = p >> 1; mask >= 1; mask >>= 1) {
    const peer = real(v ^ mask);
    const lo = v & ~(2 * mask - 1);
    const [keep, give] = v & mask ? [lo + mask, lo] : [lo, lo + mask];
    const after = [stage];
    const bases = chunks(ctx, src.subarray(start(keep), start(keep + mask)));
    const first = src === input;
    stage = plan.join([
      ...chunks(ctx, src.subarray(start(give), start(give + mask))).map((c) => plan.send(peer, c, { after })),
      ...chunks(ctx, acc.subarray(start(keep), start(keep + mask))).map((chunk, c) =>
        plan.recvReduce(peer, chunk, { after, base: first ? bases[c] : undefined })
      ),
    ]);
    src = acc;
  }
  // This rank's block is complete in `acc`; below 2q the even partner's block is too.
  const own = rank * b;
  if (rank < 2 * q) {
    for (const chunk of chunks(ctx, acc.subarray(own - b, own))) {
      plan.send(rank - 1, chunk, { after: [stage] });
    }
  }
  await plan.run();
  output.set(acc.subarray(own, own + b));
}
