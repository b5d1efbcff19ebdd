/* Casts between float32 and the 16-bit float formats, for fp16/bf16 gradient compression and mixed
 * precision. Bit-exact (see half.h for the rules); src and dst must not overlap. Natively the scalar
 * loops are the kernels (gcc vectorizes them); under wasm they only finish what the hand-vectorized
 * loops of half.h's four-lane conversions leave, eight elements at a time. */
#include "common.h"
#include "half.h"

#ifdef __wasm__
/* Eight elements per step over moving pointers (constant offsets: see BLOCK in reduce.c). */
#define TO_HALF(VCONV)                                                                                 \
  const dc_half_consts k = dc_half_constants();                                                        \
  for (; n >= 8; n -= 8, src += 8, dst += 8) {                                                         \
    wasm_v128_store(dst, DC_PACK16(VCONV(wasm_v128_load(src), &k), VCONV(wasm_v128_load(src + 4), &k))); \
  }                                                                                                    \
  DC_SCALAR
#define FROM_HALF(LO, HI)                                                                              \
  const dc_half_consts k = dc_half_constants();                                                        \
  for (; n >= 8; n -= 8, src += 8, dst += 8) {                                                         \
    const v128_t h = wasm_v128_load(src);                                                              \
    wasm_v128_store(dst, LO(h, &k, 1));                                                                \
    wasm_v128_store(dst + 4, HI(h, &k, 1));                                                            \
  }                                                                                                    \
  DC_SCALAR
#else
#define TO_HALF(VCONV)
#define FROM_HALF(LO, HI)
#endif

DC_EXPORT(cast_f32_f16)
void dc_cast_f32_f16(const float *restrict src, uint16_t *restrict dst, size_t n) {
  TO_HALF(dc_f32x4_to_f16x4)
  for (size_t i = 0; i < n; i++) dst[i] = dc_f32_to_f16(src[i]);
}

DC_EXPORT(cast_f16_f32)
void dc_cast_f16_f32(const uint16_t *restrict src, float *restrict dst, size_t n) {
  FROM_HALF(DC_F16_LO, DC_F16_HI)
  for (size_t i = 0; i < n; i++) dst[i] = dc_f16_to_f32(src[i]);
}

DC_EXPORT(cast_f32_bf16)
void dc_cast_f32_bf16(const float *restrict src, uint16_t *restrict dst, size_t n) {
  TO_HALF(dc_f32x4_to_bf16x4)
  for (size_t i = 0; i < n; i++) dst[i] = dc_f32_to_bf16(src[i]);
}

DC_EXPORT(cast_bf16_f32)
void dc_cast_bf16_f32(const uint16_t *restrict src, float *restrict dst, size_t n) {
  FROM_HALF(DC_BF16_LO, DC_BF16_HI)
  for (size_t i = 0; i < n; i++) dst[i] = dc_bf16_to_f32(src[i]);
}
