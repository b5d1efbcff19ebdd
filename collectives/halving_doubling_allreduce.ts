/**
 * Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by recursive
 * doubling (MPICH's and Gloo's halving-doubling), for any world size.
 *
 * Steps: let p be the largest power of two ≤ n and q = n − p. Fold: among ranks 0..2q−1 each even rank
 * sends its whole buffer to the odd rank above it, which reduces it and stands for both; the other ranks
 * stand for themselves. The p active ranks (virtual ranks v) cut the buffer into p segments. Halving: for
 * mask = p/2 … 1, v and v ^ mask split the range they share, each sends the half the other keeps and
 * reduces the half it keeps; afterwards v holds segment v reduced. Doubling: for mask = 1 … p/2, v and
 * v ^ mask swap what they hold, doubling it. Unfold: each odd rank below 2q sends the result to the even
 * rank it stood for. Every message moves in chunks of at most `ctx.chunkBytes`; each round waits for the
 * previous one.
 *
 * Bytes each active rank sends: 2·(p−1)/p·m, plus m for the unfold on odd ranks below 2q; each folded-away
 * rank sends m. Reduced: (p−1)/p·m, plus m on the odd ranks below 2q.
 *
 * Cost (sim/cost_model.ts `halvingDoublingAllReduceCost`), m_i = m/2^i, k(b) = ⌈b/chunkBytes⌉, L = log2 p:
 *   T = Σ_{i=1..L} [2·k(m_i)·α + 2·m_i·β + m_i·γ]  +  [q > 0]·(2·k(m)·α + 2·m·β + m·γ)
 *     = 2·Σ k(m_i)·α + 2·(p−1)/p·m·β + (p−1)/p·m·γ  (+ the fold and unfold when n is not a power of two)
 *
 * Each segment is reduced once and then copied, so all ranks end with the same bits.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, floorPow2, partition } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * All-reduces `buf` in place by recursive halving and doubling.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function halvingDoublingAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const p = floorPow2(size);
  const q = size - p;
  const plan = new Plan(ctx);
  if (rank < 2 * q && rank % 2 === 0) {
    // Folded away: hand the contribution over, then wait for the answer (written only once ours is gone).
    const gone = plan.join(chunks(ctx, buf).map((chunk) => plan.send(rank + 1, chunk)));
    for (const chunk of chunks(ctx, buf)) plan.recv(rank + 1, chunk, { after: [gone] });
    await plan.run();
    return;
  }
  let stage: Step = plan.join([]);
  if (rank < 2 * q) stage = plan.join(chunks(ctx, buf).map((chunk) => plan.recvReduce(rank - 1, chunk)));
  const v = rank < 2 * q ? rank >> 1 : rank - q;
  const real = (u: number): number => u < q ? 2 * u + 1 : u + q;
  const seg = partition(buf.length, { parts: p, elemSize: ctx.elemSize });
  const range = (lo: number, hi: number): Uint8Array[] => chunks(ctx, buf.subarray(seg[lo], seg[hi]));

  for (let mask = p >> 1; mask >= 1; mask >>= 1) {
    const peer = real(v ^ mask);
    const lo = v & ~(2 * mask - 1);
    const [keep, give] = v & mask ? [lo + mask, lo] : [lo, lo + mask];
    const after = [stage];
    stage = plan.join([
      ...range(give, give + mask).map((chunk) => plan.send(peer, chunk, { after })),
      ...range(keep, keep + mask).map((chunk) => plan.recvReduce(peer, chunk, { after })),
    ]);
  }
  for (let mask = 1; mask < p; mask <<= 1) {
    const peer = real(v ^ mask);
    const mine = v & ~(mask - 1);
    const theirs = (v ^ mask) & ~(mask - 1);
    // `stage` also covers the halving send of `theirs`, which must leave before it is overwritten.
    const after = [stage];
    stage = plan.join([
      ...range(mine, mine + mask).map((chunk) => plan.send(peer, chunk, { after })),
      ...range(theirs, theirs + mask).map((chunk) => plan.recv(peer, chunk, { after })),
    ]);
  }
  if (rank < 2 * q) { for (const chunk of chunks(ctx, buf)) plan.send(rank - 1, chunk, { after: [stage] }); }
  await plan.run();
}
