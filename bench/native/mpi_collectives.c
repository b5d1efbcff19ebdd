/* The native baseline of `bench/mpi.ts`: MPICH's collectives from C, float32 (sum where an op applies), over
 * the same sizes, iteration counts and timing rules as the dcomm rows (nccl-tests' definitions):
 *   count = nccl-tests' count: elements of the whole buffer (the gathered or scattered one; for allToAll(v)
 *           and sendRecv each rank's), a multiple of the world size for the block collectives (allGather,
 *           reduceScatter, allToAll, gather, scatter), at least 1 + 2 + ... + size for the v-forms
 *           (allGatherv, allToAllv), whose blocks are uneven (uneven_start below)
 *   time  = the slowest rank's wall time of `iters` back-to-back calls after `warmup` untimed ones, / iters;
 *           measured `-r` times per size, keeping the fastest (the machine may be shared)
 *   algbw = bytes / time;  busbw = algbw * nccl-tests' bus factor (2(n-1)/n for allReduce, 1 for broadcast,
 *           reduce and sendRecv, (n-1)/n for the others, the v-forms as their even forms)
 *   #wrong = elements that differ from the exact result after one checked call on fresh data
 * The calls: MPI_Allreduce (in place), MPI_Bcast, MPI_Reduce (in place on the root; MPI_Ireduce and
 * MPI_Wait on a root other than 0, see below), MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall,
 * MPI_Gather, MPI_Scatter (the root-only buffer NULL elsewhere), MPI_Allgatherv, MPI_Alltoallv (the counts of
 * bench/_descriptors.ts's unevenStarts and unevenMatrix) and MPI_Sendrecv around the ring (to rank + 1, from
 * rank - 1, as nccl-tests' sendrecv_perf).
 * Rank 0 prints one JSON line per size: {"bytes","count","timeUs","algbwGBs","busbwGBs","wrong"}.
 *
 *   mpicc -O2 bench/native/mpi_collectives.c -o bench/native/build/mpi_collectives
 *   mpicc -O2 -shared -fPIC -DDCOMM_BENCH_LIBRARY bench/native/mpi_collectives.c \
 *     -o bench/native/build/libmpi_collectives.so
 *   mpiexec -n 2 bench/native/build/mpi_collectives -b 8 -e 33554432 -f 4 -n 20 -w 5 -c 1 -r 5
 *   mpiexec -n 4 bench/native/build/mpi_collectives --collective gather --root 1 -b 1K -e 1M -f 4
 * The first size gets 200 more warm-up calls, as in bench/mpi.ts (where they warm the JIT up). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The collectives, in the order of bench/_descriptors.ts's COLLECTIVES (bench/mpi.ts passes these codes). */
enum {
  ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER,
  ALL_GATHER_V, ALL_TO_ALL_V, SEND_RECV, COLLECTIVES
};
#ifndef DCOMM_BENCH_LIBRARY
static const char *const NAMES[COLLECTIVES] = {
    "allReduce", "broadcast", "reduce",     "allGather", "reduceScatter", "allToAll",
    "gather",    "scatter",   "allGatherv", "allToAllv", "sendRecv"};
#endif

/* The v-forms' uneven blocks, as bench/_descriptors.ts's unevenStarts: block r of `count` elements over
 * `size` ranks starts at floor(count (1 + 2 + ... + r) / (1 + 2 + ... + size)), so block r holds about
 * count (r + 1) / (1 + ... + size) elements. allToAllv's rank i sends rank j block (j - i) mod size. */
static long uneven_start(long count, int size, int r) {
  return (long)((long long)count * ((long long)r * (r + 1) / 2) / ((long long)size * (size + 1) / 2));
}
static long uneven_block(long count, int size, int r) {
  return uneven_start(count, size, r + 1) - uneven_start(count, size, r);
}
/* Elements rank i sends rank j in allToAllv. */
static long uneven_cell(long count, int size, int i, int j) {
  return uneven_block(count, size, ((j - i) % size + size) % size);
}

/* `iters` back-to-back in-place float32 sums of `count` elements; returns the seconds they took on this rank.
 * Built into a shared library too (-shared -fPIC -DDCOMM_BENCH_LIBRARY, no main): bench/mpi.ts and
 * bench/small_floor.ts call it through FFI from their own ranks, so that this loop also runs in the same
 * processes as dcomm, round by round with it. */
double dcomm_allreduce_loop(float *x, int count, long iters) {
  double t0 = MPI_Wtime();
  for (long it = 0; it < iters; it++) MPI_Allreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

/* `iters` back-to-back calls of `collective` (a code of the enum above) on nccl-tests' `count`, float32, sum
 * where an op applies, rooted at `root` where a root applies; returns the seconds they took on this rank.
 * `input` and `output` are dcomm's two tensors of the collective: the in-place ones (allReduce, broadcast,
 * reduce) use `input` alone; the root-only buffer (gather's output, scatter's input) is not read elsewhere
 * and may be NULL there. The library's loop of every collective, as dcomm_allreduce_loop is all-reduce's. */
static float unused;

double dcomm_collective_loop(int collective, float *input, float *output, int count, int root, long iters) {
  if (collective == ALL_REDUCE) return dcomm_allreduce_loop(input, count, iters);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int block = count / size, mine = rank == root;
  /* The v-forms' counts and displacements (C ints, as MPI takes them), made before the clock starts. */
  int *counts = NULL, *displs = NULL, *rcounts = NULL, *rdispls = NULL;
  if (collective == ALL_GATHER_V || collective == ALL_TO_ALL_V) {
    counts = malloc(4 * sizeof(int) * (size_t)size);
    if (!counts) return -1;
    displs = counts + size, rcounts = counts + 2 * size, rdispls = counts + 3 * size;
    const int v = collective == ALL_GATHER_V;
    for (int r = 0, at = 0, rat = 0; r < size; r++) {
      counts[r] = (int)(v ? uneven_block(count, size, r) : uneven_cell(count, size, rank, r));
      rcounts[r] = (int)(v ? counts[r] : uneven_cell(count, size, r, rank));
      displs[r] = at, rdispls[r] = rat;
      at += counts[r], rat += rcounts[r];
    }
  }
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  double t0 = MPI_Wtime();
  switch (collective) {
  case BROADCAST:
    for (long it = 0; it < iters; it++) MPI_Bcast(input, count, MPI_FLOAT, root, MPI_COMM_WORLD);
    break;
  case REDUCE:
    /* The other ranks' receive buffer is not significant (a float MPI never writes). MPICH 4.0.2's blocking
     * MPI_Reduce reads MPI_IN_PLACE as a buffer on a root other than 0 from 1024 elements on (a segfault at
     * 0xffffffffffffffff): there the non-blocking call, waited for at once, does the same reduction. */
    for (long it = 0; it < iters; it++) {
      void *send = mine ? MPI_IN_PLACE : input, *recv = mine ? input : &unused;
      if (root == 0) {
        MPI_Reduce(send, recv, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
      } else {
        MPI_Request request;
        MPI_Ireduce(send, recv, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
      }
    }
    break;
  case ALL_GATHER:
    for (long it = 0; it < iters; it++)
      MPI_Allgather(input, block, MPI_FLOAT, output, block, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case REDUCE_SCATTER:
    for (long it = 0; it < iters; it++)
      MPI_Reduce_scatter_block(input, output, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case ALL_TO_ALL:
    for (long it = 0; it < iters; it++)
      MPI_Alltoall(input, block, MPI_FLOAT, output, block, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case GATHER:
    for (long it = 0; it < iters; it++)
      MPI_Gather(input, block, MPI_FLOAT, mine ? output : NULL, block, MPI_FLOAT, root, MPI_COMM_WORLD);
    break;
  case SCATTER:
    for (long it = 0; it < iters; it++)
      MPI_Scatter(mine ? input : NULL, block, MPI_FLOAT, output, block, MPI_FLOAT, root, MPI_COMM_WORLD);
    break;
  case ALL_GATHER_V:
    for (long it = 0; it < iters; it++)
      MPI_Allgatherv(input, counts[rank], MPI_FLOAT, output, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case ALL_TO_ALL_V:
    for (long it = 0; it < iters; it++)
      MPI_Alltoallv(input, counts, displs, MPI_FLOAT, output, rcounts, rdispls, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case SEND_RECV:
    /* `count` elements to rank + 1 and from rank - 1 at once, every rank (nccl-tests' sendrecv_perf). */
    for (long it = 0; it < iters; it++)
      MPI_Sendrecv(input, count, MPI_FLOAT, next, 0, output, count, MPI_FLOAT, prev, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    break;
  default:
    free(counts);
    return -1;
  }
  double seconds = MPI_Wtime() - t0;
  free(counts);
  return seconds;
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
/* The checked data: small integers, so every float32 sum is exact in any order (as bench/_descriptors.ts's
 * (j + 5 rank) mod 13). */
static float value(int rank, long j) { return (float)((j + 5L * rank) % 13); }

static float sum_at(int size, long j) {
  float s = 0;
  for (int r = 0; r < size; r++) s += value(r, j);
  return s;
}

/* This rank's input length and result length (of `input` when in place, else of `output`), in elements. */
static long input_length(int c, long count, int size, int mine, int rank) {
  if (c == ALL_GATHER || c == GATHER) return count / size;
  if (c == SCATTER) return mine ? count : 0;
  if (c == ALL_GATHER_V) return uneven_block(count, size, rank);
  return count;
}
static long result_length(int c, long count, int size, int mine) {
  if (c == REDUCE_SCATTER || c == SCATTER) return count / size;
  if (c == GATHER) return mine ? count : 0;
  return count;
}

/* Element i of this rank's result after one call on the data of value(). */
static float expected(int c, long i, long count, int root, int rank, int size) {
  long block = count / size;
  switch (c) {
  case ALL_GATHER_V: {
    int r = 0;
    while (r + 1 < size && uneven_start(count, size, r + 1) <= i) r++;
    return value(r, i - uneven_start(count, size, r));
  }
  case ALL_TO_ALL_V: {
    /* The sender i whose block of this rank's output holds element k, at this rank's offset in its input. */
    long at = 0, k = i;
    int from = 0;
    while (from + 1 < size && at + uneven_cell(count, size, from, rank) <= k) {
      at += uneven_cell(count, size, from, rank);
      from++;
    }
    long offset = 0;
    for (int j = 0; j < rank; j++) offset += uneven_cell(count, size, from, j);
    return value(from, offset + k - at);
  }
  case SEND_RECV: return value((rank + size - 1) % size, i);
  case ALL_REDUCE: return sum_at(size, i);
  case BROADCAST: return value(root, i);
  case REDUCE: return rank == root ? sum_at(size, i) : value(rank, i);
  case ALL_GATHER:
  case GATHER: return value((int)(i / block), i % block);
  case REDUCE_SCATTER: return sum_at(size, rank * block + i);
  case ALL_TO_ALL: return value((int)(i / block), rank * block + i % block);
  default: return value(root, rank * block + i); /* SCATTER */
  }
}

static double bus_factor(int c, int size) {
  if (c == ALL_REDUCE) return 2.0 * (size - 1) / size;
  if (c == BROADCAST || c == REDUCE || c == SEND_RECV) return 1.0;
  return (double)(size - 1) / size;
}

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
  int c = ALL_REDUCE, root = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) min_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) max_bytes = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-c")) check = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) repeats = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--root")) root = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--collective")) {
      for (c = 0; c < COLLECTIVES && strcmp(NAMES[c], argv[i + 1]); c++) {}
      if (c == COLLECTIVES) {
        fprintf(stderr, "Unknown --collective: expected allReduce, broadcast, reduce, allGather, "
                        "reduceScatter, allToAll, gather, scatter, allGatherv, allToAllv or sendRecv, "
                        "found \"%s\"\n", argv[i + 1]);
        return 2;
      }
    }
  }
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (root < 0 || root >= size) {
    if (rank == 0) fprintf(stderr, "Invalid --root: expected 0 to %d, found %d\n", size - 1, root);
    MPI_Finalize();
    return 2;
  }
  if (factor < 2) factor = 2;
  const int blocks = c == ALL_GATHER || c == REDUCE_SCATTER || c == ALL_TO_ALL || c == GATHER || c == SCATTER;
  const int uneven = c == ALL_GATHER_V || c == ALL_TO_ALL_V;
  const int mine = rank == root, in_place = c == ALL_REDUCE || c == BROADCAST || c == REDUCE;
  long previous = 0;
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    /* As the harness: whole elements, at least one; equal blocks; a count already measured runs once. */
    long count = bytes / (long)sizeof(float);
    if (count < 1) count = 1;
    if (blocks) count = (count / size < 1 ? 1 : count / size) * size;
    if (uneven && count < (long)size * (size + 1) / 2) count = (long)size * (size + 1) / 2;
    if (count == previous) continue;
    long in_len = input_length(c, count, size, mine, rank), out_len = result_length(c, count, size, mine);
    float *in = malloc((size_t)(in_len ? in_len : 1) * sizeof(float));
    float *out = in_place ? in : malloc((size_t)(out_len ? out_len : 1) * sizeof(float));
    float *result = in_place ? in : out;
    for (long j = 0; j < in_len; j++) in[j] = value(rank, j);
    long warm = warmup + (previous == 0 ? 200 : 0);
    previous = count;
    dcomm_collective_loop(c, in, out, (int)count, root, warm);
    double slowest = 0;
    for (long rep = 0; rep < (repeats < 1 ? 1 : repeats); rep++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t = dcomm_collective_loop(c, in, out, (int)count, root, iters) / (double)iters, worst;
      MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rep == 0 || worst < slowest) slowest = worst;
    }
    long wrong = 0, total;
    if (check) {
      for (long j = 0; j < in_len; j++) in[j] = value(rank, j);
      dcomm_collective_loop(c, in, out, (int)count, root, 1);
      for (long i = 0; i < out_len; i++) {
        if (result[i] != expected(c, i, count, root, rank, size)) wrong++;
      }
    }
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)(count * sizeof(float)) / slowest / 1e9;
      printf("{\"bytes\":%zu,\"count\":%ld,\"timeUs\":%.3f,\"algbwGBs\":%.6f,\"busbwGBs\":%.6f,\"wrong\":%ld}\n",
             count * sizeof(float), count, slowest * 1e6, algbw, algbw * bus_factor(c, size), total);
      fflush(stdout);
    }
    if (!in_place) free(out);
    free(in);
  }
  MPI_Finalize();
  return 0;
}
#endif
