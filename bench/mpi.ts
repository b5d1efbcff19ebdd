/**
 * `deno run -A bench/mpi.ts`: a backend's all-reduce (the mpi backend's, or with `--backend cpu` the cpu
 * backend's, whose ranks mpiexec starts and which meet through their own store and shared memory) against
 * MPICH's own `MPI_Allreduce` called from C, in one invocation, with nccl-tests' flags and table. It builds
 * `bench/native/mpi_allreduce.c` with mpicc twice, as a program and as a shared library, then for each of
 * `--trials` runs starts the C program and this file's rank mode under `mpiexec -n <--np>`, both on the same
 * sizes, and keeps each side's best round per size. The rank mode runs the harness's sweep (`_harness.ts`,
 * the all-reduce descriptor of `_descriptors.ts`) with the C program's own loop of `MPI_Allreduce` calls
 * from the library (`dcomm_allreduce_loop`, one FFI call per round, no JS between two MPI calls) as a peer
 * timed round by round in turn with the backend: the same C code in the same processes at the same moments.
 * That is the peer the ratio is taken against: this machine's speed changes between runs by up to 2× (the C
 * program alone, run after run, takes 130 or 300 µs for 512 KiB), which a separate program's best-of-runs
 * does not cancel. Rows (`_rows.ts`'s, with a `runner`) go to `bench/results/collectives-mpi.json`:
 * `runner: "dcomm"`, `"c-inproc"` and `"c"` rows per size, the dcomm row with both C rows' busbw and
 * ratios. Besides the best rounds' ratio, the table gives the paired one: the median, over every two adjacent
 * rounds of dcomm and the C loop in every run, of their time ratio, which the machine's drift cancels out of.
 *
 * Both sides measure alike (nccl-tests' definitions): float32 sum, in place; the input written once per
 * size; `time` is the slowest rank's wall time of `-n` back-to-back calls, divided by `-n`, after `-w`
 * untimed calls (plus 200 more before the first size, and, in the rank mode, `--jit-warmup` (3000) calls of
 * a 1 KiB all-reduce and a third as many of 256 KiB before that, which take the JIT to its optimising
 * tier); each size is timed `-r` times and the fastest counts (on a shared machine the fastest round is the
 * least disturbed), the rank mode's implementations taking turns round by round, first in one order then in
 * the other; `algbw = bytes / time`; `busbw = algbw · 2(n−1)/n`; `#wrong` counts elements that differ from
 * the exact sum after one checked call on the input written again (small integers, exact in any order). The
 * dcomm side awaits each call (one `MPI_Iallreduce` completed by the poller); the C loops block in
 * `MPI_Allreduce`.
 *
 * ```sh
 * deno run -A bench/mpi.ts      # --np 2 -b 8 -e 32M -f 4 -n 20 -w 5 -r 5 -c 1 --trials 3
 * deno run -A bench/mpi.ts --np 4 -b 1K -e 64M -f 2
 * ```
 *
 * Exits non-zero if any element is wrong on either side.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { collective } from "./_descriptors.ts";
import { hostDevice, runSweep, sweepSizes } from "./_harness.ts";
import { type BenchRow, type ExtraColumn, makeRow, parseBytes, tableHeader, tableRow } from "./_rows.ts";

export { parseBytes as parseSize } from "./_rows.ts";

/** One row of `bench/results/collectives-mpi.json` (and of `collectives-cpu-mpich.json`). */
export interface CollectiveRow extends BenchRow {
  /**
   * Who ran it: `"dcomm"` (the backend), `"c-inproc"` (the C program's loop of `MPI_Allreduce` calls, from
   * its shared library, in the dcomm ranks' processes, round by round with dcomm) or `"c"` (the C program in
   * processes of its own).
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

const ALL_REDUCE = collective("allReduce");

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
  /** The rank mode's C library (`bench/native/build/libmpi_allreduce.so`). */
  lib: string;
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
        default: new URL("./native/build/libmpi_allreduce.so", import.meta.url).pathname,
      },
      out: { type: "string" },
    },
  });
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
    np: Number(values.np),
    trials: Number(values.trials),
    flags: [
      ...["-b", values.b, "-e", values.e, "-f", values.f, "-n", values.n],
      ...["-w", values.w, "-c", values.c, "-r", values.rounds, "--jit-warmup", values["jit-warmup"]],
    ],
    sizes: sweepSizes(parseBytes(values.b), parseBytes(values.e), factor).map((b) => Math.max(4, b - b % 4)),
    iters: Number(values.n),
    warmup: Number(values.w),
    check: values.c !== "0",
    rounds: Number(values.rounds),
    jitWarmup: Number(values["jit-warmup"]),
    rank: values.rank,
    lib: values.lib,
    out: values.out ??
      new URL(
        `./results/${
          backend === "mpi" ? "collectives-mpi" : `collectives-cpu${values.pool ? "-pool" : ""}-mpich`
        }.json`,
        import.meta.url,
      )
        .pathname,
  };
}

/**
 * One rank of the dcomm side, under mpiexec: the harness's sweep of `pg.allReduce` with, in turn with it, the
 * C program's loop of `MPI_Allreduce` calls (`dcomm_allreduce_loop` from its shared library) in the same
 * process as its peer. Rank 0 prints a JSON row per size and implementation.
 */
async function rankMain(flags: Flags): Promise<void> {
  const { init } = await import("../backend/init.ts");
  // The library is linked against the MPI library the mpi backend loads (the same soname): one MPI.
  const lib = Deno.dlopen(flags.lib, {
    dcomm_allreduce_loop: { parameters: ["buffer", "i32", "i64"], result: "f64" },
    dcomm_mpi_init: { parameters: [], result: "i32" },
    dcomm_mpi_finalize: { parameters: [], result: "void" },
  });
  // cpu ranks: MPI for the C loop only; the rank and world size come from mpiexec's PMI_RANK/PMI_SIZE.
  if (flags.backend === "cpu") lib.symbols.dcomm_mpi_init();
  const largest = Math.max(...flags.sizes);
  const pg = await init({
    backend: flags.backend,
    ...(flags.pool ? { segment: { poolBytes: Math.ceil(Math.max(largest, 1) / 65536) * 65536 } } : {}),
  });
  const loop = (x: Float32Array, iters: number): number =>
    lib.symbols.dcomm_allreduce_loop(x, x.length, BigInt(iters));
  const results = await runSweep(pg, ALL_REDUCE, {
    sizes: flags.sizes,
    iters: flags.iters,
    warmup: flags.warmup,
    check: flags.check,
    rounds: flags.rounds,
    firstWarmup: 200,
    jitWarmup: flags.jitWarmup,
    algorithmLabel: flags.backend === "mpi" ? "mpi" : "auto",
    transport: flags.backend === "mpi" ? "mpi" : "shm",
    device: hostDevice(pg, { pool: flags.pool }),
    peers: [{
      name: "c-inproc",
      call: (x) => loop(x as Float32Array, 1),
      loop: (x, _output, iters) => loop(x as Float32Array, iters),
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
  labels: { ranks: number; algorithm: string; transport: string },
): CollectiveRow[] {
  return text.split("\n").filter((l) => l.startsWith("{")).map((l) => {
    const line = JSON.parse(l) as Partial<CollectiveRow> & { count: number; timeUs: number; wrong: number };
    if (line.runner !== undefined) return line as CollectiveRow;
    const row = makeRow(ALL_REDUCE, line.count, line.timeUs, line.wrong, {
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
  const { np, flags, sizes, trials } = options;
  const here = new URL(".", import.meta.url).pathname;
  const build = `${here}native/build`;
  Deno.mkdirSync(build, { recursive: true });
  const exe = `${build}/mpi_allreduce`;
  const source = `${here}native/mpi_allreduce.c`;
  await run("mpicc", ["-O2", source, "-o", exe]);
  await run("mpicc", ["-O2", "-shared", "-fPIC", "-DDCOMM_BENCH_LIBRARY", source, "-o", options.lib]);
  const labels = {
    ranks: np,
    algorithm: options.backend === "mpi" ? "mpi" : "auto",
    transport: options.backend === "mpi" ? "mpi" : "shm",
  };
  const best = new Map<string, CollectiveRow>();
  const pairs = new Map<number, number[]>();
  const self = new URL(import.meta.url).pathname;
  for (let t = 0; t < trials; t++) {
    keepBest(best, rowsOf(await run("mpiexec", ["-n", String(np), exe, ...flags]), labels));
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
      labels,
    );
    keepBest(best, ranks);
    addPairs(pairs, ranks);
  }
  const version = (await run("mpichversion", []).catch(() => "")).split("\n")[0] ?? "";
  console.log(
    `# all-reduce, float32 sum in place, ${np} ranks, best of ${trials} runs × ${options.rounds} rounds`,
  );
  console.log(`# ${version.replace(/\s+/g, " ").trim()}`);
  console.log(
    options.backend === "mpi"
      ? "#   dcomm:   the mpi backend (MPI_Iallreduce + the poller), awaited call by call"
      : `#   dcomm:   the cpu backend (shared memory, the host segment${
        options.pool ? ", tensors from pg.alloc() in its pool" : ""
      }), awaited call by call`,
  );
  console.log(
    "#   C here:  the C program's MPI_Allreduce loop (its shared library) in the dcomm ranks, in turn with dcomm",
  );
  console.log("#   C alone: the C program bench/native/mpi_allreduce.c in processes of its own");
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
