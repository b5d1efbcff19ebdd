/**
 * The scalar TypeScript references of the optimizer kernels (`optim.ts`): every operation rounded to
 * float32 with `Math.fround`, in the order of `kernels/optim.c`, so the kernels must equal them bit for
 * bit. A float32 sum, product, quotient or square root computed in double and rounded once is the
 * correctly rounded float32 result, which is what WebAssembly's f32 instructions give.
 *
 * @module
 */
import { type AdamOptions, checkAdam, checkSgd, type SgdOptions } from "./optim.ts";

const f = Math.fround;

/**
 * One SGD step, in place; see `OptimizerKernels.sgd()`.
 *
 * @param param The parameter.
 * @param grad Its gradient.
 * @param options The hyperparameters and the momentum buffer.
 */
export function sgd(param: Float32Array, grad: Float32Array, options: SgdOptions): void {
  const { lr, momentum, dampening, weightDecay, flags } = checkSgd(param, grad, options);
  const flr = f(lr), mu = f(momentum), keep = f(1 - dampening), wd = f(weightDecay);
  const m = options.buffer ?? new Float32Array(0); // checked: present when momentum > 0
  for (let i = 0; i < param.length; i++) {
    let d = wd !== 0 ? f(grad[i] + f(wd * param[i])) : grad[i];
    if (flags & 4) {
      const b = flags & 2 ? d : f(f(mu * m[i]) + f(keep * d));
      m[i] = b;
      d = flags & 1 ? f(d + f(mu * b)) : b;
    }
    param[i] = f(param[i] - f(flr * d));
  }
}

/**
 * One Adam (or AdamW) step, in place; see `OptimizerKernels.adam()`.
 *
 * @param param The parameter.
 * @param grad Its gradient.
 * @param options The moments, the step number and the hyperparameters.
 */
export function adam(param: Float32Array, grad: Float32Array, options: AdamOptions): void {
  const s = checkAdam(param, grad, options);
  const ss = f(s.stepSize), b1 = f(s.beta1), b2 = f(s.beta2), c1 = f(1 - s.beta1), c2 = f(1 - s.beta2);
  const e = f(s.eps), wd = f(s.weightDecay), decay = f(s.decay), bc2 = f(s.bc2sqrt);
  const { m, v } = options;
  for (let i = 0; i < param.length; i++) {
    let x = param[i], g = grad[i];
    if (options.decoupled) x = f(x * decay);
    else if (wd !== 0) g = f(g + f(wd * x));
    const mi = f(f(b1 * m[i]) + f(c1 * g));
    const vi = f(f(b2 * v[i]) + f(c2 * f(g * g)));
    m[i] = mi;
    v[i] = vi;
    param[i] = f(x - f(ss * f(mi / f(f(f(Math.sqrt(vi)) / bc2) + e))));
  }
}
