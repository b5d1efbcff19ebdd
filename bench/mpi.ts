/**
 * `deno run -A bench/mpi.ts`: a backend's collective (the mpi backend's, or with `--backend cpu` the cpu
 * backend's, whose ranks mpiexec starts and which meet through their own store and shared memory) against
 * MPICH's own call from C, in one invocation, with nccl-tests' flags and table, for every collective of
 * `_descriptors.ts` (`--collective`, all-reduce by default; `--root` for the rooted ones). It builds
 * `bench/native/mpi_collectives.c` with mpicc twice, as a program and as a shared library, then for each of
 * `--trials` runs starts the C program and this file's rank mode under `mpiexec -n <--np>`, both on the same
 * sizes, and keeps each side's best round per size. The rank mode runs the harness's sweep (`_harness.ts`,
 * the collective's descriptor) with the C program's own loop of MPI calls from the library
 * (`dcomm_collective_loop`, one FFI call per round, no JS between two MPI calls) as a peer timed round by
 * round in turn with the backend: the same C code in the same processes at the same moments, on the same
 * tensors (a non-root rank passes NULL where dcomm passes `null`: gather's output, scatter's input).
 * That is the peer the ratio is taken against: this machine's speed changes between runs by up to 2× (the C
 * program alone, run after run, takes 130 or 300 µs for 512 KiB), which a separate program's best-of-runs
 * does not cancel. Rows (`_rows.ts`'s, with a `runner`) go to `bench/results/collectives-mpi.json` (all-reduce;
 * `collectives-mpi-<collective>.json` for the others): `runner: "dcomm"`, `"c-inproc"` and `"c"` rows per
 * size, the dcomm row with both C rows' busbw and ratios. Besides the best rounds' ratio, the table gives the
 * paired one: the median, over every two adjacent rounds of dcomm and the C loop in every run, of their time
 * ratio, which the machine's drift cancels out of.
 *
 * The C calls: `MPI_Allreduce` (in place), `MPI_Bcast`, `MPI_Reduce` (in place on the root; on a root other
 * than 0 `MPI_Ireduce` and `MPI_Wait`, as MPICH 4.0.2's blocking call crashes there from 1024 elements on),
 * `MPI_Allgather`, `MPI_Reduce_scatter_block`, `MPI_Alltoall`, `MPI_Gather`, `MPI_Scatter`, `MPI_Allgatherv`
 * and `MPI_Alltoallv` (the descriptors' uneven blocks, `unevenStarts` and `unevenMatrix`, computed alike in C)
 * and `MPI_Sendrecv` around the ring (to rank + 1, from rank − 1). Both sides
 * measure alike (nccl-tests' definitions): float32, sum where an op applies, the descriptor's count (equal
 * blocks for the block collectives); the input written once per size; `time` is the slowest rank's wall
 * time of `-n` back-to-back calls, divided by `-n`, after `-w` untimed calls (plus 200 more before the first
 * size, and, in the rank mode, `--jit-warmup` (3000) calls of a 1 KiB collective and a third as many of
 * 256 KiB before that, which take the JIT to its optimising tier); each size is timed `-r` times and the
 * fastest counts (on a shared machine the fastest round is the least disturbed), the rank mode's
 * implementations taking turns round by round, first in one order then in the other; `algbw = bytes / time`;
 * `busbw = algbw ·` the collective's bus factor (all-reduce's 2(n−1)/n); `#wrong` counts elements that
 * differ from the exact result after one checked call on the input written again (small integers, exact in
 * any order). The dcomm side awaits each call (on the mpi backend one non-blocking MPI call completed by the
 * poller); the C loops block in MPI.
 *
 * ```sh
 * deno run -A bench/mpi.ts      # --np 2 -b 8 -e 32M -f 4 -n 20 -w 5 -r 5 -c 1 --trials 3
 * deno run -A bench/mpi.ts --np 4 -b 1K -e 64M -f 2
 * deno run -A bench/mpi.ts --backend cpu --np 4 --collective gather --root 1
 * deno run -A bench/mpi.ts --backend cpu --np 4 --collective alltoallv -b 64K -e 64M
 * ```
 *
 * `--collective` takes a descriptor's name in any case, or nccl-tests' (`sendrecv`, `all_gather`; see
 * `findCollective`).
 *
 * Exits non-zero if any element is wrong on either side.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { type CollectiveDescriptor, findCollective } from "./_descriptors.ts";
import type { AnyTensor } from "../backend/process_group.ts";
import { hostDevice, runSweep, sweepSizes } from "./_harness.ts";
import { type BenchRow, type ExtraColumn, makeRow, parseBytes, tableHeader, tableRow } from "./_rows.ts";

export { parseBytes as parseSize } from "./_rows.ts";

/** One row of `bench/results/collectives-mpi*.json` (and of `collectives-cpu-mpich*.json`). */
export interface CollectiveRow extends BenchRow {
  /**
   * Who ran it: `"dcomm"` (the backend), `"c-inproc"` (the C program's loop of MPI calls, from its shared
   * library, in the dcomm ranks' processes, round by round with dcomm) or `"c"` (the C program in processes
   * of its own).
   */
  runner: "dcomm" | "c-inproc" | "c";
  /** For dcomm rows: the `"c-inproc"` row's busbw at the same size (the peer of the target). */
  baselineBusbwGBs?: number;
  /** For dcomm rows: busbw / the `"c-inproc"` row's busbw. */
  vsBaseline?: number;
  /**
   * For dcomm rows: the median, over every pair of adjacent rounds (dcomm's and the `"c-inproc"` loop's, in
   * every run), of the C round's time / the dcomm round's: the busbw ratio with the machine's drift cancelled.
   */
  vsBaselinePaired?: number;
  /** For dcomm rows: the `"c"` row's busbw at the same size. */
  programBusbwGBs?: number;
  /** For dcomm rows: busbw / the `"c"` row's busbw. */
  vsProgram?: number;
}

/**
 * What the C library knows of each collective: its code (the `enum` of `bench/native/mpi_collectives.c`,
 * in `COLLECTIVES`' order), the blocking MPI call it loops over, and the one the mpi backend issues.
 */
export const MPICH_CALLS: Readonly<Record<string, { code: number; mpi: string; nonBlocking: string }>> = {
  allReduce: { code: 0, mpi: "MPI_Allreduce", nonBlocking: "MPI_Iallreduce" },
  broadcast: { code: 1, mpi: "MPI_Bcast", nonBlocking: "MPI_Ibcast" },
  reduce: { code: 2, mpi: "MPI_Reduce", nonBlocking: "MPI_Ireduce" },
  allGather: { code: 3, mpi: "MPI_Allgather", nonBlocking: "MPI_Iallgather" },
  reduceScatter: { code: 4, mpi: "MPI_Reduce_scatter_block", nonBlocking: "MPI_Ireduce_scatter_block" },
  allToAll: { code: 5, mpi: "MPI_Alltoall", nonBlocking: "MPI_Ialltoall" },
  gather: { code: 6, mpi: "MPI_Gather", nonBlocking: "MPI_Igather" },
  scatter: { code: 7, mpi: "MPI_Scatter", nonBlocking: "MPI_Iscatter" },
  allGatherv: { code: 8, mpi: "MPI_Allgatherv", nonBlocking: "MPI_Iallgatherv" },
  allToAllv: { code: 9, mpi: "MPI_Alltoallv", nonBlocking: "MPI_Ialltoallv" },
  sendRecv: { code: 10, mpi: "MPI_Sendrecv", nonBlocking: "MPI_Isend and MPI_Irecv" },
};

/**
 * nccl-tests' count of a collective (elements of its whole buffer) from this rank's two tensors, as the C
 * loop takes it: the gathered buffer is the world's inputs, the scattered one the world's outputs, the
 * uneven all-gather's its output (its blocks are the C library's to compute, as the descriptor's); for the
 * others (all-to-all and its v-form, send-receive) each rank's input.
 *
 * @param name The collective.
 * @param input This rank's input length.
 * @param output This rank's output length (0 on gather's other ranks).
 * @param ranks The world size.
 * @returns The count.
 */
export function wholeCount(name: string, input: number, output: number, ranks: number): number {
  if (name === "allGather" || name === "gather") return input * ranks;
  if (name === "scatter") return output * ranks;
  if (name === "allGatherv") return output;
  return input;
}

/**
 * The results file of a run against MPICH: all-reduce keeps the names it always had
 * (`collectives-mpi.json`, `collectives-cpu-mpich.json`, `collectives-cpu-pool-mpich.json`); any other
 * collective gets its own, `-<collective>` added (`collectives-cpu-mpich-gather.json`).
 *
 * @param backend The dcomm backend measured.
 * @param pool Whether cpu tensors came from `pg.alloc()`.
 * @param name The collective.
 * @returns The path under `bench/results/`.
 */
export function mpichResultsFile(backend: "mpi" | "cpu", pool: boolean, name: string): string {
  const base = backend === "mpi" ? "collectives-mpi" : `collectives-cpu${pool ? "-pool" : ""}-mpich`;
  return new URL(`./results/${base}${name === "allReduce" ? "" : `-${name}`}.json`, import.meta.url).pathname;
}

/** The pool a rank's tensors of sizes up to `largest` bytes need, in whole 64 KiB pages. */
function poolBytes(descriptor: CollectiveDescriptor, largest: number): number {
  const bytes = descriptor.inPlace ? Math.max(largest, 1) : 2 * Math.max(largest, 1) + 65536;
  return Math.ceil(bytes / 65536) * 65536;
}

/** The C loop's call, as the title lines name it. */
function cCall(name: string, root: number): string {
  // bench/native/mpi_collectives.c: MPICH 4.0.2's blocking in-place MPI_Reduce crashes on a root other than 0.
  return name === "reduce" && root !== 0 ? "MPI_Ireduce + MPI_Wait" : MPICH_CALLS[name].mpi;
}

/** Prose names of the collectives, for the title line. */
const TITLES: Readonly<Record<string, string>> = {
  allReduce: "all-reduce",
  allGather: "all-gather",
  reduceScatter: "reduce-scatter",
  allToAll: "all-to-all",
  allGatherv: "all-gather of uneven blocks (allGatherv)",
  allToAllv: "all-to-all of uneven blocks (allToAllv)",
  sendRecv: "send-receive around the ring (sendRecv)",
};

/** The command line's options. */
interface Flags {
  np: number;
  trials: number;
  flags: string[];
  sizes: number[];
  iters: number;
  warmup: number;
  check: boolean;
  rounds: number;
  jitWarmup: number;
  rank: boolean;
  /** The rank mode's C library (`bench/native/build/libmpi_collectives.so`). */
  lib: string;
  /** The collective's descriptor (`--collective`). */
  descriptor: CollectiveDescriptor;
  /** The root of a rooted collective (`--root`). */
  root: number;
  out: string;
  /** The dcomm backend measured: `"mpi"` or `"cpu"`. */
  backend: "mpi" | "cpu";
  /** cpu: tensors from `pg.alloc()` in the host segment's pool. */
  pool: boolean;
}

function parseFlags(args: string[]): Flags {
  const { values } = parseArgs({
    args,
    options: {
      np: { type: "string", default: "2" },
      b: { type: "string", short: "b", default: "8" },
      e: { type: "string", short: "e", default: "32M" },
      f: { type: "string", short: "f", default: "4" },
      n: { type: "string", short: "n", default: "20" },
      w: { type: "string", short: "w", default: "5" },
      c: { type: "string", short: "c", default: "1" },
      rounds: { type: "string", short: "r", default: "5" },
      trials: { type: "string", default: "3" },
      "jit-warmup": { type: "string", default: "3000" },
      rank: { type: "boolean", default: false },
      backend: { type: "string", default: "mpi" },
      pool: { type: "boolean", default: false },
      lib: {
        type: "string",
        default: new URL("./native/build/libmpi_collectives.so", import.meta.url).pathname,
      },
      collective: { type: "string", default: "allReduce" },
      root: { type: "string", default: "0" },
      out: { type: "string" },
    },
  });
  const descriptor = findCollective(values.collective);
  const np = Number(values.np);
  if (!values.rank && np < (descriptor.minRanks ?? 1)) {
    throw new RangeError(
      `Invalid --np: ${descriptor.name} needs at least ${descriptor.minRanks} ranks, found ${np}`,
    );
  }
  const root = Number(values.root);
  // The rank mode is not told --np: its group checks the root against the world it finds.
  if (!Number.isInteger(root) || root < 0 || (!values.rank && root >= np)) {
    throw new RangeError(`Invalid --root: expected a whole number below --np ${np}, found "${values.root}"`);
  }
  if (values.backend !== "mpi" && values.backend !== "cpu") {
    throw new RangeError(`Invalid --backend: expected mpi or cpu, found "${values.backend}"`);
  }
  const backend = values.backend;
  if (values.pool && backend !== "cpu") throw new RangeError("--pool needs --backend cpu");
  // The C program multiplies its sizes by a whole factor: both sides must sweep the same sizes.
  const factor = Number(values.f);
  if (!Number.isInteger(factor) || factor < 2) {
    throw new RangeError(
      `Invalid -f: expected a whole factor >= 2 (as the C program takes), found "${values.f}"`,
    );
  }
  return {
    backend,
    pool: values.pool,
    np,
    descriptor,
    root,
    trials: Number(values.trials),
    flags: [
      ...["-b", values.b, "-e", values.e, "-f", values.f, "-n", values.n],
      ...["-w", values.w, "-c", values.c, "-r", values.rounds, "--jit-warmup", values["jit-warmup"]],
      ...["--collective", descriptor.name, "--root", String(root)],
    ],
    sizes: sweepSizes(parseBytes(values.b), parseBytes(values.e), factor).map((b) => Math.max(4, b - b % 4)),
    iters: Number(values.n),
    warmup: Number(values.w),
    check: values.c !== "0",
    rounds: Number(values.rounds),
    jitWarmup: Number(values["jit-warmup"]),
    rank: values.rank,
    lib: values.lib,
    out: values.out ?? mpichResultsFile(backend, values.pool, descriptor.name),
  };
}

/**
 * One rank of the dcomm side, under mpiexec: the harness's sweep of the collective with, in turn with it, the
 * C program's loop of MPI calls (`dcomm_collective_loop` from its shared library) in the same process as its
 * peer, on the same tensors. Rank 0 prints a JSON row per size and implementation.
 */
async function rankMain(flags: Flags): Promise<void> {
  const { init } = await import("../backend/init.ts");
  // The library is linked against the MPI library the mpi backend loads (the same soname): one MPI.
  const lib = Deno.dlopen(flags.lib, {
    dcomm_collective_loop: { parameters: ["i32", "buffer", "buffer", "i32", "i32", "i64"], result: "f64" },
    dcomm_mpi_init: { parameters: [], result: "i32" },
    dcomm_mpi_finalize: { parameters: [], result: "void" },
  });
  // cpu ranks: MPI for the C loop only; the rank and world size come from mpiexec's PMI_RANK/PMI_SIZE.
  if (flags.backend === "cpu") lib.symbols.dcomm_mpi_init();
  // The pool holds the largest tensors of the sweep and of the JIT warm-up (256 KiB).
  const largest = Math.max(...flags.sizes, flags.jitWarmup > 0 ? 262144 : 0);
  const { descriptor, root } = flags;
  const pg = await init({
    backend: flags.backend,
    // The largest size's tensor in whole 64 KiB pages (an out-of-place collective's two, and a page more).
    ...(flags.pool ? { segment: { poolBytes: poolBytes(descriptor, largest) } } : {}),
  });
  const { code } = MPICH_CALLS[descriptor.name];
  const mine = pg.rank === root;
  // The root-only buffer is NULL elsewhere, as dcomm is passed `null` there.
  const loop = (input: AnyTensor, output: AnyTensor, iters: number): number => {
    const seconds = lib.symbols.dcomm_collective_loop(
      code,
      descriptor.name === "scatter" && !mine ? null : input as Float32Array,
      descriptor.name === "gather" && !mine ? null : output as Float32Array,
      wholeCount(descriptor.name, input.length, output.length, pg.size),
      root,
      BigInt(iters),
    );
    if (seconds < 0) {
      throw new RangeError(`The C library has no collective ${descriptor.name} (code ${code})`);
    }
    return seconds;
  };
  const results = await runSweep(pg, descriptor, {
    sizes: flags.sizes,
    iters: flags.iters,
    warmup: flags.warmup,
    check: flags.check,
    rounds: flags.rounds,
    root,
    firstWarmup: 200,
    jitWarmup: flags.jitWarmup,
    algorithmLabel: flags.backend === "mpi" ? "mpi" : "auto",
    transport: flags.backend === "mpi" ? "mpi" : "shm",
    device: hostDevice(pg, { pool: flags.pool }),
    peers: [{
      name: "c-inproc",
      call: (input, output) => loop(input, output, 1),
      loop: (input, output, iters) => loop(input, output, iters),
    }],
  });
  if (pg.rank === 0) { for (const rows of results) for (const row of rows) console.log(JSON.stringify(row)); }
  await pg.close();
  if (flags.backend === "cpu") lib.symbols.dcomm_mpi_finalize();
  lib.close();
}

async function run(cmd: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  const out = await new Deno.Command(cmd, { args, env, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (${out.code}):\n${new TextDecoder().decode(out.stderr)}`,
    );
  }
  return text;
}

/** A TCP port free on 127.0.0.1 now (for a store the ranks meet at). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/**
 * The rows of a run's JSON lines: the rank mode prints harness rows; the C program prints
 * `{bytes, count, timeUs, wrong}` with no runner, made into a row here by the one busbw formula.
 */
function rowsOf(
  text: string,
  descriptor: CollectiveDescriptor,
  labels: { ranks: number; algorithm: string; transport: string; root: number },
): CollectiveRow[] {
  return text.split("\n").filter((l) => l.startsWith("{")).map((l) => {
    const line = JSON.parse(l) as Partial<CollectiveRow> & { count: number; timeUs: number; wrong: number };
    if (line.runner !== undefined) return line as CollectiveRow;
    const row = makeRow(descriptor, line.count, line.timeUs, line.wrong, {
      ...labels,
      dtype: "float32",
      runner: "c",
    });
    return { ...row, runner: "c" };
  });
}

/** Keeps each runner's fastest row per size (and any wrong elements seen). */
function keepBest(into: Map<string, CollectiveRow>, rows: readonly CollectiveRow[]): void {
  for (const row of rows) {
    const key = `${row.runner}:${row.bytes}`;
    const known = into.get(key);
    if (!known || row.timeUs < known.timeUs) {
      into.set(key, { ...row, wrong: Math.max(row.wrong, known?.wrong ?? 0) });
    }
  }
}

/**
 * Adds, per size, the ratios of each pair of adjacent rounds of one rank-mode run: the C loop's round time /
 * dcomm's (dcomm's busbw over C's, measured a moment apart).
 */
function addPairs(into: Map<number, number[]>, rows: readonly CollectiveRow[]): void {
  const dcomm = new Map(rows.filter((r) => r.runner === "dcomm").map((r) => [r.bytes, r]));
  for (const c of rows) {
    const d = dcomm.get(c.bytes);
    if (c.runner !== "c-inproc" || !d?.roundsUs || !c.roundsUs) continue;
    const ratios = into.get(c.bytes) ?? [];
    for (let i = 0; i < Math.min(d.roundsUs.length, c.roundsUs.length); i++) {
      ratios.push(c.roundsUs[i] / d.roundsUs[i]);
    }
    into.set(c.bytes, ratios);
  }
}

/** The median of `values` (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

async function main(options: Flags): Promise<void> {
  const { np, flags, trials, descriptor, root } = options;
  const here = new URL(".", import.meta.url).pathname;
  const build = `${here}native/build`;
  Deno.mkdirSync(build, { recursive: true });
  const exe = `${build}/mpi_collectives`;
  const source = `${here}native/mpi_collectives.c`;
  await run("mpicc", ["-O2", source, "-o", exe]);
  await run("mpicc", ["-O2", "-shared", "-fPIC", "-DDCOMM_BENCH_LIBRARY", source, "-o", options.lib]);
  const labels = {
    ranks: np,
    algorithm: options.backend === "mpi" ? "mpi" : "auto",
    transport: options.backend === "mpi" ? "mpi" : "shm",
    root,
  };
  // The rows' sizes: each sweep size as the descriptor counts it (equal blocks), each count once.
  const sizes = [
    ...new Set(options.sizes.map((b) => descriptor.count(Math.max(1, Math.floor(b / 4)), np) * 4)),
  ];
  const best = new Map<string, CollectiveRow>();
  const pairs = new Map<number, number[]>();
  const self = new URL(import.meta.url).pathname;
  for (let t = 0; t < trials; t++) {
    keepBest(best, rowsOf(await run("mpiexec", ["-n", String(np), exe, ...flags]), descriptor, labels));
    // cpu ranks meet through their own store: rank 0 serves it on a port picked here.
    const env: Record<string, string> = options.backend === "cpu"
      ? { MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(freePort()), DCOMM_STORE_SECRET: crypto.randomUUID() }
      : {};
    const ranks = rowsOf(
      await run("mpiexec", [
        ...["-n", String(np), Deno.execPath(), "run", "-A", self],
        ...["--rank", "--backend", options.backend, "--lib", options.lib, ...flags],
        ...(options.pool ? ["--pool"] : []),
      ], env),
      descriptor,
      labels,
    );
    keepBest(best, ranks);
    addPairs(pairs, ranks);
  }
  const version = (await run("mpichversion", []).catch(() => "")).split("\n")[0] ?? "";
  const call = MPICH_CALLS[descriptor.name];
  console.log(
    `# ${TITLES[descriptor.name] ?? descriptor.name}, float32${descriptor.reduces ? " sum" : ""}${
      descriptor.inPlace ? " in place" : ""
    }${
      descriptor.rooted ? `, root ${root}` : ""
    }, ${np} ranks, best of ${trials} runs × ${options.rounds} rounds`,
  );
  console.log(`# ${version.replace(/\s+/g, " ").trim()}`);
  console.log(
    options.backend === "mpi"
      ? `#   dcomm:   the mpi backend (${call.nonBlocking} + the poller), awaited call by call`
      : `#   dcomm:   the cpu backend (shared memory, the host segment${
        options.pool ? ", tensors from pg.alloc() in its pool" : ""
      }), awaited call by call`,
  );
  console.log(
    `#   C here:  the C program's ${
      cCall(descriptor.name, root)
    } loop (its shared library) in the dcomm ranks, in turn with dcomm`,
  );
  console.log("#   C alone: the C program bench/native/mpi_collectives.c in processes of its own");
  const extras: ExtraColumn[] = [
    { title: "dcomm/C here", unit: "busbw, best", width: 12 },
    { title: "paired (n)", unit: "", width: 10 },
    { title: "dcomm/C alone", unit: "busbw, best", width: 13 },
  ];
  console.log(tableHeader(["dcomm", "C here", "C alone"], extras));
  const rows: CollectiveRow[] = [];
  let wrong = 0;
  const ratio = (a: BenchRow, b: BenchRow): number => b.busbwGBs > 0 ? a.busbwGBs / b.busbwGBs : 0;
  for (const bytes of sizes) {
    const d = best.get(`dcomm:${bytes}`),
      inproc = best.get(`c-inproc:${bytes}`),
      alone = best.get(`c:${bytes}`);
    if (!d || !inproc || !alone) continue;
    const vsHere = ratio(d, inproc), vsAlone = ratio(d, alone);
    const paired = pairs.get(bytes) ?? [];
    const vsPaired = paired.length > 0 ? median(paired) : 0;
    console.log(
      tableRow([d, inproc, alone], [
        vsHere.toFixed(2),
        `${vsPaired.toFixed(2)} (${paired.length})`,
        vsAlone.toFixed(2),
      ], extras.map((e) => e.width)),
    );
    rows.push({
      ...d,
      baselineBusbwGBs: inproc.busbwGBs,
      vsBaseline: vsHere,
      vsBaselinePaired: vsPaired,
      programBusbwGBs: alone.busbwGBs,
      vsProgram: vsAlone,
    });
    rows.push(inproc, alone);
    wrong += Math.max(0, d.wrong) + Math.max(0, inproc.wrong) + Math.max(0, alone.wrong);
  }
  Deno.writeTextFileSync(options.out, JSON.stringify(rows, null, 2) + "\n");
  console.log(`# wrote ${rows.length} rows to ${options.out}`);
  if (wrong > 0) {
    console.error(`${wrong} wrong elements`);
    Deno.exit(1);
  }
}

if (import.meta.main) {
  const flags = parseFlags(Deno.args);
  if (flags.rank) await rankMain(flags);
  else await main(flags);
}
