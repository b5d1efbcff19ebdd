/**
 * What a compressed all-reduce sees ({@linkcode CompressedContext}): the group's rank and size, three
 * collectives on byte buffers (all-to-all, all-gather, sum all-reduce of float32), the WASM kernels that
 * encode and decode, and scratch memory. The engine of the cpu backend provides it on the communication
 * thread, so the kernels never run on the thread that trains; each collective it runs is a call of its
 * own, with its own descriptor, that carries the codec and the stage (so ranks running different codecs
 * fail naming both calls).
 *
 * The codecs (one file each, `compressed_*.ts`, each opening with its bytes and cost) average, or sum, a
 * float32 tensor in place; what each keeps across steps (error feedback, PowerSGD's Q) lives in arrays
 * the caller owns and passes with every call.
 *
 * @module
 */

import { type CostConstants, pairwiseAllToAllCost, ringAllGatherCost } from "../sim/cost_model.ts";

/** The codecs, in the order their codes are numbered (a descriptor carries code + 1). */
export const CODECS = ["int8", "sign", "topk", "powersgd"] as const;

/** A codec's name. */
export type Codec = typeof CODECS[number];

/** One matrix of a PowerSGD bucket: `rows × cols` float32 values, row-major, from `offset`. */
export interface MatrixSpan {
  /** The first element, in the tensor. */
  readonly offset: number;
  /** Rows. */
  readonly rows: number;
  /** Columns. */
  readonly cols: number;
}

/** The kernels a codec runs (those of `wasm/compress.ts` and `wasm/kernels.ts`, structurally). */
export interface CodecKernels {
  /** Int8 with one absmax scale per block of `blockSize`. */
  quantizeInt8(
    src: Float32Array,
    options: { blockSize: number; q: Int8Array; scales: Float32Array },
  ): unknown;
  /** `dst = q * scale` (or `+=` with `accumulate`). */
  dequantizeInt8(
    packed: { q: Int8Array; scales: Float32Array },
    dst: Float32Array,
    options: { blockSize: number; accumulate?: boolean },
  ): void;
  /** Signs of `src + residual` with one mean-|x| scale per block; `residual` becomes what was lost. */
  signCompress(
    src: Float32Array,
    residual: Float32Array,
    options: { blockSize: number; bits: Uint8Array; scales: Float32Array },
  ): unknown;
  /** `dst = ±scale` (or `+=` with `accumulate`). */
  signDecompress(
    packed: { bits: Uint8Array; scales: Float32Array },
    dst: Float32Array,
    options: { blockSize: number; accumulate?: boolean },
  ): void;
  /** The `k` elements of largest magnitude, in index order. */
  topK(src: Float32Array, k: number, options: { indices: Uint32Array; values: Float32Array }): unknown;
  /** `dst[indices[i]] += values[i]`. */
  scatterAdd(dst: Float32Array, sparse: { indices: Uint32Array; values: Float32Array }): void;
  /** `dst /= divisor`. */
  divide(dst: Float32Array, divisor: number): void;
  /** `y += alpha * x`. */
  axpy(y: Float32Array, x: Float32Array, options?: { alpha?: number }): void;
  /** `x *= alpha`. */
  scale(x: Float32Array, alpha: number): void;
  /** `C = op(A) · op(B)`, row-major. */
  matmul(a: Float32Array, b: Float32Array, options: {
    c: Float32Array;
    m: number;
    k: number;
    n: number;
    transA?: boolean;
    transB?: boolean;
  }): void;
}

/** Everything a compressed all-reduce may use. */
export interface CompressedContext {
  /** This rank, within the group. */
  readonly rank: number;
  /** The group's size. */
  readonly size: number;
  /** The kernels. */
  readonly kernels: CodecKernels;
  /**
   * All-to-all of `input` (block `j` to rank `j`, every block `input.length / size` bytes) into `output`
   * (block `j` from rank `j`). Both from {@linkcode CompressedContext.scratch}.
   */
  allToAll(input: Uint8Array, output: Uint8Array): Promise<void>;
  /** All-gather of `input` into `output` (block `j` from rank `j`). Both from `scratch`. */
  allGather(input: Uint8Array, output: Uint8Array): Promise<void>;
  /** Sums `data` over the ranks, in place (every rank gets the same bits). From `scratch`. */
  allReduce(data: Float32Array): Promise<void>;
  /** Zeroed memory of `bytes` bytes, valid until the call ends, 16-byte aligned. */
  scratch(bytes: number): Uint8Array;
}

/** One compressed all-reduce, as a codec runs it. */
export interface CompressedCall {
  /** The tensor: this rank's contribution on entry, the reduction on return. */
  readonly tensor: Float32Array;
  /** Divide by the group size (`op: "avg"`), or not (`"sum"`). */
  readonly average: boolean;
  /** Elements per scale (int8, sign). */
  readonly blockSize: number;
  /** Elements each rank sends (top-k). */
  readonly k: number;
  /** The approximation's rank (PowerSGD). */
  readonly rank: number;
  /** The matrices (PowerSGD); what they do not cover is summed uncompressed. */
  readonly matrices: readonly MatrixSpan[];
  /** This rank's error feedback (`tensor.length` elements), or none. */
  readonly residual?: Float32Array;
  /** The sign codec's server-side error feedback (`tensor.length` elements; a rank uses its chunk). */
  readonly serverResidual?: Float32Array;
  /** PowerSGD's Q, warm-started from step to step ({@linkcode powerSgdSizes}). */
  readonly q?: Float32Array;
}

/**
 * The chunk of a two-phase codec that each rank serves: `chunk` elements from `rank · chunk`, a multiple of
 * `align`, so that every rank sends blocks of one size (the last chunks may be short or empty).
 *
 * @param count Elements of the tensor.
 * @param size The group size.
 * @param align What the chunk is a multiple of.
 * @returns Elements per chunk.
 */
export function chunkElements(count: number, size: number, align: number): number {
  return Math.max(align, Math.ceil(Math.ceil(count / size) / align) * align);
}

/** Rank `j`'s chunk `[lo, hi)` of a tensor of `count` elements in chunks of `chunk`. */
export function chunkBounds(j: number, chunk: number, count: number): [number, number] {
  const lo = Math.min(count, j * chunk);
  return [lo, Math.min(count, lo + chunk)];
}

/** The least common multiple of two positive integers. */
export function lcm(a: number, b: number): number {
  let x = a, y = b;
  while (y) [x, y] = [y, x % y];
  return (a / x) * b;
}

/**
 * The rank PowerSGD uses for a matrix (torch's: the asked rank, at most its smaller side).
 *
 * @param m The matrix.
 * @param rank The asked rank.
 * @returns The rank used.
 */
export function matrixRank(m: MatrixSpan, rank: number): number {
  return Math.min(rank, m.rows, m.cols);
}

/**
 * Sizes of PowerSGD's arrays: Q (kept as Qᵀ, `r × cols` per matrix, in order), P (`rows × r`), and the elements
 * outside the matrices, which travel uncompressed.
 *
 * @param count Elements of the tensor.
 * @param matrices The matrices.
 * @param rank The asked rank.
 * @returns Elements of each.
 */
export function powerSgdSizes(
  count: number,
  matrices: readonly MatrixSpan[],
  rank: number,
): { q: number; p: number; uncompressed: number } {
  let q = 0, p = 0, covered = 0;
  for (const m of matrices) {
    const r = matrixRank(m, rank);
    q += m.cols * r;
    p += m.rows * r;
    covered += m.rows * m.cols;
  }
  return { q, p, uncompressed: count - covered };
}

/** The shape of a compressed all-reduce, for its cost. */
export interface CompressedShape {
  /** Ranks. */
  readonly size: number;
  /** Float32 elements of the tensor. */
  readonly count: number;
  /** Elements per scale (int8, sign). @default 256 */
  readonly blockSize?: number;
  /** Elements each rank sends (top-k). @default count / 100 */
  readonly k?: number;
  /** PowerSGD's rank. @default 2 */
  readonly rank?: number;
  /** PowerSGD's matrices. @default one square-ish matrix of the whole tensor */
  readonly matrices?: readonly MatrixSpan[];
}

/** The shape of a two-phase codec's messages, which its cost needs as much as its run. */
export interface TwoPhaseLayout {
  /** What every chunk's length is a multiple of (so that messages keep their parts aligned). */
  readonly align: number;
  /** Bytes of the message of a chunk of `chunk` elements (the last chunks may hold fewer). */
  messageBytes(chunk: number): number;
}

/**
 * One codec of the two-phase scheme of {@linkcode twoPhaseAllReduce}: how a chunk of the tensor becomes one
 * message and back.
 */
export interface TwoPhaseCodec extends TwoPhaseLayout {
  /**
   * Encodes `src` into the message at byte `at` of `into`; `residual` is the error feedback of those
   * elements where the codec keeps one.
   */
  pack(
    into: Uint8Array,
    at: number,
    chunk: number,
    src: Float32Array,
    residual: Float32Array | undefined,
  ): void;
  /** Decodes the message at byte `at` of `from` into `dst`, or adds it there with `accumulate`. */
  unpack(from: Uint8Array, at: number, chunk: number, dst: Float32Array, accumulate: boolean): void;
}

/**
 * The two-phase compressed all-reduce (int8, 1-bit): every rank encodes chunk j for rank j (all-to-all);
 * rank j decodes the n contributions to its chunk, sums them in rank order (divides by n for an average),
 * encodes the result (with the server residual `server`, where there is one) and all-gathers it; every
 * rank decodes the n chunks.
 *
 * @param ctx The context.
 * @param call The call.
 * @param codec The codec.
 * @param worker This rank's error feedback over the whole tensor, or none.
 * @param server The error feedback of the chunk this rank reduces (indexed like the tensor), or none.
 */
export async function twoPhaseAllReduce(
  ctx: CompressedContext,
  call: CompressedCall,
  codec: TwoPhaseCodec,
  worker?: Float32Array,
  server?: Float32Array,
): Promise<void> {
  const { size, rank } = ctx;
  const { tensor } = call;
  const count = tensor.length;
  const chunk = chunkElements(count, size, codec.align);
  const msg = codec.messageBytes(chunk);
  const send = ctx.scratch(size * msg), recv = ctx.scratch(size * msg);
  for (let j = 0; j < size; j++) {
    const [lo, hi] = chunkBounds(j, chunk, count);
    if (hi > lo) codec.pack(send, j * msg, chunk, tensor.subarray(lo, hi), worker?.subarray(lo, hi));
  }
  await ctx.allToAll(send, recv);

  const [lo, hi] = chunkBounds(rank, chunk, count);
  const sum = floats(ctx.scratch(4 * chunk), 0, hi - lo);
  if (hi > lo) { for (let i = 0; i < size; i++) codec.unpack(recv, i * msg, chunk, sum, true); }
  if (call.average) ctx.kernels.divide(sum, size);
  const mine = ctx.scratch(msg), all = ctx.scratch(size * msg);
  if (hi > lo) codec.pack(mine, 0, chunk, sum, server?.subarray(lo, hi));
  await ctx.allGather(mine, all);
  for (let j = 0; j < size; j++) {
    const [a, b] = chunkBounds(j, chunk, count);
    if (b > a) codec.unpack(all, j * msg, chunk, tensor.subarray(a, b), false);
  }
}

/**
 * The two-phase scheme's predicted seconds over messages: a pairwise all-to-all and a ring all-gather of
 * the codec's messages, plus `computeSeconds` (the codec's kernel passes, measured).
 *
 * @param shape The call.
 * @param layout The codec's messages.
 * @param constants The network's α, β (γ unused: the codec's sums are in `computeSeconds`).
 * @param computeSeconds The kernels' time on one rank.
 * @returns Seconds.
 */
export function twoPhaseCost(
  shape: CompressedShape,
  layout: TwoPhaseLayout,
  constants: CostConstants,
  computeSeconds: number,
): number {
  const size = shape.size;
  const bytes = size * layout.messageBytes(chunkElements(shape.count, size, layout.align));
  const noReduce = { ...constants, gamma: 0 };
  return pairwiseAllToAllCost({ size, bytes }, noReduce) + ringAllGatherCost({ size, bytes }, noReduce) +
    computeSeconds;
}

/** A Float32Array over `bytes`, which must be 4-byte aligned. */
export function floats(bytes: Uint8Array, at = 0, length = (bytes.byteLength - at) / 4): Float32Array {
  return new Float32Array(bytes.buffer, bytes.byteOffset + at, length);
}
