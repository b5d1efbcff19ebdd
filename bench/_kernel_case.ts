/**
 * One row of `deno task bench:kernels`: how to run a kernel in WASM and as a plain TypeScript loop on the
 * same 64 MiB input, and which row of the native C program it is compared with.
 *
 * @module
 */
import type { KernelModule } from "../wasm/loader.ts";

/** A prepared pair of runs over the same data. */
export interface KernelRuns {
  /** One call of the WASM kernel (inputs already in wasm memory). */
  wasm(): void;
  /** One call of the plain TypeScript loop on JS arrays of the same size. */
  ts(): void;
  /** Throws if the WASM result disagrees with the TypeScript one (called once, after the timed runs). */
  check(): void;
}

/** A benchmark row. */
export interface KernelCase {
  /** The row's name, equal to the `name` the native program prints for the same kernel. */
  readonly name: string;
  /** The dtype, equal to the `dtype` the native program prints. */
  readonly dtype: string;
  /** Bytes read plus bytes written by one call. */
  readonly bytes: number;
  /** Allocates and fills the inputs; called once before timing. */
  setup(k: KernelModule): KernelRuns;
}
