/* The native C baseline of the reduction, cast and BLAS rows of `deno task bench:kernels`: the kernels of
 * kernels/reduce.c, convert.c and blas.c, compiled by gcc, on the same inputs as bench/_reduce_cases.ts
 * (every input array 64 MiB). Prints one JSON line per row, {"name","dtype","bytes","gbps"}, with the
 * names and dtypes of the TypeScript rows; gbps is bytes read plus written over the median of RUNS timed
 * calls after WARMUP untimed ones. The matmul line adds "gflops". With arguments NAME DTYPE it runs only
 * that row, so that the harness can time it right after the WASM and TypeScript runs of the same row.
 *
 *   gcc -O3 -march=native -ffp-contract=off bench/native/reduce_bench.c kernels/reduce.c \
 *       kernels/convert.c kernels/blas.c -o /tmp/reduce_bench */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dc_reduce(int dtype, int op, void *dst, const void *src, size_t n);
int dc_reduce_n(int dtype, int op, void *dst, const void *const *srcs, size_t k, size_t n);
int dc_divide(int dtype, void *dst, size_t n, double divisor);
void dc_cast_f32_f16(const float *src, uint16_t *dst, size_t n);
void dc_cast_f16_f32(const uint16_t *src, float *dst, size_t n);
void dc_cast_f32_bf16(const float *src, uint16_t *dst, size_t n);
void dc_cast_bf16_f32(const uint16_t *src, float *dst, size_t n);
int dc_scale(int dtype, void *x, size_t n, double alpha);
int dc_axpy(int dtype, void *y, const void *x, size_t n, double alpha);
int dc_matmul(const float *a, const float *b, float *c, size_t m, size_t k, size_t n, int flags);

/* Keep in step with bench/_reduce_cases.ts. */
#define INPUT_BYTES ((size_t)64 << 20)
#define MATMUL_N 256
#define WARMUP 2
#define RUNS 9

enum { I8 = 0, I32 = 2, F16 = 6, BF16 = 7, F32 = 8, F64 = 9 };
enum { SUM = 0, MAX = 3 };
static const char *const DTYPE_NAMES[] = {"int8",  "uint8",    "int32",    "uint32",  "int64",
                                          "uint64", "float16", "bfloat16", "float32", "float64"};
static const size_t DTYPE_SIZES[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint32_t rng_state = 1;
static uint32_t next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}

/* The same data as the TypeScript rows' fill(): floats uniform in [-1, 1), integers uniform bits. */
static void fill(void *p, int dtype, size_t n, uint32_t seed) {
  rng_state = seed ? seed : 1;
  if (dtype == F32) {
    for (size_t i = 0; i < n; i++) ((float *)p)[i] = (float)(next() / 2147483648.0 - 1);
  } else if (dtype == F64) {
    for (size_t i = 0; i < n; i++) ((double *)p)[i] = next() / 2147483648.0 - 1;
  } else if (dtype == F16 || dtype == BF16) {
    float chunk[4096];
    for (size_t off = 0; off < n; off += 4096) {
      size_t len = n - off < 4096 ? n - off : 4096;
      for (size_t i = 0; i < len; i++) chunk[i] = (float)(next() / 2147483648.0 - 1);
      if (dtype == F16) dc_cast_f32_f16(chunk, (uint16_t *)p + off, len);
      else dc_cast_f32_bf16(chunk, (uint16_t *)p + off, len);
    }
  } else {
    for (size_t i = 0; i < n * DTYPE_SIZES[dtype]; i++) ((uint8_t *)p)[i] = (uint8_t)next();
  }
}

static void *alloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (p == NULL) {
    fprintf(stderr, "reduce_bench: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

/* The row asked for on the command line, if any. */
static const char *only_name, *only_dtype;
static int wanted(const char *name, const char *dtype_name) {
  return only_name == NULL || (strcmp(name, only_name) == 0 && strcmp(dtype_name, only_dtype) == 0);
}

/* What the current row runs: one of the kernels on the buffers below. */
static int kind, dtype, op;
static size_t n;
static void *buf[5];

enum { REDUCE, SUM4, DIVIDE, CAST_F32_F16, CAST_F16_F32, CAST_F32_BF16, CAST_BF16_F32, AXPY, SCALE, MATMUL };

static void run(void) {
  switch (kind) {
  case REDUCE: dc_reduce(dtype, op, buf[0], buf[1], n); break;
  case SUM4: {
    const void *srcs[4] = {buf[1], buf[2], buf[3], buf[4]};
    dc_reduce_n(dtype, SUM, buf[0], srcs, 4, n);
    break;
  }
  case DIVIDE: dc_divide(dtype, buf[0], n, 3); break;
  case CAST_F32_F16: dc_cast_f32_f16(buf[0], buf[1], n); break;
  case CAST_F16_F32: dc_cast_f16_f32(buf[1], buf[0], n); break;
  case CAST_F32_BF16: dc_cast_f32_bf16(buf[0], buf[1], n); break;
  case CAST_BF16_F32: dc_cast_bf16_f32(buf[1], buf[0], n); break;
  case AXPY: dc_axpy(F32, buf[0], buf[1], n, -0.01); break;
  case SCALE: dc_scale(F32, buf[0], n, 0.999); break;
  case MATMUL: dc_matmul(buf[0], buf[1], buf[2], MATMUL_N, MATMUL_N, MATMUL_N, 0); break;
  }
}

static double median_seconds(void) {
  double t[RUNS];
  for (int i = 0; i < WARMUP; i++) run();
  for (int i = 0; i < RUNS; i++) {
    double t0 = now();
    run();
    t[i] = now() - t0;
  }
  qsort(t, RUNS, sizeof t[0], by_value);
  return t[RUNS / 2];
}

static void row(const char *name, const char *dtype_name, double bytes) {
  double s = median_seconds();
  printf("{\"name\":\"%s\",\"dtype\":\"%s\",\"bytes\":%.0f,\"gbps\":%.3f}\n", name, dtype_name, bytes,
         bytes / s / 1e9);
  fflush(stdout);
}

/* Sets up `count` input arrays of `dt` (64 MiB each) and the seeds of the TypeScript rows. */
static void arrays(int dt, int count, const uint32_t *seeds) {
  n = INPUT_BYTES / DTYPE_SIZES[dt];
  for (int i = 0; i < count; i++) {
    buf[i] = alloc(INPUT_BYTES);
    if (seeds[i]) fill(buf[i], dt, n, seeds[i]);
  }
}

static void release(int count) {
  for (int i = 0; i < count; i++) free(buf[i]), buf[i] = NULL;
}

static void reduce_row(int dt, int o) {
  const uint32_t seeds[2] = {1, 2};
  const char *name = o == SUM ? "reduce.sum" : "reduce.max";
  if (!wanted(name, DTYPE_NAMES[dt])) return;
  kind = REDUCE, dtype = dt, op = o;
  arrays(dt, 2, seeds);
  row(name, DTYPE_NAMES[dt], 3.0 * INPUT_BYTES);
  release(2);
}

static void cast_row(int k, const char *name, int half, int to_half) {
  if (!wanted(name, DTYPE_NAMES[half])) return;
  kind = k, dtype = half;
  n = INPUT_BYTES / (to_half ? 4 : 2);
  buf[0] = alloc(4 * n), buf[1] = alloc(2 * n);
  if (to_half) fill(buf[0], F32, n, 4);
  else fill(buf[1], half, n, 5);
  row(name, DTYPE_NAMES[half], 6.0 * n);
  release(2);
}

int main(int argc, char **argv) {
  if (argc == 3) only_name = argv[1], only_dtype = argv[2];
  reduce_row(F32, SUM);
  reduce_row(F16, SUM);
  reduce_row(BF16, SUM);
  reduce_row(F64, SUM);
  reduce_row(I32, SUM);
  reduce_row(I8, SUM);
  reduce_row(F32, MAX);

  if (wanted("reduceMany.sum4", "float32")) {
    const uint32_t seeds[5] = {0, 10, 11, 12, 13};
    kind = SUM4, dtype = F32;
    arrays(F32, 5, seeds);
    row("reduceMany.sum4", "float32", 5.0 * INPUT_BYTES);
    release(5);
  }
  if (wanted("divide", "float32")) {
    const uint32_t seeds[1] = {3};
    kind = DIVIDE, dtype = F32;
    arrays(F32, 1, seeds);
    row("divide", "float32", 2.0 * INPUT_BYTES);
    release(1);
  }

  cast_row(CAST_F32_F16, "castF32ToF16", F16, 1);
  cast_row(CAST_F16_F32, "castF16ToF32", F16, 0);
  cast_row(CAST_F32_BF16, "castF32ToBf16", BF16, 1);
  cast_row(CAST_BF16_F32, "castBf16ToF32", BF16, 0);

  if (wanted("axpy", "float32")) {
    const uint32_t seeds[2] = {6, 7};
    kind = AXPY;
    arrays(F32, 2, seeds);
    row("axpy", "float32", 3.0 * INPUT_BYTES);
    release(2);
  }
  if (wanted("scale", "float32")) {
    const uint32_t seeds[1] = {8};
    kind = SCALE;
    arrays(F32, 1, seeds);
    row("scale", "float32", 2.0 * INPUT_BYTES);
    release(1);
  }
  if (wanted("matmul", "float32")) {
    const size_t mm = (size_t)MATMUL_N * MATMUL_N;
    kind = MATMUL;
    for (int i = 0; i < 3; i++) buf[i] = alloc(4 * mm);
    fill(buf[0], F32, mm, 20);
    fill(buf[1], F32, mm, 21);
    double s = median_seconds(), flops = 2.0 * MATMUL_N * MATMUL_N * MATMUL_N, bytes = 3.0 * 4 * mm;
    printf("{\"name\":\"matmul\",\"dtype\":\"float32\",\"bytes\":%.0f,\"gbps\":%.3f,\"gflops\":%.3f}\n",
           bytes, bytes / s / 1e9, flops / s / 1e9);
    release(3);
  }
  return 0;
}
