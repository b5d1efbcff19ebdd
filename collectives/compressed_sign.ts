/**
 * 1-bit all-reduce with error feedback on both sides (DeepSpeed's two-phase compressed all-reduce of
 * 1-bit Adam; Seide et al.'s 1-bit SGD): the tensor is cut into one chunk per rank; each rank adds its
 * residual to its gradient, sends the signs of the sum with one mean-|x| scale per block (the residual
 * keeps what the signs lost), chunk j to rank j (all-to-all); rank j, the "server" of chunk j, decodes the
 * n contributions, sums them in rank order, divides by n for an average, adds its own server residual,
 * compresses again (its residual keeps what that lost) and all-gathers; every rank decodes the n chunks.
 *
 * Bytes each rank hands out, for m float32 elements and blocks of B: the all-to-all m·(1/8 + 4/B), the
 * all-gather m/n·(1/8 + 4/B): 25× fewer than the 4m of a float32 all-reduce through the host segment at
 * B = 256 on 4 ranks; over messages 2m·(1/8 + 4/B)·(n−1)/n against a ring's 8m·(n−1)/n.
 *
 * What error feedback guarantees (exactly, up to float32 rounding), with worker residuals e_i and the
 * server residuals s (e_i = s = 0 before the first step): the outputs of steps 1..T sum to the averages of
 * the gradients of steps 1..T minus (mean_i e_i + s) after step T. Without it (no residual arrays), each
 * step's loss is forgotten.
 *
 * Cost ({@linkcode signAllReduceCost}): the all-to-all and all-gather of those bytes (pairwise and ring
 * over messages), plus the codec's passes over the elements: compress m, decode the n contributions to a chunk (m/n each), compress the chunk, decode
 * m: γ_sign · m · (3 + 1/n).
 *
 * @module
 */
import {
  chunkBounds,
  chunkElements,
  type CompressedCall,
  type CompressedContext,
  type CompressedShape,
  floats,
  lcm,
} from "./_compressed.ts";
import { type CostConstants, pairwiseAllToAllCost, ringAllGatherCost } from "../sim/cost_model.ts";

/**
 * Averages (or sums) `call.tensor` over the ranks as signs and scales, with error feedback where
 * `call.residual` and `call.serverResidual` are given.
 *
 * @param ctx The context.
 * @param call The call (`blockSize`, a multiple of 8 keeps chunks byte-aligned).
 */
export async function signAllReduce(ctx: CompressedContext, call: CompressedCall): Promise<void> {
  const { size, rank, kernels: k } = ctx;
  const { tensor, blockSize } = call;
  const count = tensor.length;
  // Chunks start on a byte of bits, and their scales on 4 bytes.
  const chunk = chunkElements(count, size, lcm(blockSize, 32));
  const bitBytes = chunk / 8;
  const msg = bitBytes + 4 * (chunk / blockSize);
  const pack = (into: Uint8Array, at: number, src: Float32Array, residual: Float32Array): void => {
    if (src.length === 0) return;
    k.signCompress(src, residual, {
      blockSize,
      bits: new Uint8Array(into.buffer, into.byteOffset + at, Math.ceil(src.length / 8)),
      scales: floats(into, at + bitBytes, Math.ceil(src.length / blockSize)),
    });
  };
  const unpack = (from: Uint8Array, at: number, dst: Float32Array, accumulate: boolean): void => {
    if (dst.length === 0) return;
    k.signDecompress(
      {
        bits: new Uint8Array(from.buffer, from.byteOffset + at, Math.ceil(dst.length / 8)),
        scales: floats(from, at + bitBytes, Math.ceil(dst.length / blockSize)),
      },
      dst,
      { blockSize, accumulate },
    );
  };

  // Without error feedback, a zero residual every step: nothing carries over.
  const residual = call.residual ?? floats(ctx.scratch(4 * count), 0, count);
  const send = ctx.scratch(size * msg), recv = ctx.scratch(size * msg);
  for (let j = 0; j < size; j++) {
    const [lo, hi] = chunkBounds(j, chunk, count);
    pack(send, j * msg, tensor.subarray(lo, hi), residual.subarray(lo, hi));
  }
  await ctx.allToAll(send, recv);

  const [lo, hi] = chunkBounds(rank, chunk, count);
  const sum = floats(ctx.scratch(4 * chunk), 0, hi - lo);
  for (let i = 0; i < size; i++) unpack(recv, i * msg, sum, true);
  if (call.average) k.divide(sum, size);
  const server = call.serverResidual?.subarray(lo, hi) ?? floats(ctx.scratch(4 * chunk), 0, hi - lo);
  const mine = ctx.scratch(msg), all = ctx.scratch(size * msg);
  pack(mine, 0, sum, server);
  await ctx.allGather(mine, all);
  for (let j = 0; j < size; j++) {
    const [a, b] = chunkBounds(j, chunk, count);
    unpack(all, j * msg, tensor.subarray(a, b), false);
  }
}

/**
 * The 1-bit all-reduce's predicted seconds over messages: a pairwise all-to-all and a ring all-gather of
 * the packed chunks, plus `computeSeconds` (the codec's passes, measured: `bench/compress.ts`).
 *
 * @param shape The call.
 * @param constants The network's α, β.
 * @param computeSeconds The kernels' time on one rank.
 * @returns Seconds.
 */
export function signAllReduceCost(
  shape: CompressedShape,
  constants: CostConstants,
  computeSeconds = 0,
): number {
  const b = shape.blockSize ?? 256, n = shape.size;
  const chunk = chunkElements(shape.count, n, lcm(b, 32));
  const msg = chunk / 8 + 4 * (chunk / b);
  const noReduce = { ...constants, gamma: 0 };
  return pairwiseAllToAllCost({ size: n, bytes: n * msg }, noReduce) +
    ringAllGatherCost({ size: n, bytes: n * msg }, noReduce) + computeSeconds;
}
