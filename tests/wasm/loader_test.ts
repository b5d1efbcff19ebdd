import assert from "node:assert/strict";
import { loadKernelModule, WasmHeap } from "../../wasm/loader.ts";

const PAGE = 65536;

Deno.test("loadKernelModule() instantiates kernels.wasm once and exposes every kernel", async () => {
  const a = await loadKernelModule(), b = await loadKernelModule();
  assert.equal(a, b);
  for (
    const name of ["reduce", "reduce_n", "divide", "cast_f32_f16", "cast_f16_f32", "scale", "axpy", "matmul"]
  ) {
    assert.equal(typeof a.fn(name), "function", name);
  }
  assert.throws(() => a.fn("no_such_kernel"), TypeError);
  assert.equal(
    WebAssembly.Module.imports(
      new WebAssembly.Module(Deno.readFileSync(new URL("../../wasm/kernels.wasm", import.meta.url))),
    ).length,
    0,
  );
});

Deno.test("WasmHeap.alloc() aligns, stacks, and pops back with reset()", () => {
  const heap = new WasmHeap(new WebAssembly.Memory({ initial: 1, maximum: 4 }), 100);
  const p = heap.alloc(3);
  assert.equal(p, 128); // 64-byte aligned by default
  assert.equal(heap.top, 131);
  const q = heap.alloc(8, 8);
  assert.equal(q, 136);
  assert.equal(heap.used, 144 - 100);
  heap.reset(p);
  assert.equal(heap.top, 128);
  assert.equal(heap.alloc(0, 1), 128);
  assert.throws(() => heap.reset(99), RangeError);
  assert.throws(() => heap.reset(129), RangeError);
  assert.throws(() => heap.alloc(-1), RangeError);
  assert.throws(() => heap.alloc(1.5), RangeError);
});

Deno.test("WasmHeap.alloc() grows memory on demand, which detaches the views taken before", () => {
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 16 });
  const heap = new WasmHeap(memory, 0);
  const p = heap.alloc(16);
  const before = heap.view(Float32Array, p, 4);
  before.set([1, 2, 3, 4]);
  heap.alloc(2 * PAGE);
  assert.ok(memory.buffer.byteLength >= 2 * PAGE + 64);
  assert.equal(before.length, 0); // detached
  assert.equal(heap.owns(before), false);
  assert.deepEqual(heap.view(Float32Array, p, 4), new Float32Array([1, 2, 3, 4])); // the bytes stayed
  assert.equal(heap.bytes().buffer, memory.buffer);
  assert.throws(() => heap.alloc(64 * PAGE), RangeError); // past this memory's maximum
});

Deno.test("WasmHeap.stage() copies foreign arrays in and unstage() copies them back; owned ones stay put", () => {
  const heap = new WasmHeap(new WebAssembly.Memory({ initial: 1 }), 0);
  const js = new Int16Array(new ArrayBuffer(12), 2, 4);
  js.set([1, -2, 3, -4]);
  const mark = heap.top;
  const p = heap.stage(js);
  assert.deepEqual(heap.view(Int16Array, p, 4), js);
  heap.view(Int16Array, p, 4)[1] = 20;
  heap.unstage(p, js);
  assert.deepEqual(js, new Int16Array([1, 20, 3, -4]));
  heap.reset(mark);
  const q = heap.alloc(8);
  const own = heap.view(Int16Array, q, 4);
  assert.equal(heap.owns(own), true);
  assert.equal(heap.stage(own), q);
  assert.equal(heap.top, q + 8);
});
