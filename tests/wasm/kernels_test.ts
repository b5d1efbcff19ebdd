import assert from "node:assert/strict";
import { dtypeCode, kernels, opCode } from "../../wasm/kernels.ts";
import { DTYPES, REDUCE_OPS } from "../../core/dtype.ts";

const k = await kernels();

/** Fills wasm memory up to `spare` bytes below its end, so the next bigger allocation must grow it. */
function fillMemory(spare: number): void {
  const free = k.heap.memory.buffer.byteLength - k.heap.top;
  if (free > spare + 64) k.heap.alloc(free - spare - 64, 1);
}

Deno.test("kernels() returns the same Kernels on every call", async () => {
  assert.equal(await kernels(), k);
  const all = await Promise.all([kernels(), kernels()]);
  assert.equal(all[0], all[1]);
});

Deno.test("dtypeCode() and opCode() follow dcomm's own order and reject unknown names", () => {
  assert.deepEqual(DTYPES.map(dtypeCode), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  assert.deepEqual(REDUCE_OPS.map(opCode), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
  assert.throws(() => dtypeCode("toString" as never), /Unknown dtype: .*found toString/);
  assert.throws(() => opCode("mean" as never), /Unknown reduce op: .*found mean/);
});

Deno.test("Kernels.reduce() uses arrays in wasm memory in place, without staging", () => {
  const mark = k.heap.top;
  try {
    const n = 1 << 16;
    const d = k.heap.alloc(4 * n), s = k.heap.alloc(4 * n);
    fillMemory(1024); // staging 2 x 256 KiB now would grow memory
    const buffer = k.heap.memory.buffer;
    const dst = k.heap.view(Float32Array, d, n).fill(1), src = k.heap.view(Float32Array, s, n).fill(2);
    const top = k.heap.top;
    k.reduce(dst, src);
    k.reduceMany(dst, [dst, src, src], { op: "max" });
    k.scale(dst, 2);
    assert.equal(k.heap.memory.buffer, buffer, "memory grew: an array was staged");
    assert.equal(k.heap.top, top);
    assert.deepEqual([dst[0], dst[n - 1]], [6, 6]);
  } finally {
    k.heap.reset(mark);
  }
});

Deno.test("Kernels.reduce() finishes when staging a source grows memory under a dst in wasm memory", () => {
  const mark = k.heap.top;
  try {
    const n = 1 << 16;
    const d = k.heap.alloc(4 * n);
    fillMemory(1024);
    const dst = k.heap.view(Float32Array, d, n).fill(1);
    const src = new Float32Array(n).fill(2);
    k.reduce(dst, src); // staging src grows memory: dst's view is detached, its address is not
    assert.equal(dst.length, 0);
    const after = k.heap.view(Float32Array, d, n);
    assert.deepEqual([after[0], after[n - 1]], [3, 3]);
    k.reduceMany(after, [after, new Float32Array(n).fill(4)]);
    assert.equal(k.heap.view(Float32Array, d, n)[7], 7);
  } finally {
    k.heap.reset(mark);
  }
});

Deno.test("Kernels methods allocate no wasm memory once it has grown, and pop their staging", () => {
  const n = 1 << 18;
  const a = new Float32Array(n).fill(1), b = new Float32Array(n).fill(2), h = new Uint16Array(n);
  const top = k.heap.top;
  const run = () => {
    k.reduce(a, b);
    k.reduceMany(a, [a, b, b], { op: "avg" });
    k.divide(a, 3);
    k.castF32ToF16(a, h);
    k.castF16ToF32(h, a);
    k.axpy(a, b, { alpha: 0.5 });
    k.matmul(a.subarray(0, 64 * 64), b.subarray(0, 64 * 64), {
      c: b.subarray(0, 64 * 64),
      m: 64,
      k: 64,
      n: 64,
    });
  };
  run();
  const buffer = k.heap.memory.buffer;
  run();
  assert.equal(k.heap.memory.buffer, buffer);
  assert.equal(k.heap.top, top);
});

Deno.test("Kernels.reduce() rejects a view of wasm memory taken before memory grew", () => {
  const mark = k.heap.top;
  try {
    const p = k.heap.alloc(16);
    const stale = k.heap.view(Float32Array, p, 4);
    fillMemory(0);
    k.heap.alloc(1 << 16);
    assert.throws(
      () => k.reduce(stale, new Float32Array(4)),
      /^TypeError: Cannot reduce: dst is a view of a detached buffer/,
    );
  } finally {
    k.heap.reset(mark);
  }
});

Deno.test("Kernels wrappers accept views at byte offsets inside larger buffers", () => {
  const buf = new ArrayBuffer(64);
  const dst = new Float32Array(buf, 4, 3).fill(1), src = new Float32Array(buf, 20, 3).fill(2);
  k.reduce(dst, src);
  assert.deepEqual(new Float32Array(buf, 0, 9), new Float32Array([0, 3, 3, 3, 0, 2, 2, 2, 0]));
  const bytes = new Uint8Array(8);
  const i8 = new Int8Array(bytes.buffer, 1, 3).fill(100);
  k.reduce(i8, new Int8Array([100, 1, -100]));
  assert.deepEqual(bytes, new Uint8Array([0, 200, 101, 0, 0, 0, 0, 0]));
});
