/**
 * How algorithms cut a byte buffer: near-equal element-aligned segments, chunks of at most
 * `ctx.chunkBytes`, and the small integer helpers the rank arithmetic needs. Every rank computes the same
 * cuts from the same lengths, so sender and receiver always agree on message sizes without telling each
 * other.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";

/**
 * A zero-length array, for messages with no payload and buffers of nothing: shared, as `new Uint8Array(0)`
 * costs the better part of a microsecond in Deno on every call.
 */
export const EMPTY: Uint8Array = new Uint8Array(0);

/**
 * Offsets of `parts` element-aligned ranges that cover `[0, bytes)`: `parts + 1` entries. When the
 * element count does not divide evenly the first `elements mod parts` ranges hold one element more, so
 * no range differs from another by more than one element.
 */
export function partition(bytes: number, cut: { parts: number; elemSize: number }): number[] {
  const { parts, elemSize } = cut;
  const elems = bytes / elemSize;
  const base = Math.floor(elems / parts);
  const extra = elems % parts;
  const offsets = [0];
  for (let i = 0; i < parts; i++) offsets.push(offsets[i] + (base + (i < extra ? 1 : 0)) * elemSize);
  return offsets;
}

/** The bytes of one pipelined chunk: `ctx.chunkBytes` rounded down to whole elements, at least one. */
export function chunkSize(ctx: CollectiveContext): number {
  return Math.max(1, Math.floor(ctx.chunkBytes / ctx.elemSize)) * ctx.elemSize;
}

/** Views of `view` cut into chunks of {@linkcode chunkSize} bytes (the last may be shorter; none if empty). */
export function chunks(ctx: CollectiveContext, view: Uint8Array): Uint8Array[] {
  const step = chunkSize(ctx);
  const out: Uint8Array[] = [];
  for (let at = 0; at < view.length; at += step) {
    out.push(view.subarray(at, Math.min(view.length, at + step)));
  }
  return out;
}

/** `a mod n` in `[0, n)`, also for negative `a`. */
export function mod(a: number, n: number): number {
  return ((a % n) + n) % n;
}

/** The largest power of two not above `n` (n ≥ 1). */
export function floorPow2(n: number): number {
  let p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/** ⌈log2 n⌉ for n ≥ 1, computed on integers so that powers of two are exact. */
export function ceilLog2(n: number): number {
  let rounds = 0;
  for (let p = 1; p < n; p *= 2) rounds++;
  return rounds;
}

/** The lowest set bit of a positive integer. */
export function lowBit(n: number): number {
  return n & -n;
}
