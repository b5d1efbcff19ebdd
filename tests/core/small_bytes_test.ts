import assert from "node:assert/strict";
import { copySmallBytes, smallBytes } from "../../core/small_bytes.ts";

Deno.test("smallBytes() hands out zeroed, 8-byte aligned views that never overlap, across slabs", () => {
  const seen: Uint8Array[] = [];
  // More than one 64 KiB slab's worth, of odd sizes.
  for (let i = 0; i < 3000; i++) {
    const n = 1 + (i * 37) % 64;
    const bytes = smallBytes(n);
    assert.equal(bytes.length, n);
    assert.equal(bytes.byteOffset % 8, 0);
    assert(bytes.every((b) => b === 0), `array ${i} is not zeroed`);
    bytes.fill(0xff);
    seen.push(bytes);
  }
  // Writing every array did not touch any other: each still holds only its own 0xff bytes and no array's
  // bytes were overwritten by a later one's zeroing (a reused region would show as zeros here).
  for (const bytes of seen) assert(bytes.every((b) => b === 0xff));
  const buffers = new Set(seen.map((b) => b.buffer));
  assert(buffers.size >= 2, "3000 arrays of up to 64 bytes span several slabs");
  const byBuffer = new Map<ArrayBufferLike, Uint8Array[]>();
  for (const b of seen) byBuffer.set(b.buffer, [...(byBuffer.get(b.buffer) ?? []), b]);
  for (const list of byBuffer.values()) {
    const sorted = list.sort((a, b) => a.byteOffset - b.byteOffset);
    for (let i = 1; i < sorted.length; i++) {
      assert(sorted[i].byteOffset >= sorted[i - 1].byteOffset + sorted[i - 1].length, "overlapping views");
    }
  }
});

Deno.test("smallBytes() gives an array of its own above 1 KiB; copySmallBytes() copies a range", () => {
  const big = smallBytes(4096);
  assert.equal(big.byteOffset, 0);
  assert.equal(big.buffer.byteLength, 4096);
  const source = Uint8Array.from({ length: 64 }, (_, i) => i);
  const copy = copySmallBytes(source, 8, 32);
  assert.deepEqual([...copy], Array.from({ length: 32 }, (_, i) => i + 8));
  source.fill(0);
  assert.equal(copy[0], 8, "a copy, not a view of the source");
});
