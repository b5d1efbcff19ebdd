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
  type CompressedCall,
  type CompressedContext,
  type CompressedShape,
  floats,
  lcm,
  twoPhaseAllReduce,
  type TwoPhaseCodec,
  twoPhaseCost,
  type TwoPhaseLayout,
} from "./compressed_context.ts";
import type { CostConstants } from "../sim/cost_model.ts";

/** A chunk's message: its int8 values (one byte each, `chunk` of them), then its scales. */
function int8Layout(blockSize: number): TwoPhaseLayout {
  return { align: lcm(blockSize, 4), messageBytes: (chunk) => chunk + 4 * (chunk / blockSize) };
}

function int8Codec(ctx: CompressedContext, blockSize: number): TwoPhaseCodec {
  const k = ctx.kernels;
  const parts = (bytes: Uint8Array, at: number, chunk: number, n: number) => ({
    q: new Int8Array(bytes.buffer, bytes.byteOffset + at, n),
    scales: floats(bytes, at + chunk, Math.ceil(n / blockSize)),
  });
  return {
    ...int8Layout(blockSize),
    pack: (into, at, chunk, src) => k.quantizeInt8(src, { blockSize, ...parts(into, at, chunk, src.length) }),
    unpack: (from, at, chunk, dst, accumulate) =>
      k.dequantizeInt8(parts(from, at, chunk, dst.length), dst, { blockSize, accumulate }),
  };
}

/**
 * Averages (or sums) `call.tensor` over the ranks, quantised to int8.
 *
 * @param ctx The context.
 * @param call The call (`blockSize`).
 */
export async function int8AllReduce(ctx: CompressedContext, call: CompressedCall): Promise<void> {
  await twoPhaseAllReduce(ctx, call, int8Codec(ctx, call.blockSize));
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
  return twoPhaseCost(shape, int8Layout(shape.blockSize ?? 256), constants, computeSeconds);
}
