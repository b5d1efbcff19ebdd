/**
 * Int8 all-reduce with block scales, in two phases (as a reduce-scatter then an all-gather of quantised
 * blocks): the tensor is cut into one chunk per rank (a multiple of the block size); each rank quantises
 * every chunk (int8, one absmax/127 float32 scale per block) and sends chunk j to rank j (all-to-all);
 * rank j dequantises the n contributions to its chunk and sums them in float32 in rank order, divides by
 * n for an average, quantises the result again and all-gathers it; every rank dequantises the n chunks.
 *
 * Bytes each rank hands out, for m float32 elements and blocks of B: the all-to-all m·(1 + 4/B), the
 * all-gather m/n·(1 + 4/B): against 4m of a float32 all-reduce through the host segment (3.9× fewer at
 * B = 256 on 4 ranks), and 2m·(1 + 4/B)·(n−1)/n against a ring's 8m·(n−1)/n over messages.
 *
 * Error, element x of block b (scales s = absmax/127): each contribution is off by at most s_i(b)/2
 * (rounding to the nearest level; no clamping, since |x| ≤ absmax), the sum of them by their sum, so the
 * average by (1/n)·Σ s_i(b)/2; the second quantisation adds s'(b)/2, s' the scale of the summed block;
 * plus float32 rounding of the sum. No error feedback: each step is unbiased to within the bound.
 *
 * Cost ({@linkcode int8AllReduceCost}): the all-to-all and all-gather of those bytes (pairwise and ring
 * over messages), plus the codec's passes over the elements: quantise m, dequantise the n contributions to a chunk (m/n each), quantise the chunk,
 * dequantise m: γ_int8 · m · (3 + 1/n).
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

/** Bytes of one chunk's message: its int8 values, then its scales. */
function messageBytes(chunk: number, blockSize: number): number {
  return chunk + 4 * (chunk / blockSize);
}

/**
 * Averages (or sums) `call.tensor` over the ranks, quantised to int8.
 *
 * @param ctx The context.
 * @param call The call (`blockSize`).
 */
export async function int8AllReduce(ctx: CompressedContext, call: CompressedCall): Promise<void> {
  const { size, rank, kernels: k } = ctx;
  const { tensor, blockSize } = call;
  const count = tensor.length;
  const chunk = chunkElements(count, size, lcm(blockSize, 4));
  const msg = messageBytes(chunk, blockSize);
  const pack = (into: Uint8Array, at: number, src: Float32Array): void => {
    if (src.length === 0) return;
    k.quantizeInt8(src, {
      blockSize,
      q: new Int8Array(into.buffer, into.byteOffset + at, src.length),
      scales: new Float32Array(into.buffer, into.byteOffset + at + chunk, Math.ceil(src.length / blockSize)),
    });
  };
  const unpack = (from: Uint8Array, at: number, dst: Float32Array, accumulate: boolean): void => {
    if (dst.length === 0) return;
    k.dequantizeInt8(
      {
        q: new Int8Array(from.buffer, from.byteOffset + at, dst.length),
        scales: new Float32Array(
          from.buffer,
          from.byteOffset + at + chunk,
          Math.ceil(dst.length / blockSize),
        ),
      },
      dst,
      { blockSize, accumulate },
    );
  };

  const send = ctx.scratch(size * msg), recv = ctx.scratch(size * msg);
  for (let j = 0; j < size; j++) {
    const [lo, hi] = chunkBounds(j, chunk, count);
    pack(send, j * msg, tensor.subarray(lo, hi));
  }
  await ctx.allToAll(send, recv);

  const [lo, hi] = chunkBounds(rank, chunk, count);
  const sum = floats(ctx.scratch(4 * chunk), 0, hi - lo);
  for (let i = 0; i < size; i++) unpack(recv, i * msg, sum, true);
  if (call.average) k.divide(sum, size);
  const mine = ctx.scratch(msg), all = ctx.scratch(size * msg);
  pack(mine, 0, sum);
  await ctx.allGather(mine, all);
  for (let j = 0; j < size; j++) {
    const [a, b] = chunkBounds(j, chunk, count);
    unpack(all, j * msg, tensor.subarray(a, b), false);
  }
}

/**
 * The int8 all-reduce's predicted seconds over messages: a pairwise all-to-all and a ring all-gather of
 * the quantised chunks, plus `computeSeconds` (the codec's passes, measured: `bench/compress.ts`).
 *
 * @param shape The call.
 * @param constants The network's α, β (γ unused: the codec's sums are in `computeSeconds`).
 * @param computeSeconds The kernels' time on one rank.
 * @returns Seconds.
 */
export function int8AllReduceCost(
  shape: CompressedShape,
  constants: CostConstants,
  computeSeconds = 0,
): number {
  const b = shape.blockSize ?? 256, n = shape.size;
  const msg = messageBytes(chunkElements(shape.count, n, lcm(b, 4)), b);
  const noReduce = { ...constants, gamma: 0 };
  return pairwiseAllToAllCost({ size: n, bytes: n * msg }, noReduce) +
    ringAllGatherCost({ size: n, bytes: n * msg }, noReduce) + computeSeconds;
}
