/**
 * Optimizer steps in WASM over float32 parameters and float32 state: SGD with momentum (dampening,
 * Nesterov, weight decay) and Adam/AdamW (bias correction, L2 or decoupled weight decay), torch.optim's
 * single-tensor formulas (`kernels/optim.c` states them). The update is element-wise, so the step of a
 * shard (a slice of a parameter, as a sharded trainer keeps) is bit for bit the same elements of the step
 * of the whole parameter, and the result equals the TypeScript reference (`optim_reference.ts`) bit for
 * bit: every operation is rounded to float32 in the order of the C source, no fused multiply-add.
 *
 * Arrays outside wasm memory are staged for the call (copied in, and the updated ones back); arrays of
 * one call must not share memory.
 *
 * @example Two Adam steps on a parameter of two elements
 * ```ts
 * import { optimizerKernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await optimizerKernels();
 * const p = new Float32Array([1, -1]), m = new Float32Array(2), v = new Float32Array(2);
 * k.adam(p, new Float32Array([0.5, -2]), { m, v, step: 1, lr: 0.1 });
 * assert.deepEqual(Array.from(p, (x) => x.toFixed(4)), ["0.9000", "-0.9000"]); // lr · sign(g) at step 1
 * k.adam(p, new Float32Array([0.5, -2]), { m, v, step: 2, lr: 0.1 });
 * assert.ok(p[0] < 0.9 && p[1] > -0.9);
 * ```
 *
 * @module
 */
import type { KernelFn, KernelModule, WasmHeap } from "./loader.ts";
import { loadKernelModule } from "./loader.ts";

/**
 * Options of {@linkcode OptimizerKernels.sgd}: torch.optim.SGD's hyperparameters, and the momentum buffer
 * the caller keeps from step to step.
 *
 * @example SGD with Nesterov momentum and weight decay
 * ```ts
 * import { optimizerKernels, type SgdOptions } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await optimizerKernels();
 * const p = new Float32Array([1, 2]);
 * const options: SgdOptions = { lr: 0.5, momentum: 0.9, nesterov: true, weightDecay: 0.01, buffer: new Float32Array(2), first: true };
 * k.sgd(p, new Float32Array([1, 1]), options);
 * assert.ok(p[0] < 1 && p[1] < 2);
 * ```
 */
export interface SgdOptions {
  /** The learning rate, a finite number >= 0. */
  lr: number;
  /** The momentum factor in [0, 1); 0 keeps no buffer. @default 0 */
  momentum?: number;
  /** Dampening of the momentum, in [0, 1]. @default 0 */
  dampening?: number;
  /** L2 weight decay (added to the gradient), >= 0. @default 0 */
  weightDecay?: number;
  /** Nesterov momentum (needs momentum > 0 and dampening 0). @default false */
  nesterov?: boolean;
  /** The momentum buffer, one float32 per element, kept by the caller: required when momentum > 0. */
  buffer?: Float32Array;
  /** The first step: the buffer starts as the gradient (torch's), whatever it held. @default false */
  first?: boolean;
}

/**
 * Options of {@linkcode OptimizerKernels.adam}: torch.optim.Adam's and AdamW's hyperparameters, the step
 * number, and the two moment buffers the caller keeps.
 *
 * @example AdamW's decoupled weight decay shrinks the parameter even with a zero gradient
 * ```ts
 * import { type AdamOptions, optimizerKernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await optimizerKernels();
 * const p = new Float32Array([2]);
 * const options: AdamOptions = { m: new Float32Array(1), v: new Float32Array(1), step: 1, lr: 0.1, weightDecay: 0.5, decoupled: true };
 * k.adam(p, new Float32Array([0]), options);
 * assert.equal(p[0], Math.fround(2 * Math.fround(1 - 0.1 * 0.5))); // 2 · (1 − lr · wd)
 * ```
 */
export interface AdamOptions {
  /** The first moment, one float32 per element (zeros before step 1). */
  m: Float32Array;
  /** The second moment, one float32 per element (zeros before step 1). */
  v: Float32Array;
  /** The step number, an integer >= 1 (bias correction uses it). */
  step: number;
  /** The learning rate, a finite number >= 0. @default 0.001 */
  lr?: number;
  /** β1, in [0, 1). @default 0.9 */
  beta1?: number;
  /** β2, in [0, 1). @default 0.999 */
  beta2?: number;
  /** ε, > 0. @default 1e-8 */
  eps?: number;
  /** Weight decay, >= 0: L2 (added to the gradient) for Adam, decoupled for AdamW. @default 0 */
  weightDecay?: number;
  /** AdamW: decay the parameter by `1 − lr · weightDecay` instead of adding to the gradient. @default false */
  decoupled?: boolean;
}

/** The scalars the Adam kernel takes, computed in double as torch computes them. */
export interface AdamScalars {
  /** lr / (1 − β1^step). */
  stepSize: number;
  /** sqrt(1 − β2^step). */
  bc2sqrt: number;
  /** 1 − lr · weightDecay (AdamW). */
  decay: number;
  /** The hyperparameters with their defaults. */
  lr: number;
  /** β1. */
  beta1: number;
  /** β2. */
  beta2: number;
  /** ε. */
  eps: number;
  /** The weight decay. */
  weightDecay: number;
}

function finite(
  verb: string,
  name: string,
  value: unknown,
  min: number,
  max: number,
  maxOpen: boolean,
): number {
  if (
    typeof value !== "number" || !Number.isFinite(value) || value < min ||
    (maxOpen ? value >= max : value > max)
  ) {
    const range = `${min}..${max}${maxOpen ? " (exclusive)" : ""}`;
    throw new RangeError(
      `Cannot ${verb}: ${name} must be a finite number in ${range}, found ${String(value)}`,
    );
  }
  return value;
}

function vector(verb: string, name: string, a: unknown, n: number): Float32Array {
  if (!(a instanceof Float32Array)) {
    const found = a === undefined ? "none" : (a as object)?.constructor?.name ?? typeof a;
    throw new TypeError(`Cannot ${verb}: ${name} must be a Float32Array, found ${found}`);
  }
  if (a.length !== n) {
    throw new RangeError(
      `Cannot ${verb}: ${name} must have ${n} elements like the parameter, found ${a.length}`,
    );
  }
  return a;
}

function disjoint(verb: string, arrays: readonly [string, Float32Array][]): void {
  for (let i = 0; i < arrays.length; i++) {
    for (let j = i + 1; j < arrays.length; j++) {
      const [an, a] = arrays[i], [bn, b] = arrays[j];
      if (a.buffer !== b.buffer) continue;
      if (a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength) {
        throw new RangeError(`Cannot ${verb}: ${an} and ${bn} share memory`);
      }
    }
  }
}

/** The checked SGD call: the scalars and the kernel's flags (1 nesterov, 2 first, 4 momentum). */
export function checkSgd(
  param: Float32Array,
  grad: Float32Array,
  options: SgdOptions,
): { lr: number; momentum: number; dampening: number; weightDecay: number; flags: number } {
  const verb = "run an SGD step";
  vector(verb, "param", param, param?.length ?? 0);
  vector(verb, "grad", grad, param.length);
  if (options === null || typeof options !== "object") {
    throw new TypeError(`Cannot ${verb}: expected options with lr, found ${String(options)}`);
  }
  const lr = finite(verb, "lr", options.lr, 0, Infinity, false);
  const momentum = finite(verb, "momentum", options.momentum ?? 0, 0, 1, true);
  const dampening = finite(verb, "dampening", options.dampening ?? 0, 0, 1, false);
  const weightDecay = finite(verb, "weightDecay", options.weightDecay ?? 0, 0, Infinity, false);
  const nesterov = options.nesterov ?? false;
  if (nesterov && (momentum === 0 || dampening !== 0)) {
    throw new RangeError(
      `Cannot ${verb}: nesterov needs momentum > 0 and dampening 0, found momentum ${momentum}, dampening ${dampening}`,
    );
  }
  const arrays: [string, Float32Array][] = [["param", param], ["grad", grad]];
  if (momentum > 0) arrays.push(["buffer", vector(verb, "buffer", options.buffer, param.length)]);
  disjoint(verb, arrays);
  const flags = (nesterov ? 1 : 0) | (options.first ? 2 : 0) | (momentum > 0 ? 4 : 0);
  return { lr, momentum, dampening, weightDecay, flags };
}

/** The checked Adam call: its scalars, computed in double. */
export function checkAdam(param: Float32Array, grad: Float32Array, options: AdamOptions): AdamScalars {
  const verb = "run an Adam step";
  vector(verb, "param", param, param?.length ?? 0);
  vector(verb, "grad", grad, param.length);
  if (options === null || typeof options !== "object") {
    throw new TypeError(`Cannot ${verb}: expected options with m, v and step, found ${String(options)}`);
  }
  const m = vector(verb, "m", options.m, param.length), v = vector(verb, "v", options.v, param.length);
  disjoint(verb, [["param", param], ["grad", grad], ["m", m], ["v", v]]);
  const step = options.step;
  if (!Number.isSafeInteger(step) || step < 1) {
    throw new RangeError(`Cannot ${verb}: step must be an integer >= 1, found ${String(step)}`);
  }
  const lr = finite(verb, "lr", options.lr ?? 1e-3, 0, Infinity, false);
  const beta1 = finite(verb, "beta1", options.beta1 ?? 0.9, 0, 1, true);
  const beta2 = finite(verb, "beta2", options.beta2 ?? 0.999, 0, 1, true);
  const eps = finite(verb, "eps", options.eps ?? 1e-8, Number.MIN_VALUE, Infinity, false);
  const weightDecay = finite(verb, "weightDecay", options.weightDecay ?? 0, 0, Infinity, false);
  return {
    stepSize: lr / (1 - beta1 ** step),
    bc2sqrt: Math.sqrt(1 - beta2 ** step),
    decay: 1 - lr * weightDecay,
    lr,
    beta1,
    beta2,
    eps,
    weightDecay,
  };
}

/**
 * The optimizer kernels, bound to this thread's instance of `kernels.wasm`. Get it with
 * {@linkcode optimizerKernels}.
 *
 * @example Plain SGD: p − lr · g
 * ```ts
 * import { optimizerKernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * const k = await optimizerKernels();
 * const p = new Float32Array([1, 1]);
 * k.sgd(p, new Float32Array([2, -2]), { lr: 0.25 });
 * assert.deepEqual(p, new Float32Array([0.5, 1.5]));
 * ```
 */
export class OptimizerKernels {
  #heap: WasmHeap;
  #sgd: KernelFn;
  #adam: KernelFn;

  /**
   * Binds the kernels to a loaded module; {@linkcode optimizerKernels} does this once per thread.
   *
   * @param module The loaded module.
   * @throws {TypeError} If the module lacks a kernel (a stale `kernels.wasm`).
   */
  constructor(module: KernelModule) {
    this.#heap = module.heap;
    this.#sgd = module.fn("sgd_f32");
    this.#adam = module.fn("adam_f32");
  }

  /** The stack allocator over wasm memory, for arrays the kernels should use in place. */
  get heap(): WasmHeap {
    return this.#heap;
  }

  /**
   * One SGD step, in place: `param` and (with momentum) `options.buffer` are updated.
   *
   * @param param The parameter (or a shard of it).
   * @param grad Its gradient, same length.
   * @param options The hyperparameters and the momentum buffer.
   * @throws {TypeError} On arrays that are not Float32Arrays, or missing options.
   * @throws {RangeError} On a hyperparameter out of range, arrays of other lengths, or arrays that share memory.
   *
   * @example Momentum: the second step moves further
   * ```ts
   * import { optimizerKernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await optimizerKernels();
   * const p = new Float32Array([0]), buffer = new Float32Array(1), g = new Float32Array([1]);
   * k.sgd(p, g, { lr: 1, momentum: 0.5, buffer, first: true });
   * k.sgd(p, g, { lr: 1, momentum: 0.5, buffer });
   * assert.deepEqual(p, new Float32Array([-2.5])); // −1, then −1.5
   * ```
   */
  sgd(param: Float32Array, grad: Float32Array, options: SgdOptions): void {
    const { lr, momentum, dampening, weightDecay, flags } = checkSgd(param, grad, options);
    const n = param.length;
    if (n === 0) return;
    const heap = this.#heap, mark = heap.top;
    const buffer = flags & 4 ? options.buffer : undefined;
    try {
      const p = heap.stage(param), g = heap.stage(grad), m = buffer ? heap.stage(buffer) : 0;
      this.#sgd(p, g, m, n, lr, momentum, dampening, weightDecay, flags);
      heap.unstage(p, param);
      if (buffer) heap.unstage(m, buffer);
    } finally {
      heap.reset(mark);
    }
  }

  /**
   * One Adam (or AdamW) step, in place: `param`, `options.m` and `options.v` are updated.
   *
   * @param param The parameter (or a shard of it).
   * @param grad Its gradient, same length.
   * @param options The moments, the step number and the hyperparameters.
   * @throws {TypeError} On arrays that are not Float32Arrays, or missing options.
   * @throws {RangeError} On a hyperparameter out of range, arrays of other lengths, or arrays that share memory.
   *
   * @example The step of a shard is the same elements of the whole step
   * ```ts
   * import { optimizerKernels } from "@dcomm/dcomm/kernels";
   * import assert from "node:assert/strict";
   * const k = await optimizerKernels();
   * const g = new Float32Array([0.1, -0.2, 0.3, -0.4]);
   * const whole = new Float32Array([1, 2, 3, 4]), shard = whole.slice(2);
   * k.adam(whole, g, { m: new Float32Array(4), v: new Float32Array(4), step: 1 });
   * k.adam(shard, g.subarray(2), { m: new Float32Array(2), v: new Float32Array(2), step: 1 });
   * assert.deepEqual(shard, whole.subarray(2));
   * ```
   */
  adam(param: Float32Array, grad: Float32Array, options: AdamOptions): void {
    const s = checkAdam(param, grad, options);
    const n = param.length;
    if (n === 0) return;
    const heap = this.#heap, mark = heap.top;
    try {
      const p = heap.stage(param), g = heap.stage(grad), m = heap.stage(options.m), v = heap.stage(options.v);
      this.#adam(
        p,
        g,
        m,
        v,
        n,
        s.stepSize,
        s.beta1,
        s.beta2,
        s.eps,
        s.weightDecay,
        s.decay,
        s.bc2sqrt,
        options.decoupled ? 1 : 0,
      );
      heap.unstage(p, param);
      heap.unstage(m, options.m);
      heap.unstage(v, options.v);
    } finally {
      heap.reset(mark);
    }
  }
}

let instance: OptimizerKernels | undefined;

/**
 * The optimizer kernels of this thread, loading `kernels.wasm` on first use.
 *
 * @returns The kernels.
 * @throws {TypeError} If `kernels.wasm` lacks an optimizer kernel (rebuild it with `deno task build:wasm`).
 *
 * @example
 * ```ts
 * import { optimizerKernels } from "@dcomm/dcomm/kernels";
 * import assert from "node:assert/strict";
 * assert.equal(await optimizerKernels(), await optimizerKernels());
 * ```
 */
export async function optimizerKernels(): Promise<OptimizerKernels> {
  instance ??= new OptimizerKernels(await loadKernelModule());
  return instance;
}
