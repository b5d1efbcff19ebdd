/**
 * Small byte arrays for the per-call and per-message hot paths (call descriptors, copies of frame headers).
 *
 * Deno gives every `new Uint8Array(n)` a backing store of its own outside the JS heap, which costs about a
 * microsecond however small `n` is, as much as a whole small call's bookkeeping. A view on a shared slab
 * costs about 60 ns. {@linkcode smallBytes} hands out zeroed views from a 64 KiB slab, each region once (a
 * bump pointer, never reused); when a slab is spent the next one is made, and a spent slab is freed by the
 * garbage collector once no view of it is left.
 *
 * @module
 */

const SLAB_BYTES = 64 * 1024;
/** Larger arrays get a buffer of their own (they would waste too much of a slab, and cost more anyway). */
const MAX_SMALL = 1024;

let slab = new ArrayBuffer(SLAB_BYTES);
let used = 0;

/**
 * A zeroed `Uint8Array` of `length` bytes that nothing else uses, 8-byte aligned in its buffer (so a
 * `DataView` or a `Float64Array` over it reads aligned words).
 *
 * @param length Its length in bytes.
 * @returns A view on a shared slab, or a new array when `length` is over 1 KiB.
 */
export function smallBytes(length: number): Uint8Array {
  if (length > MAX_SMALL) return new Uint8Array(length);
  if (used + length > SLAB_BYTES) {
    slab = new ArrayBuffer(SLAB_BYTES);
    used = 0;
  }
  const bytes = new Uint8Array(slab, used, length);
  used += (length + 7) & ~7;
  return bytes;
}

/**
 * A copy of `length` bytes of `source` from `offset`, in {@linkcode smallBytes}.
 *
 * @param source The bytes to copy from.
 * @param offset The first byte.
 * @param length How many.
 * @returns The copy.
 */
export function copySmallBytes(source: Uint8Array, offset: number, length: number): Uint8Array {
  const out = smallBytes(length);
  for (let i = 0; i < length; i++) out[i] = source[offset + i];
  return out;
}
