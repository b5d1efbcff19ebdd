/**
 * Top-k all-reduce with error feedback (Aji & Heafield 2017; Stich et al. 2018): each rank adds its
 * residual to its gradient, keeps the k elements of largest magnitude (indices and values) and leaves the
 * rest in the residual; the ranks all-gather their k pairs, and every rank sums them into a zeroed tensor
 * in rank order (scatter-add; an index chosen by several ranks adds up), then divides by n for an average.
 *
 * Bytes each rank hands out: 8k (a 4-byte index and a float32 value each) to the all-gather, against the
 * 4m of a float32 all-reduce through the host segment: 50× fewer at k = m/100; over messages, a ring
 * all-gather sends 8k·(n−1) against the ring all-reduce's 8m·(n−1)/n (m/(n·k)× fewer).
 *
 * Error feedback, exactly (up to float32 rounding): the outputs of steps 1..T sum to the averages of the
 * gradients minus mean_i e_i after step T. Each step, element x is off the average of the ranks' g + e by
 * (1/n)·Σ over the ranks that did not pick x of |g + e|, each at most that rank's k-th largest magnitude.
 *
 * Cost ({@linkcode topKAllReduceCost}): the all-gather of 8k·n bytes (ring over messages), plus a
 * selection pass over m (O(m), a radix select) and the scatter-add of n·k pairs: γ_topk · m +
 * γ_scatter · n·k.
 *
 * @module
 */
import type { CompressedCall, CompressedContext, CompressedShape } from "./compressed_context.ts";
import { type CostConstants, ringAllGatherCost } from "../sim/cost_model.ts";

/**
 * Averages (or sums) `call.tensor` over the ranks from each rank's `call.k` largest elements, with error
 * feedback where `call.residual` is given.
 *
 * @param ctx The context.
 * @param call The call (`k`).
 */
export async function topKAllReduce(ctx: CompressedContext, call: CompressedCall): Promise<void> {
  const { size, kernels: kn } = ctx;
  const { tensor, k, residual } = call;
  const msg = 8 * k;
  const mine = ctx.scratch(msg), all = ctx.scratch(size * msg);
  const pairs = (from: Uint8Array, at: number): { indices: Uint32Array; values: Float32Array } => ({
    indices: new Uint32Array(from.buffer, from.byteOffset + at, k),
    values: new Float32Array(from.buffer, from.byteOffset + at + 4 * k, k),
  });
  const picked = pairs(mine, 0);
  if (residual !== undefined) {
    kn.axpy(residual, tensor); // residual = g + e: what this step selects from
    kn.topK(residual, k, picked);
    for (const i of picked.indices) residual[i] = 0; // sent exactly: the rest stays behind
  } else {
    kn.topK(tensor, k, picked);
  }
  await ctx.allGather(mine, all);
  tensor.fill(0);
  for (let i = 0; i < size; i++) kn.scatterAdd(tensor, pairs(all, i * msg));
  if (call.average) kn.divide(tensor, size);
}

/**
 * The top-k all-reduce's predicted seconds over messages: a ring all-gather of every rank's k pairs, plus
 * `computeSeconds` (selection and scatter-add, measured: `bench/compress.ts`).
 *
 * @param shape The call.
 * @param constants The network's α, β.
 * @param computeSeconds The kernels' time on one rank.
 * @returns Seconds.
 */
export function topKAllReduceCost(
  shape: CompressedShape,
  constants: CostConstants,
  computeSeconds = 0,
): number {
  const k = shape.k ?? Math.max(1, Math.round(shape.count / 100));
  return ringAllGatherCost({ size: shape.size, bytes: shape.size * 8 * k }, constants) + computeSeconds;
}
