/**
 * The sharded trainer's two collectives, plain or through a codec, over one group whose ranks own the
 * pieces of a buffer (`counts[r]` elements for group rank r, in order):
 *
 * - `reduceScatterPieces`: every rank's buffer averaged, each rank keeping its piece. Plain, it is the
 *   group's `reduceScatter` (op `avg`). Through a codec (ZeRO++'s qgZ for `int8`; `sign` and `topk` with
 *   error feedback), each rank encodes the piece of every peer, an `allToAll` of the bytes carries them, and
 *   each rank decodes its n contributions in rank order into its piece and divides by n: the all-to-all
 *   reduce-scatter of qgZ, which quantizes once per hop instead of once per ring step.
 * - `allGatherPieces`: every rank's piece to every rank. Plain, the group's `allGather`; through `int8`
 *   (qwZ), each rank quantizes its piece, the bytes are all-gathered and every rank (the owner too)
 *   decodes every piece, so all ranks hold the same values.
 *
 * The encoded piece of `c` elements is 4-byte aligned: the float32 scales (or top-k's indices) first, then
 * the int8 values (or sign bits, or top-k's values), padded to 4 bytes. The kernels run on the calling
 * thread (the codecs of an all-reduce run on the communication thread; these take the group's public
 * collectives only).
 */
import type { ProcessGroup } from "../backend/process_group.ts";
import type { WorkReport } from "../backend/work.ts";
import type { CompressionKernels } from "../wasm/compress.ts";
import type { Kernels } from "../wasm/kernels.ts";
import { startsOf } from "./_layout.ts";

/** How a piece travels. */
export type PieceCodec =
  | { readonly kind: "none" }
  | { readonly kind: "int8"; readonly blockSize: number }
  | { readonly kind: "sign"; readonly blockSize: number; readonly residual: Float32Array }
  | { readonly kind: "topk"; readonly ratio: number; readonly residual: Float32Array };

/** The kernels the codecs use. */
export interface CodecKernels {
  /** Element-wise ones. */
  readonly k: Kernels;
  /** The codecs. */
  readonly ck: CompressionKernels;
}

const ceil4 = (n: number): number => (n + 3) & ~3;

/** The elements top-k keeps of a piece of `count`. */
export function topkOf(count: number, ratio: number): number {
  return count === 0 ? 0 : Math.max(1, Math.min(count, Math.ceil(ratio * count)));
}

/** Bytes of one encoded piece of `count` elements. */
export function pieceBytes(codec: PieceCodec, count: number): number {
  switch (codec.kind) {
    case "none":
      return 4 * count;
    case "int8":
      return 4 * Math.ceil(count / codec.blockSize) + ceil4(count);
    case "sign":
      return 4 * Math.ceil(count / codec.blockSize) + ceil4(Math.ceil(count / 8));
    case "topk":
      return 8 * topkOf(count, codec.ratio);
  }
}

/** Encodes `src` (a piece; `residual` its error feedback, same length) into `out` at byte `at`. */
function encode(
  kernels: CodecKernels,
  codec: PieceCodec,
  src: Float32Array,
  residual: Float32Array | undefined,
  out: Uint8Array,
  at: number,
): void {
  const n = src.length, buffer = out.buffer, base = out.byteOffset + at;
  if (n === 0) return;
  if (codec.kind === "int8" || codec.kind === "sign") {
    const nb = Math.ceil(n / codec.blockSize);
    const scales = new Float32Array(buffer, base, nb);
    if (codec.kind === "int8") {
      kernels.ck.quantizeInt8(src, {
        blockSize: codec.blockSize,
        scales,
        q: new Int8Array(buffer, base + 4 * nb, n),
      });
    } else {
      const bits = new Uint8Array(buffer, base + 4 * nb, Math.ceil(n / 8));
      kernels.ck.signCompress(src, residual as Float32Array, { blockSize: codec.blockSize, scales, bits });
    }
    return;
  }
  if (codec.kind === "topk") {
    const r = residual as Float32Array, kept = topkOf(n, codec.ratio);
    kernels.k.reduce(r, src, { op: "sum" }); // x = e + g, held in the residual
    const indices = new Uint32Array(buffer, base, kept),
      values = new Float32Array(buffer, base + 4 * kept, kept);
    kernels.ck.topK(r, kept, { indices, values });
    for (let i = 0; i < kept; i++) r[indices[i]] = 0; // what was sent is no longer owed
  }
}

/** Decodes a piece of `dst.length` elements at byte `at` of `src`, adding it into `dst`. */
function decodeAdd(
  kernels: CodecKernels,
  codec: PieceCodec,
  src: Uint8Array,
  at: number,
  dst: Float32Array,
): void {
  const n = dst.length, buffer = src.buffer, base = src.byteOffset + at;
  if (n === 0) return;
  if (codec.kind === "int8" || codec.kind === "sign") {
    const nb = Math.ceil(n / codec.blockSize);
    const scales = new Float32Array(buffer, base, nb);
    if (codec.kind === "int8") {
      const q = new Int8Array(buffer, base + 4 * nb, n);
      kernels.ck.dequantizeInt8({ q, scales }, dst, { blockSize: codec.blockSize, accumulate: true });
    } else {
      const bits = new Uint8Array(buffer, base + 4 * nb, Math.ceil(n / 8));
      kernels.ck.signDecompress({ bits, scales }, dst, { blockSize: codec.blockSize, accumulate: true });
    }
    return;
  }
  if (codec.kind === "topk") {
    const kept = topkOf(n, codec.ratio);
    const indices = new Uint32Array(buffer, base, kept),
      values = new Float32Array(buffer, base + 4 * kept, kept);
    kernels.ck.scatterAdd(dst, { indices, values });
  }
}

/** What one of these collectives reports: the bytes this rank sent, and the group's reports. */
export interface PieceReport {
  /** Payload bytes this rank sent. */
  bytesSent: number;
  /** Milliseconds the codec's kernels ran on the calling thread (encoding and decoding). */
  codecMs?: number;
}

const sent = (r: WorkReport | undefined): number => r?.bytesSent ?? 0;

/**
 * Averages `input` (the whole buffer, `counts` summed) over `group` into `output` (this rank's piece);
 * `output` may be a view of `input` at the piece.
 */
export async function reduceScatterPieces(
  group: ProcessGroup,
  input: Float32Array,
  output: Float32Array,
  counts: readonly number[],
  codec: PieceCodec,
  kernels: CodecKernels,
  timeoutMs: number | undefined,
): Promise<PieceReport> {
  if (group.size === 1) {
    if (output.byteOffset !== input.byteOffset || output.buffer !== input.buffer) output.set(input);
    return { bytesSent: 0 };
  }
  if (codec.kind === "none") {
    const report = await group.reduceScatter(output, input, { counts, op: "avg", timeoutMs }).wait();
    return { bytesSent: sent(report) };
  }
  const g = group.size, me = group.rank, starts = startsOf(counts);
  const sendCounts = counts.map((c) => pieceBytes(codec, c));
  const send = new Uint8Array(sendCounts.reduce((a, b) => a + b, 0));
  const residual = codec.kind === "int8" ? undefined : codec.residual;
  const t0 = performance.now();
  let at = 0;
  for (let j = 0; j < g; j++) {
    const piece = input.subarray(starts[j], starts[j] + counts[j]);
    encode(kernels, codec, piece, residual?.subarray(starts[j], starts[j] + counts[j]), send, at);
    at += sendCounts[j];
  }
  const mine = sendCounts[me];
  const recv = new Uint8Array(g * mine);
  const encodeMs = performance.now() - t0;
  const report = await group.allToAll(recv, send, {
    sendCounts,
    recvCounts: Array(g).fill(mine),
    timeoutMs,
  }).wait();
  const t1 = performance.now();
  output.fill(0);
  for (let i = 0; i < g; i++) decodeAdd(kernels, codec, recv, i * mine, output);
  if (output.length > 0) kernels.k.scale(output, 1 / g);
  return { bytesSent: sent(report), codecMs: encodeMs + performance.now() - t1 };
}

/**
 * Gathers every rank's piece over `group` into `output` (the whole buffer); `input` is this rank's piece,
 * and may be a view of `output` at it when `codec` is `"none"`.
 */
export async function allGatherPieces(
  group: ProcessGroup,
  input: Float32Array,
  output: Float32Array,
  counts: readonly number[],
  codec: PieceCodec,
  kernels: CodecKernels,
  timeoutMs: number | undefined,
): Promise<PieceReport> {
  const starts = startsOf(counts), me = group.rank;
  if (codec.kind === "none") {
    if (group.size === 1) {
      if (input.byteOffset !== output.byteOffset || input.buffer !== output.buffer) output.set(input);
      return { bytesSent: 0 };
    }
    const report = await group.allGather(output, input, { counts, timeoutMs }).wait();
    return { bytesSent: sent(report) };
  }
  const bytes = counts.map((c) => pieceBytes(codec, c));
  const all = new Uint8Array(bytes.reduce((a, b) => a + b, 0));
  const byteStarts = startsOf(bytes);
  const mine = all.subarray(byteStarts[me], byteStarts[me] + bytes[me]);
  const t0 = performance.now();
  encode(kernels, codec, input, undefined, mine, 0);
  const encodeMs = performance.now() - t0;
  let report: WorkReport | undefined;
  if (group.size > 1) {
    report = await group.allGather(all, mine, { counts: bytes, timeoutMs }).wait();
  }
  const t1 = performance.now();
  for (let r = 0; r < group.size; r++) {
    const dst = output.subarray(starts[r], starts[r] + counts[r]);
    dst.fill(0);
    decodeAdd(kernels, codec, all, byteStarts[r], dst);
  }
  return { bytesSent: sent(report), codecMs: encodeMs + performance.now() - t1 };
}
