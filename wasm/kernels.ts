/**
 * Typed wrappers over the WASM kernels (placeholder until the kernels land).
 *
 * @module
 */
export { loadKernelModule } from "./loader.ts";
