/* float16 and bfloat16 <-> float32, bit-exact and branch-free so that loops over them vectorize (every
 * case is computed and the right one selected). Rounding is to nearest, ties to even; overflow goes to
 * +-Inf; subnormals are exact both ways; a NaN stays a NaN with its sign and the top bits of its payload,
 * and comes out quiet (as x86's F16C and ARM's FCVT do). Shared by convert.c and reduce.c. */
#ifndef DCOMM_KERNELS_HALF_H
#define DCOMM_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

/* memcpy is the type pun the C standard allows; it compiles to a register move. */
static inline uint32_t dc_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float dc_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float dc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t shifted = em << 13;
  /* Read the exponent and mantissa as a float32 whose bias is 127 instead of 15, then rebias by a
   * multiplication by 2^112: exact, and it normalizes float16 subnormals for free. */
  uint32_t finite = dc_f32_bits(dc_bits_f32(shifted) * 0x1p112f);
  uint32_t special = 0x7f800000u | shifted | (em > 0x7c00u ? 0x00400000u : 0u);
  return dc_bits_f32((em >= 0x7c00u ? special : finite) | sign);
}

static inline uint16_t dc_f32_to_f16(float f) {
  uint32_t u = dc_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  /* [2^-14, 65536): rebias the exponent, add half an ulp minus one plus the kept lsb (ties to even);
   * the carry rounds 65520 and up to Inf. Unsigned wrap-around for other inputs is discarded below. */
  uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  /* Below 2^-14: adding 0.5 aligns the value to units of 2^-24 (the smallest float16 subnormal) and the
   * adder rounds to nearest even; what is left above 0.5 is the float16 encoding (0x400 = 2^-14). */
  uint32_t sub = dc_f32_bits(dc_bits_f32(a) + 0.5f) - 0x3f000000u;
  uint32_t big = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : 0x7c00u;
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x47800000u ? big : r;
  return (uint16_t)(r | sign);
}

static inline float dc_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  return dc_bits_f32((u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u);
}

static inline uint16_t dc_f32_to_bf16(float f) {
  uint32_t u = dc_f32_bits(f);
  /* bfloat16 is the top half of a float32: round the bottom half away, ties to even. */
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x0040u) : r);
}

/* Marks a tail loop after a vectorized one, so that clang does not vectorize it again. */
#ifdef __clang__
#define DC_SCALAR _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)")
#else
#define DC_SCALAR
#endif

#ifdef __wasm__
/* The same conversions on four lanes of wasm SIMD, for the hot loops. Written with intrinsics because
 * V8 compiles every v128.const inside a loop into a fresh materialization (several instructions per use,
 * which costs more than the arithmetic here), and because clang narrows 32-bit lanes to 16 bits with
 * shuffles where i16x8.narrow_i32x4_u is one instruction. The constants are read once per call through a
 * volatile, so they are splats outside the loop that V8 keeps in registers. Lanes hold 32 bits: a
 * 16-bit pattern in the low half, or a float32. */
#include <wasm_simd128.h>

static volatile const uint32_t dc_half_k[] = {
    0x7fffffffu, 0x00008000u, 0xc8000fffu, 0x00000001u, 0x3f000000u, 0x00007e00u, 0x000003ffu, 0x00007c00u,
    0x387fffffu, 0x477fffffu, 0x7f800000u, 0x00007fffu, 0x77800000u, 0x0f7fffffu, 0x0f800000u, 0x00400000u,
    0x00000040u,
};

typedef struct {
  v128_t abs, sign16, rebias, one, half, nan16, mant16, inf16, sub_limit, big_limit, inf32, low15, scale112,
      special16, inf16_shifted, quiet32, quiet_bf16;
} dc_half_consts;

static inline dc_half_consts dc_half_constants(void) {
  dc_half_consts k;
  k.abs = wasm_i32x4_splat((int32_t)dc_half_k[0]);
  k.sign16 = wasm_i32x4_splat((int32_t)dc_half_k[1]);
  k.rebias = wasm_i32x4_splat((int32_t)dc_half_k[2]);
  k.one = wasm_i32x4_splat((int32_t)dc_half_k[3]);
  k.half = wasm_i32x4_splat((int32_t)dc_half_k[4]); /* 0.5f, and its bits */
  k.nan16 = wasm_i32x4_splat((int32_t)dc_half_k[5]);
  k.mant16 = wasm_i32x4_splat((int32_t)dc_half_k[6]);
  k.inf16 = wasm_i32x4_splat((int32_t)dc_half_k[7]);
  k.sub_limit = wasm_i32x4_splat((int32_t)dc_half_k[8]);
  k.big_limit = wasm_i32x4_splat((int32_t)dc_half_k[9]);
  k.inf32 = wasm_i32x4_splat((int32_t)dc_half_k[10]);
  k.low15 = wasm_i32x4_splat((int32_t)dc_half_k[11]);
  k.scale112 = wasm_i32x4_splat((int32_t)dc_half_k[12]); /* 2^112 */
  k.special16 = wasm_i32x4_splat((int32_t)dc_half_k[13]);
  k.inf16_shifted = wasm_i32x4_splat((int32_t)dc_half_k[14]);
  k.quiet32 = wasm_i32x4_splat((int32_t)dc_half_k[15]);
  k.quiet_bf16 = wasm_i32x4_splat((int32_t)dc_half_k[16]);
  return k;
}

/* dc_f16_to_f32 on four lanes. Without quiet, a signaling NaN stays signaling (enough for arithmetic). */
static inline v128_t dc_f16x4_to_f32x4(v128_t h, const dc_half_consts *k, int quiet) {
  v128_t shifted = wasm_i32x4_shl(wasm_v128_and(h, k->low15), 13);
  v128_t f = wasm_f32x4_mul(shifted, k->scale112);
  /* Inf/NaN come out of the multiplication with exponent 143: or-ing in all ones makes it 255. */
  v128_t special = wasm_v128_and(wasm_i32x4_gt(shifted, k->special16), k->inf32);
  v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, k->sign16), 16);
  v128_t r = wasm_v128_or(wasm_v128_or(f, special), sign);
  if (quiet) r = wasm_v128_or(r, wasm_v128_and(wasm_i32x4_gt(shifted, k->inf16_shifted), k->quiet32));
  return r;
}

/* dc_f32_to_f16 on four lanes (the comparisons are signed: every compared value is below 2^31). */
static inline v128_t dc_f32x4_to_f16x4(v128_t u, const dc_half_consts *k) {
  v128_t a = wasm_v128_and(u, k->abs);
  v128_t sign = wasm_v128_and(wasm_u32x4_shr(u, 16), k->sign16);
  v128_t t = wasm_u32x4_shr(a, 13);
  v128_t normal = wasm_u32x4_shr(wasm_i32x4_add(wasm_i32x4_add(a, k->rebias), wasm_v128_and(t, k->one)), 13);
  v128_t sub = wasm_i32x4_sub(wasm_f32x4_add(a, k->half), k->half);
  v128_t big = wasm_v128_bitselect(wasm_v128_or(wasm_v128_and(t, k->mant16), k->nan16), k->inf16,
                                   wasm_i32x4_gt(a, k->inf32));
  v128_t r = wasm_v128_bitselect(normal, sub, wasm_i32x4_gt(a, k->sub_limit));
  r = wasm_v128_bitselect(big, r, wasm_i32x4_gt(a, k->big_limit));
  return wasm_v128_or(r, sign);
}

/* dc_bf16_to_f32 on the low or high four of eight 16-bit lanes: interleaving with zeros puts each
 * pattern in the top half of a 32-bit lane in one instruction. Without quiet, a signaling NaN stays. */
#define DC_ZIP_LO(v) wasm_i16x8_shuffle(wasm_i32x4_const_splat(0), (v), 0, 8, 1, 9, 2, 10, 3, 11)
#define DC_ZIP_HI(v) wasm_i16x8_shuffle(wasm_i32x4_const_splat(0), (v), 4, 12, 5, 13, 6, 14, 7, 15)
static inline v128_t dc_bf16_quiet(v128_t u, const dc_half_consts *k, int quiet) {
  return quiet ? wasm_v128_or(u, wasm_v128_and(wasm_f32x4_ne(u, u), k->quiet32)) : u;
}

/* dc_f32_to_bf16 on four lanes. */
static inline v128_t dc_f32x4_to_bf16x4(v128_t u, const dc_half_consts *k) {
  v128_t hi = wasm_u32x4_shr(u, 16);
  v128_t r = wasm_u32x4_shr(wasm_i32x4_add(wasm_i32x4_add(u, k->low15), wasm_v128_and(hi, k->one)), 16);
  return wasm_v128_bitselect(r, wasm_v128_or(hi, k->quiet_bf16), wasm_f32x4_eq(u, u));
}

/* Eight 16-bit patterns (one v128) to the float32 of its low or high four. */
#define DC_F16_LO(v, k, quiet) dc_f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(v), (k), (quiet))
#define DC_F16_HI(v, k, quiet) dc_f16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(v), (k), (quiet))
#define DC_BF16_LO(v, k, quiet) dc_bf16_quiet(DC_ZIP_LO(v), (k), (quiet))
#define DC_BF16_HI(v, k, quiet) dc_bf16_quiet(DC_ZIP_HI(v), (k), (quiet))
/* Two vectors of 16-bit patterns in 32-bit lanes back to eight 16-bit lanes. */
#define DC_PACK16(lo, hi) wasm_u16x8_narrow_i32x4((lo), (hi))
#endif

#endif
