/**
 * One row of `deno task bench:kernels`: how to run a kernel in WASM, natively (the same C built by gcc,
 * called through `Deno.dlopen` on the same wasm-memory arrays) and as a plain TypeScript loop on JS arrays
 * holding the same 64 MiB input; how to put the arrays the kernels write back to their first state; and
 * how to check a result.
 *
 * @module
 */
import type { KernelModule } from "../wasm/loader.ts";

/** Prepared runs over the same data. */
export interface KernelRuns {
  /** One call of the WASM kernel (inputs already in wasm memory). */
  wasm(): void;
  /**
   * One call of the native kernel on the very arrays {@linkcode KernelRuns.wasm} uses; absent without a
   * native library (or when it lacks a function this row needs).
   */
  native?: () => void;
  /** One call of the plain TypeScript loop on JS arrays holding the same data. */
  ts(): void;
  /** Puts every array in wasm memory that the WASM and native calls write back to its state after setup. */
  reset(): void;
  /**
   * Throws unless the arrays in wasm memory that the kernel writes equal, bit for bit, the TypeScript
   * loop's outputs. Meaningful after exactly one WASM or native call since setup or {@linkcode
   * KernelRuns.reset}, and exactly one TypeScript call since setup.
   */
  check(): void;
}

/** A benchmark row. */
export interface KernelCase {
  /** The row's name. */
  readonly name: string;
  /** The dtype. */
  readonly dtype: string;
  /** Bytes read plus bytes written by one call. */
  readonly bytes: number;
  /**
   * Allocates and fills the inputs; called once before timing.
   *
   * @param wasm The WASM module, whose heap holds the arrays.
   * @param native The same heap with native functions (see `_native_kernels.ts`), if there is one.
   */
  setup(wasm: KernelModule, native?: KernelModule): KernelRuns;
}

/**
 * `make(native)`, or undefined when there is no native module or it lacks a function that `make` binds
 * (the constructors of `Kernels` and `CompressionKernels` throw a TypeError then).
 *
 * @param native The native module, if any.
 * @param make Binds the kernels, e.g. `(m) => new Kernels(m)`.
 * @returns The bound kernels, or undefined.
 */
export function bindNative<T>(native: KernelModule | undefined, make: (m: KernelModule) => T): T | undefined {
  if (native === undefined) return undefined;
  try {
    return make(native);
  } catch (e) {
    if (e instanceof TypeError) return undefined;
    throw e;
  }
}
