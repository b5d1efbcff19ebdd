/**
 * Loads `kernels.wasm` once per thread, lazily, and owns its linear memory.
 *
 * The module has no imports and no allocator of its own: everything above `heap_base()` belongs to a
 * {@linkcode WasmHeap}, a stack allocator. Kernels that receive arrays outside wasm memory stage them
 * on that stack and pop them afterwards, so a hot path allocates nothing once memory has grown to its
 * working size. Arrays that already live in wasm memory (see {@linkcode WasmHeap.alloc}) are used in
 * place.
 *
 * @module
 */
import type { TypedArray } from "../core/dtype.ts";

/**
 * A function exported by the kernels: pointers and lengths are wasm32 numbers.
 *
 * @example Calling a kernel by its C name
 * ```ts
 * import { type KernelFn, loadKernelModule } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const module = await loadKernelModule();
 * const heapBase: KernelFn = module.fn("heap_base");
 * assert.ok(heapBase() > 0); // the first byte the heap may use
 * ```
 */
export type KernelFn = (...args: number[]) => number;

/**
 * The raw exports of `kernels.wasm`.
 *
 * @example The module's exports, as WebAssembly sees them
 * ```ts
 * import { type KernelExports, loadKernelModule } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const exports: KernelExports = (await loadKernelModule()).exports;
 * assert.ok(exports.memory instanceof WebAssembly.Memory);
 * assert.equal(typeof exports["reduce"], "function");
 * ```
 */
export interface KernelExports {
  /** The module's linear memory. */
  readonly memory: WebAssembly.Memory;
  /** Every exported kernel, by C name. */
  readonly [name: string]: KernelFn | WebAssembly.Memory | WebAssembly.Table;
}

const PAGE = 65536;

/**
 * A constructor of a TypedArray, as used by {@linkcode WasmHeap.view}.
 *
 * @example A helper that places an array of any class on the kernels' heap
 * ```ts
 * import { kernels, type TypedArray, type TypedArrayConstructor } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * function heapArray<T extends TypedArray>(ctor: TypedArrayConstructor<T>, length: number): T {
 *   const ptr = k.heap.alloc(length * ctor.BYTES_PER_ELEMENT, ctor.BYTES_PER_ELEMENT);
 *   return k.heap.view(ctor, ptr, length);
 * }
 * const mark = k.heap.top;
 * const counts = heapArray(Int32Array, 3);
 * counts.set([1, 2, 3]);
 * assert.ok(k.heap.owns(counts));
 * k.heap.reset(mark);
 * ```
 */
export interface TypedArrayConstructor<T extends TypedArray> {
  /** Creates a view. */
  new (buffer: ArrayBuffer, byteOffset: number, length: number): T;
  /** Bytes per element. */
  readonly BYTES_PER_ELEMENT: number;
}

/**
 * A stack allocator over wasm linear memory. Growing memory detaches every view of the old buffer, so
 * take views only after the last allocation of a call, or take them again.
 *
 * @example Arrays in wasm memory, used in place by the kernels, then popped
 * ```ts
 * import { kernels, type WasmHeap } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await kernels();
 * const heap: WasmHeap = k.heap;
 * const mark = heap.top;
 * const a = heap.view(Float32Array, heap.alloc(8), 2);
 * a.set([1, 2]);
 * assert.ok(heap.owns(a)); // reduce() reads and writes it where it lies: no staging copy
 * k.reduce(a, new Float32Array([10, 20]));
 * assert.deepEqual(a, new Float32Array([11, 22]));
 * heap.reset(mark);
 * assert.equal(heap.top, mark);
 * ```
 */
export class WasmHeap {
  #memory: WebAssembly.Memory;
  #base: number;
  #top: number;
  #u8: Uint8Array;

  /**
   * Creates an empty stack over `memory` from `base` up.
   *
   * @param memory The module's memory.
   * @param base The first free byte (`heap_base()`).
   */
  constructor(memory: WebAssembly.Memory, base: number) {
    this.#memory = memory;
    this.#base = base;
    this.#top = base;
    this.#u8 = new Uint8Array(memory.buffer);
  }

  /** The wasm memory itself. */
  get memory(): WebAssembly.Memory {
    return this.#memory;
  }

  /** The current top of the stack; pass it to {@linkcode WasmHeap.reset} to pop what came after. */
  get top(): number {
    return this.#top;
  }

  /** Bytes of linear memory in use by the stack. */
  get used(): number {
    return this.#top - this.#base;
  }

  /**
   * Reserves `bytes` on the stack, growing memory if needed.
   *
   * @param bytes How many bytes.
   * @param align The alignment of the returned address. @default 64
   * @returns The address.
   * @throws {RangeError} If the request does not fit in 4 GiB of wasm32 memory.
   */
  alloc(bytes: number, align = 64): number {
    if (!Number.isInteger(bytes) || bytes < 0) {
      throw new RangeError(`Cannot allocate wasm memory: expected a byte count >= 0, found ${bytes}`);
    }
    const ptr = Math.ceil(this.#top / align) * align;
    const end = ptr + bytes;
    const have = this.#memory.buffer.byteLength;
    if (end > have) {
      const pages = Math.ceil((end - have) / PAGE);
      try {
        // Grow by at least a quarter of what we have, so a growing workload reallocates O(log n) times.
        this.#memory.grow(Math.max(pages, Math.min(Math.ceil(have / PAGE / 4), 65536 - have / PAGE)));
      } catch (e) {
        throw new RangeError(
          `Cannot allocate ${bytes} bytes of wasm memory: ${have} in use and wasm32 stops at 4 GiB`,
          { cause: e },
        );
      }
    }
    this.#top = end;
    return ptr;
  }

  /**
   * Pops the stack back to `mark` (a value of {@linkcode WasmHeap.top} taken earlier).
   *
   * @param mark The top to return to.
   */
  reset(mark: number): void {
    if (mark < this.#base || mark > this.#top) {
      throw new RangeError(`Cannot reset the wasm heap to ${mark}: expected ${this.#base}..${this.#top}`);
    }
    this.#top = mark;
  }

  /** All of linear memory as bytes; valid until memory next grows. */
  bytes(): Uint8Array {
    if (this.#u8.buffer !== this.#memory.buffer) this.#u8 = new Uint8Array(this.#memory.buffer);
    return this.#u8;
  }

  /**
   * A typed view of `length` elements at `ptr`; valid until memory next grows.
   *
   * @param ctor The TypedArray constructor.
   * @param ptr The address, aligned to the element size.
   * @param length The element count.
   * @returns The view.
   */
  view<T extends TypedArray>(ctor: TypedArrayConstructor<T>, ptr: number, length: number): T {
    return new ctor(this.#memory.buffer as ArrayBuffer, ptr, length);
  }

  /** Whether `array` is a view of this heap's current memory (so kernels can use it in place). */
  owns(array: TypedArray): boolean {
    return array.buffer === this.#memory.buffer;
  }

  /**
   * The address of `array` in wasm memory, staging a copy on the stack if it lives elsewhere.
   *
   * @param array The array.
   * @returns The address (the array's own when {@linkcode WasmHeap.owns} is true).
   */
  stage(array: TypedArray): number {
    if (this.owns(array)) return array.byteOffset;
    const ptr = this.alloc(array.byteLength);
    this.bytes().set(new Uint8Array(array.buffer, array.byteOffset, array.byteLength), ptr);
    return ptr;
  }

  /**
   * Copies `array.byteLength` bytes at `ptr` back into `array`, unless `array` is that memory already.
   *
   * @param ptr The address returned by {@linkcode WasmHeap.stage}.
   * @param array The destination.
   */
  unstage(ptr: number, array: TypedArray): void {
    if (this.owns(array)) return;
    new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(
      this.bytes().subarray(ptr, ptr + array.byteLength),
    );
  }
}

/**
 * The loaded module: its exports and the heap over its memory.
 *
 * @example Binding kernels of your own module wrapper
 * ```ts
 * import { Kernels, type KernelModule, loadKernelModule } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const module: KernelModule = await loadKernelModule();
 * const k = new Kernels(module); // what kernels() does, once per thread
 * assert.equal(k.heap, module.heap);
 * assert.throws(() => module.fn("no_such_kernel"), TypeError);
 * ```
 */
export interface KernelModule {
  /** The raw exports. */
  readonly exports: KernelExports;
  /** The allocator over linear memory. */
  readonly heap: WasmHeap;
  /**
   * An exported kernel by C name.
   *
   * @throws {TypeError} If the module has no such export.
   */
  fn(name: string): KernelFn;
}

let loading: Promise<KernelModule> | undefined;

/**
 * Instantiates `kernels.wasm` on first call (per thread) and returns the same module afterwards. Needs no
 * permission: the module is part of the import graph, so it loads from JSR as from disk.
 *
 * @returns The module.
 *
 * @example Loaded once per thread
 * ```ts
 * import { loadKernelModule } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * assert.equal(await loadKernelModule(), await loadKernelModule());
 * ```
 */
export function loadKernelModule(): Promise<KernelModule> {
  loading ??= (async () => {
    const exports = (await import("./kernels.wasm")) as unknown as KernelExports;
    const init = exports["_initialize"];
    if (typeof init === "function") init();
    const base = (exports["heap_base"] as KernelFn)();
    const heap = new WasmHeap(exports.memory, base);
    return {
      exports,
      heap,
      fn(name: string): KernelFn {
        const f = exports[name];
        if (typeof f !== "function") {
          throw new TypeError(`kernels.wasm has no export ${name}; rebuild it with deno task build:wasm`);
        }
        return f as KernelFn;
      },
    };
  })();
  return loading;
}
