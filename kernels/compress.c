/* Gradient compression: int8 with one absmax scale per block, 1-bit sign with error feedback (1-bit SGD,
 * DeepSpeed's 1-bit Adam), top-k by magnitude, and the scatter-add that sums sparse contributions.
 *
 * Every loop is written for clang's auto-vectorizer (wasm SIMD128) and gcc's (the native baseline), and
 * every floating-point result is defined bit for bit: float arithmetic only (no double, no fused
 * multiply-add under -ffp-contract=off), and sums taken in a fixed order that wasm/compress_reference.ts
 * repeats. Passing bytes: int8 reads 4 and writes 1 + 4/block per element; sign reads 8 and writes
 * 4 + 1/8 + 4/block; top-k reads the input twice (a count against a sampled bracket, then the output) or,
 * when the bracket misses, three times; scatter-add touches 16 bytes per sparse entry.
 *
 * Non-finite inputs follow IEEE arithmetic and are documented in wasm/compress.ts: a block holding a NaN or
 * an infinity quantizes to q = 0 with a NaN or +Inf scale (so it decodes to NaN); in sign compression it gets
 * a NaN or +Inf scale and a non-finite residual; top-k ranks NaN above +Inf. */
#include "common.h"

#include <math.h>

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/* ------------------------------------------------------------------------------------------------ int8 */

/* The absmax as bits: |x| of IEEE floats orders like its bit pattern as an unsigned integer, so an integer
 * max vectorizes (i32x4.max_u) and makes any NaN win over +Inf, and +Inf over every finite value. The sign
 * goes out with a shift rather than a mask: V8 rematerializes a vector constant at every use in a loop,
 * and a shift by an immediate needs none. */
static uint32_t absmax_bits(const float *src, size_t len) {
  uint32_t m = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t u = f32_bits(src[i]) << 1;
    m = u > m ? u : m;
  }
  return m >> 1;
}

/* Sixteen lanes per iteration: with four vectors of floats per vector of int8 the narrowing to bytes is
 * two packs instead of a shuffle and a 4-byte store per vector. gcc picks its own width. */
#ifdef __clang__
#define VECTORIZE_16 _Pragma("clang loop vectorize_width(16)")
#else
#define VECTORIZE_16
#endif

/* The smallest normal float. A block whose scale is normal has |x / scale| <= 127 * (1 + 2^-23), which
 * rounds to at most 127: no clamp needed. Only subnormal scales (absmax < 127 * FLT_MIN) are coarse enough
 * for x / scale to reach 190. */
#define F32_MIN_NORMAL 1.17549435e-38f

/* round-half-even(x / scale) for a normal scale. Adding 1.5 * 2^23 rounds to an integer in
 * round-to-nearest-even (|x / scale| < 2^22, so the sum lies in [2^23, 2^24), where floats are spaced 1),
 * and the low byte of the sum's bits is then that integer modulo 256 (0x4B400000 ends in a zero byte). */
static inline int8_t quantize_normal(float x, float scale) {
  return (int8_t)f32_bits(x / scale + 12582912.0f);
}

/* The same for a subnormal scale, where x / scale can exceed 127 (up to 190) and is clamped. */
static inline int8_t quantize_clamped(float x, float scale) {
  int32_t v = (int32_t)f32_bits(x / scale + 12582912.0f) - 0x4B400000;
  v = v > 127 ? 127 : v;
  v = v < -127 ? -127 : v;
  return (int8_t)v;
}

/* Per block of `block` elements (the last may be shorter): scale = absmax / 127, q = clamp(rne(x / scale)),
 * q = 0 when the scale is 0 or not finite. */
DC_EXPORT(quantize_int8_f32)
void dc_quantize_int8_f32(const float *src, size_t n, size_t block, int8_t *q, float *scales) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t len = n - start < block ? n - start : block;
    const float *x = src + start;
    int8_t *out = q + start;
    float scale = bits_f32(absmax_bits(x, len)) / 127.0f;
    scales[b] = scale;
    if (scale >= F32_MIN_NORMAL && scale <= 3.40282347e+38f) {
      VECTORIZE_16
      for (size_t i = 0; i < len; i++) out[i] = quantize_normal(x[i], scale);
    } else if (scale > 0.0f && scale < F32_MIN_NORMAL) {
      for (size_t i = 0; i < len; i++) out[i] = quantize_clamped(x[i], scale);
    } else {
      /* Zero (or an absmax so small that absmax / 127 underflows), NaN and +Inf: q = 0. */
      for (size_t i = 0; i < len; i++) out[i] = 0;
    }
  }
}

/* (float)q, exactly: 0x4B000000 | u is the float 2^23 + u for a byte u, and u = q + 128. clang 14 turns a
 * plain (float)q into four scalar conversions per vector; this form becomes a shuffle, an or and an add. */
static inline float int8_to_f32(int8_t q) {
  return bits_f32(0x4B000000u | ((uint8_t)q ^ 0x80u)) - 8388736.0f;
}

/* dst = q * scale (and, below, dst += q * scale), one scale per block. */
DC_EXPORT(dequantize_int8_f32)
void dc_dequantize_int8_f32(const int8_t *q, const float *scales, size_t n, size_t block, float *dst) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t len = n - start < block ? n - start : block;
    const int8_t *in = q + start;
    float *out = dst + start;
    float scale = scales[b];
    VECTORIZE_16
    for (size_t i = 0; i < len; i++) out[i] = int8_to_f32(in[i]) * scale;
  }
}

DC_EXPORT(dequantize_int8_acc_f32)
void dc_dequantize_int8_acc_f32(const int8_t *q, const float *scales, size_t n, size_t block, float *dst) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t len = n - start < block ? n - start : block;
    const int8_t *in = q + start;
    float *out = dst + start;
    float scale = scales[b];
    VECTORIZE_16
    for (size_t i = 0; i < len; i++) out[i] = out[i] + int8_to_f32(in[i]) * scale;
  }
}

/* ------------------------------------------------------------------------------------------------ sign */

/* Lanes of the block sum: element i of a block adds into lane i % SIGN_LANES, and the lanes then fold in
 * halves (16 -> 8 -> 4 -> 2 -> 1). Four vectors of partial sums keep the adds independent, and the order is
 * fixed, so the TypeScript reference reproduces the scale bit for bit. */
#define SIGN_LANES 16

/* Pass 1 over a block: x = g + e overwrites e, and returns the sum of |x| in the fixed lane order. The
 * arrays never overlap (the wrapper checks), and saying so lets clang keep the sums in vectors. */
static float sign_gather(const float *restrict g, float *restrict e, size_t len) {
  float acc[SIGN_LANES] = {0};
  size_t i = 0;
  for (; i + SIGN_LANES <= len; i += SIGN_LANES) {
    for (size_t j = 0; j < SIGN_LANES; j++) {
      float x = g[i + j] + e[i + j];
      e[i + j] = x;
      acc[j] += fabsf(x);
    }
  }
  for (size_t j = 0; i + j < len; j++) {
    float x = g[i + j] + e[i + j];
    e[i + j] = x;
    acc[j] += fabsf(x);
  }
  for (size_t w = SIGN_LANES / 2; w > 0; w /= 2) {
    for (size_t j = 0; j < w; j++) acc[j] += acc[j + w];
  }
  return acc[0];
}

/* One element of pass 2: its bit, and the residual x - decompressed. -0 counts as positive (bit 1), NaN
 * as negative (bit 0). */
static inline uint32_t sign_one(float *e, float scale) {
  float x = *e;
  uint32_t pos = x >= 0.0f;
  *e = pos ? x - scale : x + scale;
  return pos;
}

/* Pass 2 over whole bytes (8 * bytes elements from a multiple of 8), SIGN_CHUNK elements at a time: the
 * signs as 0/1 bytes (a vector compare and two narrowing packs), each eight of them packed into one bit
 * byte by a multiply (the 0/1 byte t of w lands on bit 56 + t of w * 0x0102040810204080, and no two
 * partial products meet), then the residuals (a vector select). */
#define SIGN_CHUNK 256

static void sign_pack(float *restrict e, size_t bytes, float scale, uint8_t *restrict out) {
  uint8_t flags[SIGN_CHUNK];
  for (size_t c = 0; c < 8 * bytes; c += SIGN_CHUNK) {
    size_t len = 8 * bytes - c < SIGN_CHUNK ? 8 * bytes - c : SIGN_CHUNK;
    float *x = e + c;
    VECTORIZE_16
    for (size_t t = 0; t < len; t++) flags[t] = x[t] >= 0.0f;
    for (size_t b = 0; b < len / 8; b++) {
      uint64_t w;
      __builtin_memcpy(&w, flags + 8 * b, sizeof w);
      out[c / 8 + b] = (uint8_t)((w * 0x0102040810204080ull) >> 56);
    }
    for (size_t t = 0; t < len; t++) x[t] = x[t] >= 0.0f ? x[t] - scale : x[t] + scale;
  }
}

/* One step of 1-bit compression with error feedback over n elements in blocks: per block x = grad +
 * residual, scale = mean |x|, bit i = x >= 0 packed LSB first, residual = x - (+-scale). grad, residual,
 * bits and scales must not overlap. */
DC_EXPORT(sign_compress_f32)
void dc_sign_compress_f32(const float *grad, float *residual, size_t n, size_t block, uint8_t *bits,
                          float *scales) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t len = n - start < block ? n - start : block;
    size_t end = start + len;
    float scale = sign_gather(grad + start, residual + start, len) / (float)len;
    scales[b] = scale;
    /* Pass 2 while the block is still in cache: bits and residuals. The block need not start or end on a
     * byte, so the edges go bit by bit (a byte is written whole at its first bit, which also zeroes the
     * padding after element n - 1) and the whole bytes between them eight at a time. */
    size_t i = start;
    for (; i < end && (i & 7) != 0; i++) {
      bits[i >> 3] |= (uint8_t)(sign_one(residual + i, scale) << (i & 7));
    }
    size_t whole = (end - i) >> 3;
    sign_pack(residual + i, whole, scale, bits + (i >> 3));
    for (i += whole * 8; i < end; i++) {
      uint32_t bit = sign_one(residual + i, scale) << (i & 7);
      bits[i >> 3] = (uint8_t)((i & 7) == 0 ? bit : bits[i >> 3] | bit);
    }
  }
}

/* The sign masks of the eight floats of each bit byte: lane t is 0 when bit t is set (+scale) and the
 * sign bit when it is clear (-scale). 8 KiB, built by the preprocessor. */
#define SIGN_MASK(b, t) ((((b) >> (t)) & 1) ? 0u : 0x80000000u)
#define SIGN_ROW(b)                                                                                        \
  { SIGN_MASK(b, 0), SIGN_MASK(b, 1), SIGN_MASK(b, 2), SIGN_MASK(b, 3),                                    \
    SIGN_MASK(b, 4), SIGN_MASK(b, 5), SIGN_MASK(b, 6), SIGN_MASK(b, 7) }
#define SIGN_ROWS4(b) SIGN_ROW(b), SIGN_ROW(b + 1), SIGN_ROW(b + 2), SIGN_ROW(b + 3)
#define SIGN_ROWS16(b) SIGN_ROWS4(b), SIGN_ROWS4(b + 4), SIGN_ROWS4(b + 8), SIGN_ROWS4(b + 12)
#define SIGN_ROWS64(b) SIGN_ROWS16(b), SIGN_ROWS16(b + 16), SIGN_ROWS16(b + 32), SIGN_ROWS16(b + 48)
static const uint32_t SIGN_MASKS[256][8] = {SIGN_ROWS64(0), SIGN_ROWS64(64), SIGN_ROWS64(128), SIGN_ROWS64(192)};

/* The inverse of sign_pack over whole bytes: each bit byte selects a row of sign masks, and eight floats
 * are scale with those signs (two vector loads and xors per byte). */
static void sign_unpack(const uint8_t *restrict in, size_t bytes, float scale, float *restrict out, int acc) {
  uint32_t s = f32_bits(scale);
  if (acc) {
    for (size_t b = 0; b < bytes; b++) {
      const uint32_t *m = SIGN_MASKS[in[b]];
      for (size_t t = 0; t < 8; t++) out[8 * b + t] = out[8 * b + t] + bits_f32(s ^ m[t]);
    }
  } else {
    for (size_t b = 0; b < bytes; b++) {
      const uint32_t *m = SIGN_MASKS[in[b]];
      for (size_t t = 0; t < 8; t++) out[8 * b + t] = bits_f32(s ^ m[t]);
    }
  }
}

/* Writes (or adds) +scale or -scale for elements [start, end) from their bits: the edges bit by bit, the
 * whole bytes between them with sign_unpack. */
static void sign_expand(const uint8_t *bits, float scale, size_t start, size_t end, float *dst, int acc) {
  size_t i = start;
  for (; i < end && (i & 7) != 0; i++) {
    float v = (bits[i >> 3] >> (i & 7)) & 1 ? scale : -scale;
    dst[i] = acc ? dst[i] + v : v;
  }
  size_t whole = (end - i) >> 3;
  sign_unpack(bits + (i >> 3), whole, scale, dst + i, acc);
  for (i += whole * 8; i < end; i++) {
    float v = (bits[i >> 3] >> (i & 7)) & 1 ? scale : -scale;
    dst[i] = acc ? dst[i] + v : v;
  }
}

/* dst = +-scale from the bits (and, below, dst += +-scale), one scale per block. */
DC_EXPORT(sign_decompress_f32)
void dc_sign_decompress_f32(const uint8_t *bits, const float *scales, size_t n, size_t block, float *dst) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t end = n - start < block ? n : start + block;
    sign_expand(bits, scales[b], start, end, dst, 0);
  }
}

DC_EXPORT(sign_decompress_acc_f32)
void dc_sign_decompress_acc_f32(const uint8_t *bits, const float *scales, size_t n, size_t block,
                                float *dst) {
  for (size_t start = 0, b = 0; start < n; start += block, b++) {
    size_t end = n - start < block ? n : start + block;
    sign_expand(bits, scales[b], start, end, dst, 1);
  }
}

/* ----------------------------------------------------------------------------------------------- top-k */

/* The key of |x|: its bits without the sign, which order like the magnitudes, with every NaN folded onto one
 * key just above +Inf. So NaNs rank above everything and tie with each other, and ties always go to the
 * smaller index. */
#define TOPK_NAN_KEY 0x7f800001u

/* A short fixed-length inner loop (a chunk of 16 or 32 keys reduced to one decision) left to the loop
 * vectorizer: fully unrolled, the SLP vectorizer would reduce it lane by lane with extracts. */
#ifdef __clang__
#define VECTORIZE_CHUNK _Pragma("clang loop unroll(disable) vectorize(enable) vectorize_width(4) interleave_count(4)")
#else
#define VECTORIZE_CHUNK
#endif

static inline uint32_t topk_key(float x) {
  uint32_t u = f32_bits(x) & 0x7fffffffu;
  return u < TOPK_NAN_KEY ? u : TOPK_NAN_KEY;
}

/* The magnitude bits doubled (the sign shifted out): for any bound b < TOPK_NAN_KEY, key > b exactly when
 * twice > 2b, and so on, and the vector loops that only compare keys with bounds need neither the mask
 * nor the NaN clamp, whose vector constants V8 would rematerialize at every use. */
static inline uint32_t topk_twice(float x) { return f32_bits(x) << 1; }

/* Radix select on the 31-bit keys: three digits, most significant first, of 10 bits (exponent and two
 * mantissa bits), 11 and 10. */
#define TOPK_D1_SHIFT 21
#define TOPK_D1_BINS 1024u
#define TOPK_D2_SHIFT 10
#define TOPK_D2_BINS 2048u
#define TOPK_D3_BINS 1024u
#define TOPK_HIST_WORDS 4096u

/* Inputs up to this size go straight to the exact radix select; larger ones first estimate the threshold
 * from TOPK_SAMPLE evenly spaced elements (enough that the bracket holds ~0.3% of the input for k = 1%). */
#define TOPK_SAMPLE 65536u
#define TOPK_DIRECT (4 * TOPK_SAMPLE)

/* Chunks of the counting pass: each is reduced to "how many keys above hi" and "any key in [lo, hi]". */
#define TOPK_CHUNK 32u

DC_EXPORT(topk_scratch_bytes)
size_t dc_topk_scratch_bytes(size_t n) {
  /* Histograms, then a key per element (the sample, then the candidates). */
  return (TOPK_HIST_WORDS + n) * sizeof(uint32_t);
}

static void topk_clear(uint32_t *h, size_t words) {
  for (size_t i = 0; i < words; i++) h[i] = 0;
}

/* Walks the histogram from the top until `*need` elements are covered; returns that bin and leaves in
 * `*need` how many of its elements are still wanted (1..h[bin]). */
static uint32_t topk_pick(const uint32_t *h, uint32_t bins, size_t *need) {
  uint32_t b = bins;
  while (b-- > 1) {
    if (h[b] >= *need) return b;
    *need -= h[b];
  }
  return 0;
}

/* The key of descending rank `*need` (1-based) among the m keys whose first digit is d1 (all of them hold
 * at least *need such keys), given the count of keys above that bin already subtracted from *need. Leaves
 * in `*need` how many keys equal to the result are within the rank. `h` holds TOPK_HIST_WORDS words. */
static uint32_t topk_select_in(const uint32_t *keys, size_t m, uint32_t d1, size_t *need, uint32_t *h) {
  topk_clear(h, TOPK_D2_BINS);
  for (size_t i = 0; i < m; i++) {
    if (keys[i] >> TOPK_D1_SHIFT == d1) h[(keys[i] >> TOPK_D2_SHIFT) & (TOPK_D2_BINS - 1)]++;
  }
  uint32_t prefix = d1 << (TOPK_D1_SHIFT - TOPK_D2_SHIFT) | topk_pick(h, TOPK_D2_BINS, need);
  topk_clear(h, TOPK_D3_BINS);
  for (size_t i = 0; i < m; i++) {
    if (keys[i] >> TOPK_D2_SHIFT == prefix) h[keys[i] & (TOPK_D3_BINS - 1)]++;
  }
  return prefix << TOPK_D2_SHIFT | topk_pick(h, TOPK_D3_BINS, need);
}

/* The key of descending rank `*need` among m keys (see topk_select_in). */
static uint32_t topk_select(const uint32_t *keys, size_t m, size_t *need, uint32_t *h) {
  topk_clear(h, TOPK_D1_BINS);
  for (size_t i = 0; i < m; i++) h[keys[i] >> TOPK_D1_SHIFT]++;
  uint32_t d1 = topk_pick(h, TOPK_D1_BINS, need);
  return topk_select_in(keys, m, d1, need, h);
}

/* The exact threshold over all of src: a first-digit histogram (four interleaved copies, so neighbouring
 * elements in one bin do not wait on each other's increments), the keys of the threshold's bin copied to
 * `cand`, and the other two digits selected among them. */
static uint32_t topk_threshold_exact(const float *src, size_t n, size_t *need, uint32_t *h, uint32_t *cand) {
  topk_clear(h, 4 * TOPK_D1_BINS);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    h[topk_key(src[i]) >> TOPK_D1_SHIFT]++;
    h[TOPK_D1_BINS + (topk_key(src[i + 1]) >> TOPK_D1_SHIFT)]++;
    h[2 * TOPK_D1_BINS + (topk_key(src[i + 2]) >> TOPK_D1_SHIFT)]++;
    h[3 * TOPK_D1_BINS + (topk_key(src[i + 3]) >> TOPK_D1_SHIFT)]++;
  }
  for (; i < n; i++) h[topk_key(src[i]) >> TOPK_D1_SHIFT]++;
  for (uint32_t b = 0; b < TOPK_D1_BINS; b++) {
    h[b] += h[TOPK_D1_BINS + b] + h[2 * TOPK_D1_BINS + b] + h[3 * TOPK_D1_BINS + b];
  }
  uint32_t d1 = topk_pick(h, TOPK_D1_BINS, need);
  size_t m = 0;
  for (i = 0; i < n; i++) {
    uint32_t key = topk_key(src[i]);
    if (key >> TOPK_D1_SHIFT == d1) cand[m++] = key;
  }
  return topk_select_in(cand, m, d1, need, h);
}

static size_t topk_isqrt(size_t x) {
  size_t r = 0;
  while ((r + 1) * (r + 1) <= x) r++;
  return r;
}

/* The threshold from a sample: the keys of TOPK_SAMPLE evenly spaced elements bracket the k-th largest key
 * of src between lo and hi (at the sample ranks expected for k, plus and minus four standard deviations).
 * One vectorized pass counts the keys above hi and copies those within [lo, hi] to `cand`; when the count
 * leaves the k-th largest key inside the bracket (almost always), it is selected among the copies;
 * otherwise `*ok` is false and the caller goes exact. */
static uint32_t topk_threshold_sampled(const float *src, size_t n, size_t k, size_t *need, uint32_t *h,
                                       uint32_t *cand, int *ok) {
  const size_t s = TOPK_SAMPLE;
  for (size_t j = 0; j < s; j++) cand[j] = topk_key(src[(size_t)((uint64_t)j * n / s)]);
  size_t rank = (size_t)(((uint64_t)k * s + n - 1) / n); /* 1..s */
  size_t margin = 4 * topk_isqrt(rank) + 8;
  uint32_t hi = 0xffffffffu, lo = 0;
  if (rank > margin) {
    size_t r = rank - margin;
    hi = topk_select(cand, s, &r, h);
  }
  if (rank + margin <= s) {
    size_t r = rank + margin;
    lo = topk_select(cand, s, &r, h);
  }
  /* key in [lo, hi] <=> key - lo <= hi - lo, in unsigned arithmetic. The vector loop works on the doubled
   * magnitude bits instead (see topk_twice), with the bounds doubled to match. */
  uint32_t span = hi - lo;
  uint32_t hi2 = hi >= TOPK_NAN_KEY ? 0xffffffffu : hi << 1, lo2 = lo << 1, span2 = hi2 - lo2;
  size_t m = 0, i = 0, above = 0;
  for (; i + TOPK_CHUNK <= n; i += TOPK_CHUNK) {
    /* "Any key inside?" as the min of key - lo, which reduces in a few vector instructions where an or of
     * booleans becomes a lane extract per element. */
    uint32_t nearest = 0xffffffffu, over = 0;
    VECTORIZE_CHUNK
    for (size_t j = 0; j < TOPK_CHUNK; j++) {
      uint32_t twice = topk_twice(src[i + j]);
      over += twice > hi2;
      nearest = twice - lo2 < nearest ? twice - lo2 : nearest;
    }
    above += over;
    if (nearest > span2) continue;
    for (size_t j = 0; j < TOPK_CHUNK; j++) {
      uint32_t key = topk_key(src[i + j]);
      if (key - lo <= span) cand[m++] = key;
    }
  }
  for (; i < n; i++) {
    uint32_t key = topk_key(src[i]);
    above += key > hi;
    if (key - lo <= span) cand[m++] = key;
  }
  *ok = above < k && k - above <= m;
  if (!*ok) return 0;
  *need = k - above;
  return topk_select(cand, m, need, h);
}

/* The output pass over [start, end): sixteen keys at a time, the largest compared with the threshold
 * (vectorized), and only blocks holding a winner go element by element, emitting every key above the
 * threshold and the first `*ties` equal to it. Returns the new output count. */
static size_t topk_emit(const float *src, size_t start, size_t end, uint32_t threshold, size_t *ties,
                        uint32_t *indices, float *values, size_t o) {
  uint32_t threshold2 = threshold << 1; /* threshold <= TOPK_NAN_KEY, so this does not wrap */
  size_t i = start;
  for (; i + 16 <= end; i += 16) {
    uint32_t top = 0;
    VECTORIZE_CHUNK
    for (size_t j = 0; j < 16; j++) {
      uint32_t twice = topk_twice(src[i + j]);
      top = twice > top ? twice : top;
    }
    if (top < threshold2) continue;
    for (size_t j = i; j < i + 16; j++) {
      uint32_t key = topk_key(src[j]);
      if (key > threshold || (key == threshold && *ties > 0)) {
        if (key == threshold) --*ties;
        indices[o] = (uint32_t)j;
        values[o] = src[j];
        o++;
      }
    }
  }
  for (; i < end; i++) {
    uint32_t key = topk_key(src[i]);
    if (key > threshold || (key == threshold && *ties > 0)) {
      if (key == threshold) --*ties;
      indices[o] = (uint32_t)i;
      values[o] = src[i];
      o++;
    }
  }
  return o;
}

/* The k elements of largest |x|, in ascending index order; equal magnitudes go to the smaller index. The
 * threshold (the k-th largest key) comes from a sampled bracket (large inputs: two passes over the input
 * in all) or from an exact radix select (small inputs, or a missed bracket: three passes). (Listing the
 * chunks that hold a key >= lo and visiting only those in the output pass measured slower: the visits
 * branch unpredictably.) `scratch` holds dc_topk_scratch_bytes(n) bytes, 4-byte aligned. */
DC_EXPORT(topk_f32)
void dc_topk_f32(const float *src, size_t n, size_t k, uint32_t *indices, float *values, uint32_t *scratch) {
  if (k == 0 || k > n) return;
  uint32_t *h = scratch, *cand = scratch + TOPK_HIST_WORDS;
  size_t need = k;
  int ok = 0;
  uint32_t threshold = 0;
  if (n > TOPK_DIRECT) threshold = topk_threshold_sampled(src, n, k, &need, h, cand, &ok);
  if (!ok) {
    need = k;
    threshold = topk_threshold_exact(src, n, &need, h, cand);
  }
  topk_emit(src, 0, n, threshold, &need, indices, values, 0);
}

/* --------------------------------------------------------------------------------------------- scatter */

/* dst[indices[i]] += values[i] in order of i, so duplicate indices accumulate left to right. Every index is
 * checked before anything is written: returns the position of the first index >= n, or -1 when all were
 * in range and the sums were done. */
DC_EXPORT(scatter_add_f32)
int32_t dc_scatter_add_f32(float *dst, size_t n, const uint32_t *indices, const float *values, size_t k) {
  uint32_t top = 0;
  for (size_t i = 0; i < k; i++) top = indices[i] > top ? indices[i] : top;
  if (k > 0 && top >= n) {
    for (size_t i = 0; i < k; i++) {
      if (indices[i] >= n) return (int32_t)i;
    }
  }
  for (size_t i = 0; i < k; i++) dst[indices[i]] += values[i];
  return -1;
}
