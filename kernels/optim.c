/* Optimizer steps over float32 parameters with float32 state (the fp32 master copy of a sharded
 * trainer), element-wise, so the update of a shard is bit for bit the same elements of the update of the
 * whole tensor. The formulas are torch.optim's single-tensor ones; every scalar the host passes (as a
 * double) is rounded to float32 once, every operation is rounded (no fused multiply-add: -ffp-contract=off),
 * in the order written here, which the TypeScript reference (wasm/reference.ts) follows.
 *
 *   sgd (flags: 1 nesterov, 2 first step, 4 momentum):
 *     d = g + wd * p                      (d = g when wd is 0)
 *     momentum: m = first ? d : mu * m + (1 - dampening) * d;  d = nesterov ? d + mu * m : m
 *     p = p - lr * d
 *   adam (flags: 1 decoupled weight decay, AdamW):
 *     AdamW: p = p * decay                (decay = 1 - lr * wd, computed by the host)
 *     Adam:  g = g + wd * p               (when wd is not 0)
 *     m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
 *     p = p - stepSize * (m / (sqrt(v) / bc2sqrt + eps))
 *   with stepSize = lr / (1 - b1^t) and bc2sqrt = sqrt(1 - b2^t), computed by the host in double.
 * Return value: 0. */
#include "common.h"

#include <math.h>

DC_EXPORT(sgd_f32)
int dc_sgd_f32(float *restrict p, const float *restrict g, float *restrict m, size_t n, double lr,
               double momentum, double dampening, double wd, int flags) {
  const float flr = (float)lr, mu = (float)momentum, keep = (float)(1.0 - dampening), fwd = (float)wd;
  const int nesterov = flags & 1, first = flags & 2, withMomentum = flags & 4;
  for (size_t i = 0; i < n; i++) {
    float d = fwd != 0.0f ? g[i] + fwd * p[i] : g[i];
    if (withMomentum) {
      const float b = first ? d : mu * m[i] + keep * d;
      m[i] = b;
      d = nesterov ? d + mu * b : b;
    }
    p[i] = p[i] - flr * d;
  }
  return 0;
}

DC_EXPORT(adam_f32)
int dc_adam_f32(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                double step_size, double beta1, double beta2, double eps, double wd, double decay,
                double bc2sqrt, int flags) {
  const float ss = (float)step_size, b1 = (float)beta1, b2 = (float)beta2, c1 = (float)(1.0 - beta1),
              c2 = (float)(1.0 - beta2), e = (float)eps, fwd = (float)wd, fdecay = (float)decay,
              bc2 = (float)bc2sqrt;
  const int decoupled = flags & 1;
  for (size_t i = 0; i < n; i++) {
    float x = p[i], grad = g[i];
    if (decoupled) x = x * fdecay;
    else if (fwd != 0.0f) grad = grad + fwd * x;
    const float mi = b1 * m[i] + c1 * grad;
    const float vi = b2 * v[i] + c2 * (grad * grad);
    m[i] = mi;
    v[i] = vi;
    p[i] = x - ss * (mi / (sqrtf(vi) / bc2 + e));
  }
  return 0;
}
