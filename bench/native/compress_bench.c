/* The native C baseline of the compression rows of `deno task bench:kernels`: the kernels of
 * kernels/compress.c, compiled by gcc, on the same inputs as bench/_compress_cases.ts (the same 64 MiB
 * gradient-like float32 data, seeds, block sizes and k). Prints one JSON line per row,
 * {"name","dtype","bytes","gbps"}, with the names and dtypes of the TypeScript rows; gbps is bytes read
 * plus written over the median of RUNS timed calls after WARMUP untimed ones.
 *
 *   gcc -O3 -march=native -ffp-contract=off bench/native/compress_bench.c kernels/compress.c \
 *       -o /tmp/compress_bench */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void dc_quantize_int8_f32(const float *src, size_t n, size_t block, int8_t *q, float *scales);
void dc_dequantize_int8_f32(const int8_t *q, const float *scales, size_t n, size_t block, float *dst);
void dc_sign_compress_f32(const float *grad, float *residual, size_t n, size_t block, uint8_t *bits,
                          float *scales);
void dc_sign_decompress_f32(const uint8_t *bits, const float *scales, size_t n, size_t block, float *dst);
size_t dc_topk_scratch_bytes(size_t n);
void dc_topk_f32(const float *src, size_t n, size_t k, uint32_t *indices, float *values, uint32_t *scratch);
int32_t dc_scatter_add_f32(float *dst, size_t n, const uint32_t *indices, const float *values, size_t k);

/* Keep in step with bench/_compress_cases.ts. */
#ifndef INPUT_BYTES
#define INPUT_BYTES ((size_t)64 << 20)
#endif
#define N (INPUT_BYTES / 4)
#define INT8_BLOCK 256
#define SIGN_BLOCK 2048
#define TOPK_K (N / 100)
#define INT8_SCALES ((N + INT8_BLOCK - 1) / INT8_BLOCK)
#define SIGN_SCALES ((N + SIGN_BLOCK - 1) / SIGN_BLOCK)
#define WARMUP 2
#define RUNS 9

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The sum of four uniforms in [-0.5, 0.5) (roughly normal) times 1e-3, from a xorshift32 stream: the same
 * floats as fill() in bench/_compress_cases.ts for the same seed. */
static void fill(float *x, size_t n, uint32_t seed) {
  uint32_t s = seed;
  for (size_t i = 0; i < n; i++) {
    float u[4];
    for (int j = 0; j < 4; j++) {
      s ^= s << 13;
      s ^= s >> 17;
      s ^= s << 5;
      u[j] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    x[i] = (((u[0] + u[1]) + u[2]) + u[3]) * 1e-3f;
  }
}

static void *alloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (p == NULL) {
    fprintf(stderr, "compress_bench: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

typedef void (*run_fn)(void);
static void row(const char *name, double bytes, run_fn run) {
  double t[RUNS];
  for (int i = 0; i < WARMUP; i++) run();
  for (int i = 0; i < RUNS; i++) {
    double t0 = now();
    run();
    t[i] = now() - t0;
  }
  qsort(t, RUNS, sizeof t[0], by_value);
  printf("{\"name\":\"%s\",\"dtype\":\"float32\",\"bytes\":%.0f,\"gbps\":%.3f}\n", name, bytes,
         bytes / t[RUNS / 2] / 1e9);
  fflush(stdout);
}

static float *src, *residual, *dst, *values, *scales;
static int8_t *q;
static uint8_t *bits;
static uint32_t *indices, *scratch;

static void run_quantize(void) { dc_quantize_int8_f32(src, N, INT8_BLOCK, q, scales); }
static void run_dequantize(void) { dc_dequantize_int8_f32(q, scales, N, INT8_BLOCK, dst); }
static void run_sign_compress(void) { dc_sign_compress_f32(src, residual, N, SIGN_BLOCK, bits, scales); }
static void run_sign_decompress(void) { dc_sign_decompress_f32(bits, scales, N, SIGN_BLOCK, dst); }
static void run_topk(void) { dc_topk_f32(src, N, TOPK_K, indices, values, scratch); }
static void run_scatter_add(void) {
  if (dc_scatter_add_f32(dst, N, indices, values, TOPK_K) != -1) {
    fprintf(stderr, "compress_bench: scatter-add found an index out of range\n");
    exit(1);
  }
}

int main(void) {
  const double n = (double)N, k = (double)TOPK_K;
  src = alloc(4 * N);
  residual = alloc(4 * N);
  dst = alloc(4 * N);
  scales = alloc(4 * INT8_SCALES);
  q = alloc(N);
  bits = alloc(N / 8);
  indices = alloc(4 * TOPK_K);
  values = alloc(4 * TOPK_K);
  scratch = alloc(dc_topk_scratch_bytes(N));

  fill(src, N, 1);
  row("quantizeInt8", 5 * n + 4.0 * INT8_SCALES, run_quantize);

  fill(src, N, 2);
  run_quantize();
  row("dequantizeInt8", 5 * n + 4.0 * INT8_SCALES, run_dequantize);

  fill(src, N, 3);
  fill(residual, N, 4);
  row("signCompress", 12 * n + n / 8 + 4.0 * SIGN_SCALES, run_sign_compress);

  fill(src, N, 5);
  memset(residual, 0, 4 * N);
  run_sign_compress();
  row("signDecompress", n / 8 + 4.0 * SIGN_SCALES + 4 * n, run_sign_decompress);

  fill(src, N, 6);
  row("topK", 4 * n + 8 * k, run_topk);

  fill(src, N, 7);
  memcpy(dst, src, 4 * N);
  run_topk();
  row("scatterAdd", 16 * k, run_scatter_add);
  return 0;
}
