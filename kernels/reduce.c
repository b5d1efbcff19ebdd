/* Element-wise reductions, the arithmetic of every CPU collective:
 *   reduce:       dst = op(dst, src)                     op in sum, prod, min, max, band, bor, bxor
 *   reduce_n:     dst = op(src[0], src[1], ..., src[k-1])  op in sum, prod, min, max, avg, band, bor, bxor
 *   premul_sum_n: dst = src[0]*f + src[1]*f + ... + src[k-1]*f   floats only (premulSum)
 *   divide:       dst = dst / divisor                    the finisher of avg after a sum over ranks
 * for every dtype. Codes follow dcomm's own order (core/dtype.ts: DTYPES and REDUCE_OPS): dtype int8=0
 * uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64=9 bool=10, op sum=0 prod=1 min=2 max=3
 * avg=4 band=5 bor=6 bxor=7 (premulSum=8 is premul_sum_n's). The TypeScript reference (wasm/reference.ts)
 * computes the same bits.
 *
 * Semantics:
 * - Integers wrap (two's complement); the arithmetic is done unsigned so that wrapping is defined.
 * - band/bor/bxor are the bitwise and/or/xor of integers and bools; floats have none (DC_EBADOP).
 * - bool (0/1 bytes, torch.bool) reduces as uint8 by one table: sum, max, bor are max (a logical or),
 *   prod, min, band are min (a logical and), bxor is xor; avg, premulSum and divide refuse it.
 * - float16/bfloat16 are computed in float32. reduce rounds once per call (per binary step). reduce_n
 *   accumulates all k inputs in float32 and rounds once at the end (after the scaling of avg), which is
 *   both faster and more accurate than k-1 rounded steps.
 * - avg = sum, then for floats a multiplication by 1/k computed in the compute precision (float32 for
 *   the 16-bit formats), NCCL's "sum then scale"; for integers a C division (truncation toward zero).
 * - premul_sum_n multiplies in the dtype's precision, then sums as reduce_n does: the factor is rounded to
 *   the dtype, each product is rounded to the dtype (float16/bfloat16: the exact float32 product rounded
 *   to the 16-bit format), and the products are accumulated in the compute type in source order and
 *   rounded once. A backend's premulSum is premul_sum_n over one source (a rank's own input), then a sum.
 * - min/max are IEEE 754-2019 minimum/maximum: NaN if either input is NaN; min(-0,+0) = -0 and
 *   max(-0,+0) = +0 (wasm's f32.min/f32.max).
 * - dst may be exactly one of the sources; partial overlap is not allowed.
 * Return value: 0, or DC_EBADTYPE / DC_EBADOP / DC_EBADARG. */
#include "common.h"
#include "half.h"

#if defined(__GNUC__) && !defined(__clang__)
/* gcc cannot bound the block loops over the accumulator and warns of an overflow that cannot happen. */
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#define DC_EBADTYPE (-1)
#define DC_EBADOP (-2)
#define DC_EBADARG (-3)

/* Elements per pass of reduce_n: its float32/float64 accumulator stays in L1 (8 KiB at most). */
#define CHUNK 1024

#define ID(x) (x)

/* Integer ops. U is the unsigned type of the same width: unsigned arithmetic wraps instead of being UB.
 * (uint8_t operands promote to int, whose range holds 255 * 255.) */
#define INT_OPS(S, T, U)                                                                               \
  static inline T op_sum_##S(T a, T b) { return (T)(U)((U)a + (U)b); }                                 \
  static inline T op_prod_##S(T a, T b) { return (T)(U)((U)a * (U)b); }                                \
  static inline T op_min_##S(T a, T b) { return b < a ? b : a; }                                       \
  static inline T op_max_##S(T a, T b) { return a < b ? b : a; }                                       \
  static inline T op_band_##S(T a, T b) { return (T)(a & b); }                                         \
  static inline T op_bor_##S(T a, T b) { return (T)(a | b); }                                          \
  static inline T op_bxor_##S(T a, T b) { return (T)(a ^ b); }

INT_OPS(i8, int8_t, uint8_t)
INT_OPS(u8, uint8_t, uint8_t)
INT_OPS(i32, int32_t, uint32_t)
INT_OPS(u32, uint32_t, uint32_t)
INT_OPS(i64, int64_t, uint64_t)
INT_OPS(u64, uint64_t, uint64_t)

static inline float op_sum_f32(float a, float b) { return a + b; }
static inline float op_prod_f32(float a, float b) { return a * b; }
static inline double op_sum_f64(double a, double b) { return a + b; }
static inline double op_prod_f64(double a, double b) { return a * b; }

#ifdef __wasm__
/* llvm.minimum/maximum: f32.min/f32.max, and f32x4.min/max once vectorized. */
static inline float op_min_f32(float a, float b) { return __builtin_wasm_min_f32(a, b); }
static inline float op_max_f32(float a, float b) { return __builtin_wasm_max_f32(a, b); }
static inline double op_min_f64(double a, double b) { return __builtin_wasm_min_f64(a, b); }
static inline double op_max_f64(double a, double b) { return __builtin_wasm_max_f64(a, b); }
#else
/* The same semantics for the native build, as selects so that gcc vectorizes them: equal operands
 * (which covers -0 vs +0) combine their sign bits, and a NaN operand makes the result NaN. */
static inline uint64_t dc_f64_bits(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline double dc_bits_f64(uint64_t u) {
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline float op_min_f32(float a, float b) {
  float m = a < b ? a : b;
  m = a == b ? dc_bits_f32(dc_f32_bits(a) | dc_f32_bits(b)) : m;
  return a != a || b != b ? a + b : m;
}
static inline float op_max_f32(float a, float b) {
  float m = a > b ? a : b;
  m = a == b ? dc_bits_f32(dc_f32_bits(a) & dc_f32_bits(b)) : m;
  return a != a || b != b ? a + b : m;
}
static inline double op_min_f64(double a, double b) {
  double m = a < b ? a : b;
  m = a == b ? dc_bits_f64(dc_f64_bits(a) | dc_f64_bits(b)) : m;
  return a != a || b != b ? a + b : m;
}
static inline double op_max_f64(double a, double b) {
  double m = a > b ? a : b;
  m = a == b ? dc_bits_f64(dc_f64_bits(a) & dc_f64_bits(b)) : m;
  return a != a || b != b ? a + b : m;
}
#endif

/* Every dtype: X(suffix, storage type, compute type, ops suffix, load, store, kind), kind being how avg
 * and divide finish (FLT: multiply by the inverse; SGN/UNS: integer division). DC_TYPES is NCCL's order;
 * the 16-bit floats have a list of their own, as wasm gives them hand-vectorized loops. */
#define DC_INT_TYPES(X)                                                                                \
  X(i8, int8_t, int8_t, i8, ID, ID, SGN)                                                               \
  X(u8, uint8_t, uint8_t, u8, ID, ID, UNS)                                                             \
  X(i32, int32_t, int32_t, i32, ID, ID, SGN)                                                           \
  X(u32, uint32_t, uint32_t, u32, ID, ID, UNS)                                                         \
  X(i64, int64_t, int64_t, i64, ID, ID, SGN)                                                           \
  X(u64, uint64_t, uint64_t, u64, ID, ID, UNS)
#define DC_HALF_TYPES(X)                                                                               \
  X(f16, uint16_t, float, f32, dc_f16_to_f32, dc_f32_to_f16, FLT)                                      \
  X(bf16, uint16_t, float, f32, dc_bf16_to_f32, dc_f32_to_bf16, FLT)
#define DC_FLOAT_TYPES(X)                                                                              \
  X(f32, float, float, f32, ID, ID, FLT)                                                               \
  X(f64, double, double, f64, ID, ID, FLT)
#define DC_TYPES(X) DC_INT_TYPES(X) DC_HALF_TYPES(X) DC_FLOAT_TYPES(X)

/* Elements in a block of 64 bytes. The loops walk blocks over moving pointers: emscripten builds without
 * loop strength reduction, so an indexed loop recomputes every address, while a fixed-size block becomes
 * straight-line SIMD with constant offsets (about 20% faster in cache). The tails are plain loops. */
#define BLOCK(T) (64 / sizeof(T))

/* dst = op(dst, src): one streaming pass over the two halves at once, a block of each per step. Two
 * streams per array keep twice as many cache misses in flight as one, which is what bounds a kernel that
 * does one operation per element: 64 MiB float32 sums went from 12.3 to 14.2 GB/s in wasm (and from 15 to
 * 17 natively) on the development machine. The restrict parameters (restrict on locals is ignored by
 * clang) let the blocks vectorize without runtime overlap checks. */
#define BINARY(OP, TS, T, A, AS, LOAD, STORE)                                                          \
  static inline void OP##_2_##TS##_run(T *restrict d, const T *restrict s, size_t n) {                 \
    const size_t half = n / 2 / BLOCK(T) * BLOCK(T);                                                   \
    T *d2 = d + half;                                                                                  \
    const T *s2 = s + half;                                                                            \
    for (size_t m = half; m >= BLOCK(T); m -= BLOCK(T)) {                                              \
      for (size_t i = 0; i < BLOCK(T); i++) d[i] = STORE(op_##OP##_##AS(LOAD(d[i]), LOAD(s[i])));      \
      for (size_t i = 0; i < BLOCK(T); i++) d2[i] = STORE(op_##OP##_##AS(LOAD(d2[i]), LOAD(s2[i])));   \
      d += BLOCK(T), s += BLOCK(T), d2 += BLOCK(T), s2 += BLOCK(T);                                    \
    }                                                                                                  \
    n -= 2 * half;                                                                                     \
    for (; n >= BLOCK(T); n -= BLOCK(T), d2 += BLOCK(T), s2 += BLOCK(T)) {                             \
      for (size_t i = 0; i < BLOCK(T); i++) d2[i] = STORE(op_##OP##_##AS(LOAD(d2[i]), LOAD(s2[i])));   \
    }                                                                                                  \
    DC_SCALAR for (size_t i = 0; i < n; i++) d2[i] = STORE(op_##OP##_##AS(LOAD(d2[i]), LOAD(s2[i])));  \
  }                                                                                                    \
  static void OP##_2_##TS(void *d, const void *s, size_t n) { OP##_2_##TS##_run(d, s, n); }

/* How avg ends: PRO declares what FIN needs; k (the source count) is in scope. */
#define AVG_PRO_FLT(A) const A inv = (A)1 / (A)k;
#define AVG_FIN_FLT(A, x) ((x) * inv)
#define AVG_PRO_SGN(A)
#define AVG_FIN_SGN(A, x) ((A)((int64_t)(x) / (int64_t)k))
#define AVG_PRO_UNS(A)
#define AVG_FIN_UNS(A, x) ((A)((uint64_t)(x) / (uint64_t)k))
#define PRO_NONE(A)
#define FIN_ID(A, x) (x)

/* One pass over a chunk: a[i] = EXPR for i in [0, len), where EXPR reads p[i] (and q[i]). */
#define PASS(A, a0, P, p0, Q, q0, len, EXPR)                                                           \
  do {                                                                                                 \
    A *a = (a0);                                                                                       \
    P p = (p0);                                                                                        \
    Q q = (q0);                                                                                        \
    size_t m = (len);                                                                                  \
    for (; m >= BLOCK(A); m -= BLOCK(A), a += BLOCK(A), p += BLOCK(A), q += BLOCK(A)) {                \
      for (size_t i = 0; i < BLOCK(A); i++) a[i] = EXPR;                                               \
    }                                                                                                  \
    DC_SCALAR for (size_t i = 0; i < m; i++) a[i] = EXPR;                                              \
  } while (0)

/* dst = FIN(op(src[0], ..., src[k-1])). With 2 to 4 sources and a dst apart from them, one streaming
 * pass (restrict parameters: the sources may coincide, as they are only read). Otherwise CHUNK elements
 * at a time: the sources are folded into a local accumulator, which is then stored; the accumulator
 * cannot alias anything, so every pass vectorizes without overlap checks, and dst may be one of the
 * sources, as a chunk of dst is written only after every source's chunk was read. Either way each
 * element is op(op(op(s0, s1), s2), ...) in the compute type, rounded once: the same bits. */
#define DIRECT(NAME, PRO, T, A, EXPR)                                                                  \
  static inline void NAME(T *restrict d, const T *restrict s0, const T *restrict s1, const T *restrict s2, \
                          const T *restrict s3, size_t k, size_t n) {                                  \
    (void)s2, (void)s3, (void)k; /* not every arity or op reads them */                                \
    PRO(A)                                                                                             \
    size_t i0 = 0;                                                                                     \
    for (; i0 + BLOCK(T) <= n; i0 += BLOCK(T)) {                                                       \
      for (size_t i = i0; i < i0 + BLOCK(T); i++) d[i] = EXPR;                                         \
    }                                                                                                  \
    DC_SCALAR for (size_t i = i0; i < n; i++) d[i] = EXPR;                                             \
  }
#define NARY(NAME, COMBINE, PRO, FIN, TS, T, A, LOAD, STORE)                                           \
  DIRECT(NAME##_2, PRO, T, A, STORE(FIN(A, COMBINE(LOAD(s0[i]), LOAD(s1[i])))))                        \
  DIRECT(NAME##_3, PRO, T, A, STORE(FIN(A, COMBINE(COMBINE(LOAD(s0[i]), LOAD(s1[i])), LOAD(s2[i])))))  \
  DIRECT(NAME##_4, PRO, T, A,                                                                          \
         STORE(FIN(A, COMBINE(COMBINE(COMBINE(LOAD(s0[i]), LOAD(s1[i])), LOAD(s2[i])), LOAD(s3[i])))))  \
  static void NAME(void *dv, const void *const *sv, size_t k, size_t n) {                              \
    T *d = dv;                                                                                         \
    if (k >= 2 && k <= 4 && apart(dv, sv, k)) {                                                        \
      const T *s0 = sv[0], *s1 = sv[1], *s2 = sv[k > 2 ? 2 : 0], *s3 = sv[k > 3 ? 3 : 0];              \
      if (k == 2) NAME##_2(d, s0, s1, s2, s3, k, n);                                                   \
      else if (k == 3) NAME##_3(d, s0, s1, s2, s3, k, n);                                              \
      else NAME##_4(d, s0, s1, s2, s3, k, n);                                                          \
      return;                                                                                          \
    }                                                                                                  \
    PRO(A)                                                                                             \
    A acc[CHUNK];                                                                                      \
    for (size_t off = 0; off < n; off += CHUNK) {                                                      \
      const size_t len = n - off < CHUNK ? n - off : CHUNK;                                            \
      const T *s0 = (const T *)sv[0] + off, *s1 = (const T *)sv[k > 1] + off;                          \
      if (k == 1) PASS(A, acc, const T *, s0, const T *, s0, len, LOAD(p[i]));                         \
      else PASS(A, acc, const T *, s0, const T *, s1, len, COMBINE(LOAD(p[i]), LOAD(q[i])));           \
      for (size_t j = 2; j < k; j++) {                                                                 \
        const T *sj = (const T *)sv[j] + off;                                                          \
        PASS(A, acc, const T *, sj, const T *, sj, len, COMBINE(a[i], LOAD(p[i])));                    \
      }                                                                                                \
      PASS(T, d + off, const A *, acc, const A *, acc, len, STORE(FIN(A, p[i])));                      \
    }                                                                                                  \
  }

/* Whether dst is none of the k sources (partial overlaps are the caller's contract not to make). */
static inline int apart(const void *dst, const void *const *srcs, size_t k) {
  for (size_t j = 0; j < k; j++) {
    if (srcs[j] == dst) return 0;
  }
  return 1;
}

/* divide: floats multiply by the inverse in the compute precision; integers divide in 64 bits, where
 * every quotient fits (the caller checked that the divisor is an integer >= 1). */
#define DIVIDE_FLT(TS, T, A, LOAD, STORE)                                                              \
  static void divide_##TS(void *dv, size_t n, double divisor) {                                        \
    T *d = dv;                                                                                         \
    const A inv = (A)1 / (A)divisor;                                                                   \
    for (; n >= BLOCK(T); n -= BLOCK(T), d += BLOCK(T)) {                                              \
      for (size_t i = 0; i < BLOCK(T); i++) d[i] = STORE(LOAD(d[i]) * inv);                            \
    }                                                                                                  \
    DC_SCALAR for (size_t i = 0; i < n; i++) d[i] = STORE(LOAD(d[i]) * inv);                           \
  }
#define DIVIDE_SGN(TS, T, A, LOAD, STORE)                                                              \
  static void divide_##TS(void *dv, size_t n, double divisor) {                                        \
    T *restrict d = dv;                                                                                \
    const int64_t q = (int64_t)divisor;                                                                \
    for (size_t i = 0; i < n; i++) d[i] = (T)((int64_t)d[i] / q);                                      \
  }
#define DIVIDE_UNS(TS, T, A, LOAD, STORE)                                                              \
  static void divide_##TS(void *dv, size_t n, double divisor) {                                        \
    T *restrict d = dv;                                                                                \
    const uint64_t q = (uint64_t)divisor;                                                              \
    for (size_t i = 0; i < n; i++) d[i] = (T)((uint64_t)d[i] / q);                                     \
  }

#define DEFINE_TYPE(TS, T, A, AS, LOAD, STORE, KIND)                                                   \
  BINARY(sum, TS, T, A, AS, LOAD, STORE)                                                               \
  BINARY(prod, TS, T, A, AS, LOAD, STORE)                                                              \
  BINARY(min, TS, T, A, AS, LOAD, STORE)                                                               \
  BINARY(max, TS, T, A, AS, LOAD, STORE)                                                               \
  NARY(sum_n_##TS, op_sum_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                               \
  NARY(prod_n_##TS, op_prod_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                             \
  NARY(min_n_##TS, op_min_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                               \
  NARY(max_n_##TS, op_max_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                               \
  NARY(avg_n_##TS, op_sum_##AS, AVG_PRO_##KIND, AVG_FIN_##KIND, TS, T, A, LOAD, STORE)                 \
  DIVIDE_##KIND(TS, T, A, LOAD, STORE)

DC_INT_TYPES(DEFINE_TYPE)
DC_FLOAT_TYPES(DEFINE_TYPE)

/* The bitwise ops, integers only. */
#define DEFINE_BITWISE(TS, T, A, AS, LOAD, STORE, KIND)                                                \
  BINARY(band, TS, T, A, AS, LOAD, STORE)                                                              \
  BINARY(bor, TS, T, A, AS, LOAD, STORE)                                                               \
  BINARY(bxor, TS, T, A, AS, LOAD, STORE)                                                              \
  NARY(band_n_##TS, op_band_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                             \
  NARY(bor_n_##TS, op_bor_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)                               \
  NARY(bxor_n_##TS, op_bxor_##AS, PRO_NONE, FIN_ID, TS, T, A, LOAD, STORE)

DC_INT_TYPES(DEFINE_BITWISE)

#ifndef __wasm__
DC_HALF_TYPES(DEFINE_TYPE)
#else
/* float16/bfloat16 under wasm: the same arithmetic eight elements at a time with the four-lane
 * conversions of half.h (see there why they are intrinsics); the scalar tails are the generic code. */
#define VOP_sum wasm_f32x4_add
#define VOP_prod wasm_f32x4_mul
#define VOP_min wasm_f32x4_min /* f32x4.min: IEEE minimum, as __builtin_wasm_min_f32 */
#define VOP_max wasm_f32x4_max
/* Loads need not quiet NaNs: any NaN operand makes the result a NaN. */
#define VLO_f16(v, k) DC_F16_LO((v), (k), 0)
#define VHI_f16(v, k) DC_F16_HI((v), (k), 0)
#define VLO_bf16(v, k) DC_BF16_LO((v), (k), 0)
#define VHI_bf16(v, k) DC_BF16_HI((v), (k), 0)
#define VSTORE_f16(v, k) dc_f32x4_to_f16x4((v), (k))
#define VSTORE_bf16(v, k) dc_f32x4_to_bf16x4((v), (k))

#define HALF_BINARY(OP, TS, LOAD, STORE)                                                               \
  static void OP##_2_##TS(void *dv, const void *sv, size_t n) {                                        \
    uint16_t *restrict d = dv;                                                                         \
    const uint16_t *restrict s = sv;                                                                   \
    const dc_half_consts k = dc_half_constants();                                                      \
    for (; n >= 8; n -= 8, d += 8, s += 8) {                                                           \
      const v128_t a = wasm_v128_load(d), b = wasm_v128_load(s);                                       \
      const v128_t lo = VOP_##OP(VLO_##TS(a, &k), VLO_##TS(b, &k));                                    \
      const v128_t hi = VOP_##OP(VHI_##TS(a, &k), VHI_##TS(b, &k));                                    \
      wasm_v128_store(d, DC_PACK16(VSTORE_##TS(lo, &k), VSTORE_##TS(hi, &k)));                         \
    }                                                                                                  \
    DC_SCALAR for (size_t i = 0; i < n; i++) d[i] = STORE(op_##OP##_f32(LOAD(d[i]), LOAD(s[i])));      \
  }

/* The n-ary form: as NARY, with the passes that touch 16-bit data vectorized by hand (the float32
 * accumulator stays in L1). AVG: scale by 1/k before the one rounding. */
#define HALF_NARY(NAME, OP, AVG, TS, LOAD, STORE)                                                      \
  static void NAME(void *dv, const void *const *sv, size_t k, size_t n) {                              \
    const dc_half_consts K = dc_half_constants();                                                      \
    const float inv = 1.0f / (float)k;                                                                 \
    const v128_t vinv = wasm_f32x4_splat(inv);                                                         \
    float acc[CHUNK];                                                                                  \
    for (size_t off = 0; off < n; off += CHUNK) {                                                      \
      const size_t len = n - off < CHUNK ? n - off : CHUNK, tail = len & 7;                            \
      float *a = acc;                                                                                  \
      const uint16_t *p = (const uint16_t *)sv[0] + off, *q = (const uint16_t *)sv[k > 1] + off;       \
      if (k == 1) {                                                                                    \
        for (size_t m = len; m >= 8; m -= 8, a += 8, p += 8) {                                         \
          const v128_t x = wasm_v128_load(p);                                                          \
          wasm_v128_store(a, VLO_##TS(x, &K));                                                         \
          wasm_v128_store(a + 4, VHI_##TS(x, &K));                                                     \
        }                                                                                              \
        DC_SCALAR for (size_t i = 0; i < tail; i++) a[i] = LOAD(p[i]);                                 \
      } else {                                                                                         \
        for (size_t m = len; m >= 8; m -= 8, a += 8, p += 8, q += 8) {                                 \
          const v128_t x = wasm_v128_load(p), y = wasm_v128_load(q);                                   \
          wasm_v128_store(a, VOP_##OP(VLO_##TS(x, &K), VLO_##TS(y, &K)));                              \
          wasm_v128_store(a + 4, VOP_##OP(VHI_##TS(x, &K), VHI_##TS(y, &K)));                          \
        }                                                                                              \
        DC_SCALAR for (size_t i = 0; i < tail; i++) a[i] = op_##OP##_f32(LOAD(p[i]), LOAD(q[i]));      \
      }                                                                                                \
      for (size_t j = 2; j < k; j++) {                                                                 \
        a = acc, p = (const uint16_t *)sv[j] + off;                                                    \
        for (size_t m = len; m >= 8; m -= 8, a += 8, p += 8) {                                         \
          const v128_t x = wasm_v128_load(p);                                                          \
          wasm_v128_store(a, VOP_##OP(wasm_v128_load(a), VLO_##TS(x, &K)));                            \
          wasm_v128_store(a + 4, VOP_##OP(wasm_v128_load(a + 4), VHI_##TS(x, &K)));                    \
        }                                                                                              \
        DC_SCALAR for (size_t i = 0; i < tail; i++) a[i] = op_##OP##_f32(a[i], LOAD(p[i]));            \
      }                                                                                                \
      uint16_t *d = (uint16_t *)dv + off;                                                              \
      a = acc;                                                                                         \
      for (size_t m = len; m >= 8; m -= 8, a += 8, d += 8) {                                           \
        v128_t lo = wasm_v128_load(a), hi = wasm_v128_load(a + 4);                                     \
        if (AVG) lo = wasm_f32x4_mul(lo, vinv), hi = wasm_f32x4_mul(hi, vinv);                         \
        wasm_v128_store(d, DC_PACK16(VSTORE_##TS(lo, &K), VSTORE_##TS(hi, &K)));                       \
      }                                                                                                \
      DC_SCALAR for (size_t i = 0; i < tail; i++) d[i] = STORE(AVG ? a[i] * inv : a[i]);               \
    }                                                                                                  \
  }

#define HALF_DIVIDE(TS, LOAD, STORE)                                                                   \
  static void divide_##TS(void *dv, size_t n, double divisor) {                                        \
    uint16_t *d = dv;                                                                                  \
    const dc_half_consts k = dc_half_constants();                                                      \
    const float inv = 1.0f / (float)divisor;                                                           \
    const v128_t vinv = wasm_f32x4_splat(inv);                                                         \
    for (; n >= 8; n -= 8, d += 8) {                                                                   \
      const v128_t a = wasm_v128_load(d);                                                              \
      const v128_t lo = wasm_f32x4_mul(VLO_##TS(a, &k), vinv);                                         \
      const v128_t hi = wasm_f32x4_mul(VHI_##TS(a, &k), vinv);                                         \
      wasm_v128_store(d, DC_PACK16(VSTORE_##TS(lo, &k), VSTORE_##TS(hi, &k)));                         \
    }                                                                                                  \
    DC_SCALAR for (size_t i = 0; i < n; i++) d[i] = STORE(LOAD(d[i]) * inv);                           \
  }

#define DEFINE_HALF_TYPE(TS, T, A, AS, LOAD, STORE, KIND)                                              \
  HALF_BINARY(sum, TS, LOAD, STORE)                                                                    \
  HALF_BINARY(prod, TS, LOAD, STORE)                                                                   \
  HALF_BINARY(min, TS, LOAD, STORE)                                                                    \
  HALF_BINARY(max, TS, LOAD, STORE)                                                                    \
  HALF_NARY(sum_n_##TS, sum, 0, TS, LOAD, STORE)                                                       \
  HALF_NARY(prod_n_##TS, prod, 0, TS, LOAD, STORE)                                                     \
  HALF_NARY(min_n_##TS, min, 0, TS, LOAD, STORE)                                                       \
  HALF_NARY(max_n_##TS, max, 0, TS, LOAD, STORE)                                                       \
  HALF_NARY(avg_n_##TS, sum, 1, TS, LOAD, STORE)                                                       \
  HALF_DIVIDE(TS, LOAD, STORE)

DC_HALF_TYPES(DEFINE_HALF_TYPE)
#endif

/* premulSum: each product rounded to the dtype (ROUND: float16/bfloat16 through their bits; float32 and
 * float64 products are rounded by C's own arithmetic, with -ffp-contract=off), accumulated in the compute
 * type in source order over a chunk, stored (rounded) once. The factor is rounded to the dtype first. */
#define ROUND_f16(x) dc_f16_to_f32(dc_f32_to_f16(x))
#define ROUND_bf16(x) dc_bf16_to_f32(dc_f32_to_bf16(x))
#define ROUND_f32(x) (x)
#define ROUND_f64(x) (x)
#define DEFINE_PREMUL(TS, T, A, AS, LOAD, STORE, KIND)                                                 \
  static void premul_sum_n_##TS(void *dv, const void *const *sv, size_t k, size_t n, double factor) {  \
    const A f = ROUND_##TS((A)factor);                                                                 \
    A acc[CHUNK];                                                                                      \
    for (size_t off = 0; off < n; off += CHUNK) {                                                      \
      const size_t len = n - off < CHUNK ? n - off : CHUNK;                                            \
      const T *s0 = (const T *)sv[0] + off;                                                            \
      PASS(A, acc, const T *, s0, const T *, s0, len, ROUND_##TS(LOAD(p[i]) * f));                     \
      for (size_t j = 1; j < k; j++) {                                                                 \
        const T *sj = (const T *)sv[j] + off;                                                          \
        PASS(A, acc, const T *, sj, const T *, sj, len, a[i] + ROUND_##TS(LOAD(p[i]) * f));            \
      }                                                                                                \
      PASS(T, (T *)dv + off, const A *, acc, const A *, acc, len, STORE(p[i]));                        \
    }                                                                                                  \
  }

DC_HALF_TYPES(DEFINE_PREMUL)
DC_FLOAT_TYPES(DEFINE_PREMUL)

typedef void (*binary_fn)(void *, const void *, size_t);
typedef void (*nary_fn)(void *, const void *const *, size_t, size_t);
typedef void (*premul_fn)(void *, const void *const *, size_t, size_t, double);
typedef void (*divide_fn)(void *, size_t, double);

/* The tables, one row per dtype code and one column per op code (NULL: the op does not apply). */
#define DC_DTYPES 11
#define DC_OPS 8
#define BITWISE_2_SGN(TS) band_2_##TS, bor_2_##TS, bxor_2_##TS
#define BITWISE_2_UNS(TS) BITWISE_2_SGN(TS)
#define BITWISE_2_FLT(TS) NULL, NULL, NULL
#define BITWISE_N_SGN(TS) band_n_##TS, bor_n_##TS, bxor_n_##TS
#define BITWISE_N_UNS(TS) BITWISE_N_SGN(TS)
#define BITWISE_N_FLT(TS) NULL, NULL, NULL
#define PREMUL_SGN(TS) NULL
#define PREMUL_UNS(TS) NULL
#define PREMUL_FLT(TS) premul_sum_n_##TS
#define BINARY_ROW(TS, T, A, AS, LOAD, STORE, KIND)                                                    \
  {sum_2_##TS, prod_2_##TS, min_2_##TS, max_2_##TS, NULL, BITWISE_2_##KIND(TS)},
#define NARY_ROW(TS, T, A, AS, LOAD, STORE, KIND)                                                      \
  {sum_n_##TS, prod_n_##TS, min_n_##TS, max_n_##TS, avg_n_##TS, BITWISE_N_##KIND(TS)},
#define PREMUL_ROW(TS, T, A, AS, LOAD, STORE, KIND) PREMUL_##KIND(TS),
#define DIVIDE_ROW(TS, T, A, AS, LOAD, STORE, KIND) divide_##TS,

/* bool: uint8's max for sum/max/bor, min for prod/min/band, xor for bxor (core/dtype.ts' table). */
static const binary_fn BINARY_FNS[DC_DTYPES][DC_OPS] = {
    DC_TYPES(BINARY_ROW){max_2_u8, min_2_u8, min_2_u8, max_2_u8, NULL, min_2_u8, max_2_u8, bxor_2_u8}};
static const nary_fn NARY_FNS[DC_DTYPES][DC_OPS] = {
    DC_TYPES(NARY_ROW){max_n_u8, min_n_u8, min_n_u8, max_n_u8, NULL, min_n_u8, max_n_u8, bxor_n_u8}};
static const premul_fn PREMUL_FNS[DC_DTYPES] = {DC_TYPES(PREMUL_ROW) NULL};
static const divide_fn DIVIDE_FNS[10] = {DC_TYPES(DIVIDE_ROW)};

DC_EXPORT(reduce_n)
int dc_reduce_n(int dtype, int op, void *dst, const void *const *srcs, size_t k, size_t n) {
  if (dtype < 0 || dtype >= DC_DTYPES) return DC_EBADTYPE;
  if (op < 0 || op >= DC_OPS || NARY_FNS[dtype][op] == NULL) return DC_EBADOP;
  if (k == 0) return DC_EBADARG;
  NARY_FNS[dtype][op](dst, srcs, k, n);
  return 0;
}

DC_EXPORT(reduce)
int dc_reduce(int dtype, int op, void *dst, const void *src, size_t n) {
  if (dtype < 0 || dtype >= DC_DTYPES) return DC_EBADTYPE;
  if (op < 0 || op >= DC_OPS || BINARY_FNS[dtype][op] == NULL) return DC_EBADOP;
  if (dst == src) {
    /* Exact aliasing breaks the restrict promise of the streaming kernel; the n-ary form allows it. */
    const void *srcs[2] = {dst, src};
    NARY_FNS[dtype][op](dst, srcs, 2, n);
    return 0;
  }
  BINARY_FNS[dtype][op](dst, src, n);
  return 0;
}

DC_EXPORT(premul_sum_n)
int dc_premul_sum_n(int dtype, void *dst, const void *const *srcs, size_t k, size_t n, double factor) {
  if (dtype < 0 || dtype >= DC_DTYPES) return DC_EBADTYPE;
  if (PREMUL_FNS[dtype] == NULL) return DC_EBADOP;
  if (k == 0 || factor != factor || factor - factor != 0) return DC_EBADARG; /* no sources, NaN, Inf */
  PREMUL_FNS[dtype](dst, srcs, k, n, factor);
  return 0;
}

DC_EXPORT(divide)
int dc_divide(int dtype, void *dst, size_t n, double divisor) {
  if (dtype < 0 || dtype > 9) return DC_EBADTYPE; /* bool (10) has no division */
  if (dtype < 6 && !(divisor >= 1 && divisor <= 9007199254740992.0 && (double)(int64_t)divisor == divisor)) {
    return DC_EBADARG; /* integer division needs an integer >= 1 (and 0 would trap) */
  }
  DIVIDE_FNS[dtype](dst, n, divisor);
  return 0;
}
