/* BLAS-like kernels for the optimizer step and a small MLP on the CPU:
 *   scale:  x = alpha * x              float32 (dtype 8) and float64 (dtype 9)
 *   axpy:   y = y + alpha * x          float32 and float64; alpha is rounded to the dtype first
 *   matmul: C = op(A) . op(B) (+ C)    float32, row-major, op(A) m x k, op(B) k x n
 * There is no fused multiply-add (-ffp-contract=off): every product is rounded, then added, as the
 * TypeScript reference does. Each element of C is accumulated in order p = 0 .. k-1 starting from 0 (or
 * from C when accumulating), so blocking changes the speed but never the bits.
 * Return value: 0, or DC_EBADTYPE for a dtype other than float32/float64. */
#include "common.h"

#include <string.h>

#define DC_EBADTYPE (-1)

/* Blocks of 64 bytes over moving pointers, the loop shape of reduce.c (see BLOCK there): straight-line
 * SIMD with constant offsets. The restrict parameters let the blocks vectorize without overlap checks. */
#define SCALE(T)                                                                                       \
  static void scale_##T(T *restrict x, size_t n, T a) {                                                \
    for (; n >= 64 / sizeof(T); n -= 64 / sizeof(T), x += 64 / sizeof(T)) {                            \
      for (size_t i = 0; i < 64 / sizeof(T); i++) x[i] = x[i] * a;                                     \
    }                                                                                                  \
    for (size_t i = 0; i < n; i++) x[i] = x[i] * a;                                                    \
  }                                                                                                    \
  static void axpy_##T(T *restrict y, const T *restrict x, size_t n, T a) {                            \
    for (; n >= 64 / sizeof(T); n -= 64 / sizeof(T), y += 64 / sizeof(T), x += 64 / sizeof(T)) {       \
      for (size_t i = 0; i < 64 / sizeof(T); i++) y[i] = y[i] + a * x[i];                              \
    }                                                                                                  \
    for (size_t i = 0; i < n; i++) y[i] = y[i] + a * x[i];                                             \
  }                                                                                                    \
  /* y += a * y: one pointer, since restrict promises that y and x do not alias. */                    \
  static void axpy_self_##T(T *y, size_t n, T a) {                                                     \
    for (; n >= 64 / sizeof(T); n -= 64 / sizeof(T), y += 64 / sizeof(T)) {                            \
      for (size_t i = 0; i < 64 / sizeof(T); i++) y[i] = y[i] + a * y[i];                              \
    }                                                                                                  \
    for (size_t i = 0; i < n; i++) y[i] = y[i] + a * y[i];                                             \
  }

SCALE(float)
SCALE(double)

DC_EXPORT(scale)
int dc_scale(int dtype, void *x, size_t n, double alpha) {
  if (dtype == 8) return scale_float(x, n, (float)alpha), 0;
  if (dtype == 9) return scale_double(x, n, alpha), 0;
  return DC_EBADTYPE;
}

DC_EXPORT(axpy)
int dc_axpy(int dtype, void *y, const void *x, size_t n, double alpha) {
  if (dtype == 8) {
    if (y == x) axpy_self_float(y, n, (float)alpha);
    else axpy_float(y, x, n, (float)alpha);
    return 0;
  }
  if (dtype == 9) {
    if (y == x) axpy_self_double(y, n, alpha);
    else axpy_double(y, x, n, alpha);
    return 0;
  }
  return DC_EBADTYPE;
}

/* matmul. The micro-kernel keeps a 4 x 8 tile of C in eight 4-lane registers and streams a k-panel of
 * B through it; GCC/clang vector extensions give wasm SIMD (f32x4) and SSE/NEON alike. Blocks of KC x NC
 * of B stay in L2; when B is transposed such a block is first packed row-major into a static buffer (the
 * module is single-threaded: one instance per thread). */
typedef float v4 __attribute__((vector_size(16)));

#define MR 4
#define NR 8
#define KC 256
#define NC 128

static float packed[KC * NC];

/* The transposing copy is a gather/scatter: vectorized, it only gets slower. */
#ifdef __clang__
#define DC_NO_VECTORIZE _Pragma("clang loop vectorize(disable) interleave(disable)")
#else
#define DC_NO_VECTORIZE
#endif

static inline v4 ld4(const float *p) {
  v4 v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void st4(float *p, v4 v) { memcpy(p, &v, sizeof v); }
static inline v4 splat4(float x) { return (v4){x, x, x, x}; }

/* C[0..4, 0..8] (+)= sum over p of A[r, p] * B[p, 0..8]; A(r, p) = a[r * ars + p * acs]. The pointers
 * move instead of being recomputed from p (emscripten builds without loop strength reduction). */
static void tile_4x8(const float *a, size_t ars, size_t acs, const float *b, size_t brs, float *c,
                     size_t ldc, size_t kc, int load) {
  v4 z = splat4(0.0f);
  v4 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
  if (load) {
    c00 = ld4(c), c01 = ld4(c + 4);
    c10 = ld4(c + ldc), c11 = ld4(c + ldc + 4);
    c20 = ld4(c + 2 * ldc), c21 = ld4(c + 2 * ldc + 4);
    c30 = ld4(c + 3 * ldc), c31 = ld4(c + 3 * ldc + 4);
  }
  const float *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars;
  for (size_t p = 0; p < kc; p++, b += brs, a0 += acs, a1 += acs, a2 += acs, a3 += acs) {
    const v4 b0 = ld4(b), b1 = ld4(b + 4);
    const v4 x0 = splat4(*a0), x1 = splat4(*a1), x2 = splat4(*a2), x3 = splat4(*a3);
    c00 = c00 + x0 * b0, c01 = c01 + x0 * b1;
    c10 = c10 + x1 * b0, c11 = c11 + x1 * b1;
    c20 = c20 + x2 * b0, c21 = c21 + x2 * b1;
    c30 = c30 + x3 * b0, c31 = c31 + x3 * b1;
  }
  st4(c, c00), st4(c + 4, c01);
  st4(c + ldc, c10), st4(c + ldc + 4, c11);
  st4(c + 2 * ldc, c20), st4(c + 2 * ldc + 4, c21);
  st4(c + 3 * ldc, c30), st4(c + 3 * ldc + 4, c31);
}

/* One row of C, 8 columns: the rows left over below a multiple of 4. */
static void tile_1x8(const float *a, size_t acs, const float *b, size_t brs, float *c, size_t kc, int load) {
  v4 c0 = splat4(0.0f), c1 = c0;
  if (load) c0 = ld4(c), c1 = ld4(c + 4);
  for (size_t p = 0; p < kc; p++, a += acs, b += brs) {
    const v4 x = splat4(*a);
    c0 = c0 + x * ld4(b);
    c1 = c1 + x * ld4(b + 4);
  }
  st4(c, c0), st4(c + 4, c1);
}

/* Any rectangle, one element at a time, in the same order as the tiles: the columns left over. */
static void tile_any(const float *a, size_t ars, size_t acs, const float *b, size_t brs, float *c,
                     size_t ldc, size_t rows, size_t cols, size_t kc, int load) {
  for (size_t r = 0; r < rows; r++) {
    for (size_t j = 0; j < cols; j++) {
      float acc = load ? c[r * ldc + j] : 0.0f;
      for (size_t p = 0; p < kc; p++) acc = acc + a[r * ars + p * acs] * b[p * brs + j];
      c[r * ldc + j] = acc;
    }
  }
}

/* flags: bit 0 transA (A is stored k x m), bit 1 transB (B is stored n x k), bit 2 accumulate. */
DC_EXPORT(matmul)
int dc_matmul(const float *a, const float *b, float *c, size_t m, size_t k, size_t n, int flags) {
  const int trans_a = flags & 1, trans_b = (flags >> 1) & 1, accumulate = (flags >> 2) & 1;
  const size_t ars = trans_a ? 1 : k, acs = trans_a ? m : 1;
  if (k == 0) {
    if (!accumulate) memset(c, 0, m * n * sizeof *c);
    return 0;
  }
  for (size_t p0 = 0; p0 < k; p0 += KC) {
    const size_t kc = k - p0 < KC ? k - p0 : KC;
    const int load = accumulate || p0 > 0;
    for (size_t j0 = 0; j0 < n; j0 += NC) {
      const size_t nc = n - j0 < NC ? n - j0 : NC;
      const float *bp = b + p0 * n + j0;
      size_t brs = n;
      if (trans_b) {
        for (size_t j = 0; j < nc; j++) {
          const float *src = b + (j0 + j) * k + p0;
          float *dst = packed + j;
          DC_NO_VECTORIZE for (size_t p = 0; p < kc; p++, dst += nc) *dst = src[p];
        }
        bp = packed, brs = nc;
      }
      const size_t nv = nc - nc % NR;
      size_t i = 0;
      for (; i + MR <= m; i += MR) {
        const float *ap = a + i * ars + p0 * acs;
        float *cp = c + i * n + j0;
        for (size_t j = 0; j < nv; j += NR) tile_4x8(ap, ars, acs, bp + j, brs, cp + j, n, kc, load);
        tile_any(ap, ars, acs, bp + nv, brs, cp + nv, n, MR, nc - nv, kc, load);
      }
      for (; i < m; i++) {
        const float *ap = a + i * ars + p0 * acs;
        float *cp = c + i * n + j0;
        for (size_t j = 0; j < nv; j += NR) tile_1x8(ap, acs, bp + j, brs, cp + j, kc, load);
        tile_any(ap, ars, acs, bp + nv, brs, cp + nv, n, 1, nc - nv, kc, load);
      }
    }
  }
  return 0;
}
