/* The native baseline of `bench/mpi.ts`: MPICH's MPI_Allreduce from C, in place, float32 sum, over the
 * same sizes, iteration counts and timing rules as the dcomm rows (nccl-tests' definitions):
 *   time  = the slowest rank's wall time of `iters` back-to-back calls after `warmup` untimed ones, / iters;
 *           measured `-r` times per size, keeping the fastest (the machine may be shared)
 *   algbw = bytes / time;  busbw = algbw * 2 (n - 1) / n
 *   #wrong = elements that differ from the exact sum after one checked call on fresh data
 * Rank 0 prints one JSON line per size: {"bytes","count","timeUs","algbwGBs","busbwGBs","wrong"}.
 *
 *   mpicc -O2 bench/native/mpi_allreduce.c -o bench/native/build/mpi_allreduce
 *   mpicc -O2 -shared -fPIC -DDCOMM_BENCH_LIBRARY bench/native/mpi_allreduce.c \
 *     -o bench/native/build/libmpi_allreduce.so
 *   mpiexec -n 2 bench/native/build/mpi_allreduce -b 8 -e 33554432 -f 4 -n 20 -w 5 -c 1 -r 5
 * The first size gets 200 more warm-up calls, as in bench/mpi.ts (where they warm the JIT up). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `iters` back-to-back in-place float32 sums of `count` elements; returns the seconds they took on this rank.
 * Built into a shared library too (-shared -fPIC -DDCOMM_BENCH_LIBRARY, no main): bench/mpi.ts calls it
 * through FFI from its own ranks, so that this loop also runs in the same processes as the mpi backend, round
 * by round with it. */
double dcomm_allreduce_loop(float *x, int count, long iters) {
  double t0 = MPI_Wtime();
  for (long it = 0; it < iters; it++) MPI_Allreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

/* For ranks that are not MPI programs themselves (the cpu backend's, started by mpiexec for this
 * comparison): initialises MPI once, funneled; returns the world size. */
int dcomm_mpi_init(void) {
  int initialized, provided, size;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/* The end of what dcomm_mpi_init began. */
void dcomm_mpi_finalize(void) {
  int finalized;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

#ifndef DCOMM_BENCH_LIBRARY
/* The checked data: small integers, so the float32 sum is exact in any order (as in bench/mpi.ts). */
static float value(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 7 + 1)); }

static long parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (long)v;
}

int main(int argc, char **argv) {
  long min_bytes = 8, max_bytes = 32L << 20, factor = 4, iters = 20, warmup = 5, check = 1, repeats = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) min_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) max_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-c")) check = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) repeats = atol(argv[i + 1]);
  }
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (factor < 2) factor = 2;
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t count = (size_t)bytes / sizeof(float);
    float *x = malloc(count ? count * sizeof(float) : sizeof(float));
    for (size_t i = 0; i < count; i++) x[i] = value(rank, i);
    long warm = warmup + (bytes == min_bytes ? 200 : 0);
    for (long w = 0; w < warm; w++) MPI_Allreduce(MPI_IN_PLACE, x, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double slowest = 0;
    for (long rep = 0; rep < (repeats < 1 ? 1 : repeats); rep++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t = dcomm_allreduce_loop(x, (int)count, iters) / (double)iters, worst;
      MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rep == 0 || worst < slowest) slowest = worst;
    }
    long wrong = 0, total;
    if (check) {
      for (size_t i = 0; i < count; i++) x[i] = value(rank, i);
      MPI_Allreduce(MPI_IN_PLACE, x, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (size_t i = 0; i < count; i++) {
        float want = (float)(size * (size + 1) / 2 * (int)(i % 7 + 1));
        if (x[i] != want) wrong++;
      }
    }
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)(count * sizeof(float)) / slowest / 1e9;
      printf("{\"bytes\":%zu,\"count\":%zu,\"timeUs\":%.3f,\"algbwGBs\":%.6f,\"busbwGBs\":%.6f,\"wrong\":%ld}\n",
             count * sizeof(float), count, slowest * 1e6, algbw, algbw * 2.0 * (size - 1) / size, total);
      fflush(stdout);
    }
    free(x);
  }
  MPI_Finalize();
  return 0;
}
#endif
