/**
 * `deno run -A bench/mpi.ts`: a backend's all-reduce (the mpi backend's, or with `--backend cpu` the cpu
 * backend's, whose ranks mpiexec starts and which meet through their own store and shared memory) against
 * MPICH's own `MPI_Allreduce` called from C, in one invocation, with nccl-tests' flags and table. It builds `bench/native/mpi_allreduce.c` with mpicc
 * twice, as a program and as a shared library, then for each of `--trials` runs starts the C program and
 * this file's rank mode under `mpiexec -n <--np>`, both on the same sizes, and keeps each side's best round
 * per size. The rank mode times the mpi backend and, round by round in turn with it, the C program's own loop
 * of `MPI_Allreduce` calls from the library (`dcomm_allreduce_loop`, one FFI call per round, no JS between
 * two MPI calls): the same C code in the same processes at the same moments. That is the peer the ratio is
 * taken against: this machine's speed changes between runs by up to 2× (the C program alone, run after run,
 * takes 130 or 300 µs for 512 KiB), which a separate program's best-of-runs does not cancel. Rows go to
 * `bench/results/collectives-mpi.json`: `runner: "dcomm"`, `"c-inproc"` and `"c"` rows per size, the dcomm
 * row with both C rows' busbw and ratios. Besides the best rounds' ratio, the table gives the paired one: the
 * median, over every two adjacent rounds of dcomm and the C loop in every run, of their time ratio, which
 * the machine's drift cancels out of.
 *
 * Both sides measure alike (nccl-tests' definitions): float32 sum, in place; `time` is the slowest rank's
 * wall time of `-n` back-to-back calls, divided by `-n`, after `-w` untimed calls (plus 200 more before
 * the first size, and, in the rank mode, 3000 calls of a 1 KiB all-reduce before that, which take the
 * JIT to its optimising tier); each size is timed `-r` times and the fastest counts (on a
 * shared machine the fastest round is the least disturbed), the rank mode's implementations taking turns
 * round by round, first in one order then in the other; `algbw = bytes / time`;
 * `busbw = algbw · 2(n−1)/n`; `#wrong` counts elements that differ from the exact sum after one checked call
 * on fresh data (small integers, exact in any order). The dcomm side awaits each call (one `MPI_Iallreduce`
 * completed by the poller); the C loops block in `MPI_Allreduce`.
 *
 * ```sh
 * deno run -A bench/mpi.ts      # --np 2 -b 8 -e 32M -f 4 -n 20 -w 5 -r 5 -c 1 --trials 3
 * deno run -A bench/mpi.ts --np 4 -b 1K -e 64M -f 2
 * ```
 *
 * {@linkcode measureAllReduce} times any process group the same way, for a harness that runs its own ranks.
 *
 * Exits non-zero if any element is wrong on either side.
 *
 * @module
 */
import { parseArgs } from "node:util";
import type { ProcessGroup } from "../backend/process_group.ts";

/** One size's measurement, as both sides print it. */
export interface AllReduceSample {
  /** Bytes of the tensor. */
  bytes: number;
  /** float32 elements. */
  count: number;
  /** Microseconds per call (the slowest rank's average). */
  timeUs: number;
  /** bytes / time, in GB/s. */
  algbwGBs: number;
  /** algbw · 2(n−1)/n, in GB/s. */
  busbwGBs: number;
  /** Wrong elements after the checked call, summed over ranks. */
  wrong: number;
  /** Each timed round's microseconds per call (the slowest rank's), in the order they ran. */
  roundsUs?: number[];
}

/** One row of `bench/results/collectives-mpi.json`. */
export interface CollectiveRow extends AllReduceSample {
  /** The collective: `"allReduce"`. */
  collective: string;
  /** `"mpi"` (MPI chose; MPICH's default selection). */
  algorithm: string;
  /** `"mpi"`. */
  transport: string;
  /**
   * Who ran it: `"dcomm"` (the mpi backend), `"c-inproc"` (the C program's loop of `MPI_Allreduce` calls,
   * from its shared library, in the dcomm ranks' processes, round by round with dcomm) or `"c"` (the C
   * program in processes of its own).
   */
  runner: "dcomm" | "c-inproc" | "c";
  /** World size. */
  ranks: number;
  /** `"float32"`. */
  dtype: string;
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

/** Another all-reduce implementation timed alongside the group's, in place on the array it is given. */
export interface PeerAllReduce {
  /** One call (warm-up and the checked call). */
  call(x: Float32Array): unknown;
  /**
   * `iters` calls in a loop of its own, returning the seconds they took; when given, the timed rounds use it
   * instead of `iters` calls of {@linkcode PeerAllReduce.call}.
   */
  loop?(x: Float32Array, iters: number): number;
}

/** Options of {@linkcode measureAllReduce}. */
export interface MeasureOptions {
  /** Timed calls per size. @default 20 */
  iters?: number;
  /** Untimed calls first. @default 5 */
  warmup?: number;
  /** Check one call on fresh data. @default true */
  check?: boolean;
  /** Timed rounds of `iters` calls per size; the fastest round counts. @default 1 */
  repeats?: number;
  /** Extra warm-up calls before the first size. @default 200 */
  firstWarmup?: number;
  /**
   * Calls of a 1 KiB all-reduce before the first size, for each implementation, and a third as many of a
   * 256 KiB one: they take the JIT to its optimising tier on the paths of small and mid-size calls (a few
   * hundred calls leave the hot path in a baseline tier, and the first size then measures the compiler
   * rather than the backend; the cpu backend's two-phase plan, from about 64 KiB, runs code the 1 KiB calls
   * never reach, which compiled during the first timed rounds at 0.7–8 ms a call). @default 3000
   */
  jitWarmup?: number;
  /** Other all-reduce implementations to time alongside. @default [] */
  others?: readonly PeerAllReduce[];
  /** Makes each size's tensor (and gives it back after). @default ordinary Float32Arrays */
  tensors?: { make(count: number): Float32Array; done(x: Float32Array): void };
}

/** The checked data: small integers, so the float32 sum is exact in any order (as the C program). */
function fill(x: Float32Array, rank: number): void {
  for (let i = 0; i < x.length; i++) x[i] = (rank + 1) * ((i % 7) + 1);
}

/** One timed round: the slowest rank's average seconds per call over the `iters` calls `timed` makes. */
async function round(
  pg: ProcessGroup,
  iters: number,
  timed: () => Promise<number> | number,
): Promise<number> {
  await pg.barrier();
  const slowest = new Float64Array([(await timed()) / iters]);
  await pg.allReduce(slowest, { op: "max" });
  return slowest[0];
}

/** Seconds that `iters` awaited calls of `call` take. */
async function timeCalls(iters: number, call: () => unknown): Promise<number> {
  const t0 = performance.now();
  for (let it = 0; it < iters; it++) await call();
  return (performance.now() - t0) / 1000;
}

/** Checks one all-reduce of fresh data; returns the wrong elements summed over ranks. */
async function wrongElements(pg: ProcessGroup, x: Float32Array, call: () => unknown): Promise<number> {
  fill(x, pg.rank);
  await call();
  const ranks = (pg.size * (pg.size + 1)) / 2;
  const wrong = new Float64Array(1);
  for (let i = 0; i < x.length; i++) if (x[i] !== ranks * ((i % 7) + 1)) wrong[0]++;
  await pg.allReduce(wrong);
  return wrong[0];
}

function sample(bytes: number, rounds: number[], ranks: number, wrong: number): AllReduceSample {
  const seconds = Math.min(...rounds);
  const algbw = bytes / seconds / 1e9;
  return {
    bytes,
    count: bytes / 4,
    timeUs: seconds * 1e6,
    algbwGBs: algbw,
    busbwGBs: (algbw * 2 * (ranks - 1)) / ranks,
    wrong,
    roundsUs: rounds.map((r) => r * 1e6),
  };
}

/**
 * Times all-reduce (float32 sum, in place) at each size, as nccl-tests times a collective: `pg.allReduce`,
 * and, round by round in turn with it, any other implementations given in `others` (e.g. a C loop of MPI's
 * blocking call, through FFI), so that all see the same machine.
 *
 * @param pg The group; every rank calls this with the same arguments.
 * @param sizes Tensor sizes in bytes (multiples of 4).
 * @param options Iterations, warm-up, checking, and the other implementations by name.
 * @returns For each size, `pg.allReduce`'s sample, then one per other implementation (the same on every
 *   rank).
 */
export async function measureAllReduce(
  pg: ProcessGroup,
  sizes: readonly number[],
  options: MeasureOptions = {},
): Promise<AllReduceSample[][]> {
  const { iters = 20, warmup = 5, check = true, repeats = 1, firstWarmup = 200, others = [] } = options;
  const jit = options.jitWarmup ?? 3000;
  for (const [count, calls] of [[256, jit], [65536, Math.ceil(jit / 3)]]) {
    const w = options.tensors?.make(count) ?? new Float32Array(count);
    for (
      const call of [
        (): Promise<unknown> => pg.allReduce(w).wait(),
        ...others.map((peer) => () => peer.call(w)),
      ]
    ) {
      for (let i = 0; i < calls; i++) await call();
    }
    options.tensors?.done(w);
  }
  const out: AllReduceSample[][] = [];
  for (const bytes of sizes) {
    const count = Math.floor(bytes / 4);
    const x = options.tensors?.make(count) ?? new Float32Array(count);
    fill(x, pg.rank);
    const calls = [
      (): Promise<unknown> => pg.allReduce(x).wait(),
      ...others.map((peer) => () => peer.call(x)),
    ];
    const timed = [
      () => timeCalls(iters, calls[0]),
      ...others.map((peer, k) => {
        const loop = peer.loop?.bind(peer);
        return loop ? () => loop(x, iters) : () => timeCalls(iters, calls[k + 1]);
      }),
    ];
    const warm = warmup + (bytes === sizes[0] ? firstWarmup : 0);
    for (const call of calls) for (let w = 0; w < warm; w++) await call();
    const rounds: number[][] = calls.map(() => []);
    for (let rep = 0; rep < Math.max(1, repeats); rep++) {
      // Forwards then backwards, round after round: no implementation always runs first.
      const order = rep % 2 === 0 ? calls.keys() : [...calls.keys()].reverse();
      for (const k of order) rounds[k].push(await round(pg, iters, timed[k]));
    }
    const samples: AllReduceSample[] = [];
    for (let k = 0; k < calls.length; k++) {
      const wrong = check ? await wrongElements(pg, x, calls[k]) : 0;
      samples.push(sample(count * 4, rounds[k], pg.size, wrong));
    }
    options.tensors?.done(x);
    out.push(samples);
  }
  return out;
}

/** Sizes from `min` to `max` bytes, multiplying by `factor`, rounded down to whole float32s. */
function sizesOf(min: number, max: number, factor: number): number[] {
  const out: number[] = [];
  for (let b = min; b <= max; b *= Math.max(2, factor)) out.push(Math.floor(b / 4) * 4);
  return out;
}

/** `"64K"`, `"4M"`, `"1G"` or a plain number of bytes. */
export function parseSize(text: string): number {
  const m = /^(\d+(?:\.\d+)?)([kKmMgG]?)$/.exec(text);
  if (!m) throw new RangeError(`Invalid size: expected a number with an optional K, M or G, found "${text}"`);
  const unit = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2].toLowerCase() as "" | "k" | "m" | "g"];
  return Math.floor(Number(m[1]) * unit);
}

/** The command line's options. */
interface Flags {
  np: number;
  trials: number;
  flags: string[];
  sizes: number[];
  iters: number;
  warmup: number;
  check: boolean;
  repeats: number;
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
      r: { type: "string", short: "r", default: "5" },
      trials: { type: "string", default: "3" },
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
  return {
    backend,
    pool: values.pool,
    np: Number(values.np),
    trials: Number(values.trials),
    flags: [
      ...["-b", values.b, "-e", values.e, "-f", values.f, "-n", values.n],
      ...["-w", values.w, "-c", values.c, "-r", values.r],
    ],
    sizes: sizesOf(parseSize(values.b), parseSize(values.e), Number(values.f)),
    iters: Number(values.n),
    warmup: Number(values.w),
    check: values.c !== "0",
    repeats: Number(values.r),
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
 * One rank of the dcomm side, under mpiexec: `pg.allReduce` and, in turn with it, the C program's loop of
 * `MPI_Allreduce` calls (`dcomm_allreduce_loop` from its shared library) in the same process. Rank 0 prints a
 * JSON line per size and implementation.
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
  const results = await measureAllReduce(pg, flags.sizes, {
    ...flags,
    others: [{ call: (x) => loop(x, 1), loop }],
    tensors: flags.pool
      ? { make: (n) => pg.alloc(n) as Float32Array, done: (x) => pg.release(x) }
      : undefined,
  });
  if (pg.rank === 0) {
    for (const [dcomm, c] of results) {
      console.log(JSON.stringify({ runner: "dcomm", ...dcomm }));
      console.log(JSON.stringify({ runner: "c-inproc", ...c }));
    }
  }
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

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

type Runner = CollectiveRow["runner"];

/** The JSON lines of a run, by runner (the C program's lines carry none). */
function samplesOf(text: string): { runner: Runner; sample: AllReduceSample }[] {
  return text.split("\n").filter((l) => l.startsWith("{")).map((l) => {
    const { runner = "c", ...sample } = JSON.parse(l) as AllReduceSample & { runner?: Runner };
    return { runner, sample };
  });
}

/** Keeps each runner's fastest sample per size (and any wrong elements seen). */
function keepBest(
  into: Map<string, AllReduceSample>,
  lines: readonly { runner: Runner; sample: AllReduceSample }[],
): void {
  for (const { runner, sample } of lines) {
    const key = `${runner}:${sample.bytes}`;
    const known = into.get(key);
    if (!known || sample.timeUs < known.timeUs) {
      into.set(key, { ...sample, wrong: Math.max(sample.wrong, known?.wrong ?? 0) });
    }
  }
}

/**
 * Adds, per size, the ratios of each pair of adjacent rounds of one rank-mode run: the C loop's round time /
 * dcomm's (dcomm's busbw over C's, measured a moment apart).
 */
function addPairs(
  into: Map<number, number[]>,
  lines: readonly { runner: Runner; sample: AllReduceSample }[],
): void {
  const dcomm = new Map(lines.filter((l) => l.runner === "dcomm").map((l) => [l.sample.bytes, l.sample]));
  for (const { runner, sample: c } of lines) {
    const d = dcomm.get(c.bytes);
    if (runner !== "c-inproc" || !d?.roundsUs || !c.roundsUs) continue;
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
  const best = new Map<string, AllReduceSample>();
  const pairs = new Map<number, number[]>();
  const self = new URL(import.meta.url).pathname;
  for (let t = 0; t < trials; t++) {
    keepBest(best, samplesOf(await run("mpiexec", ["-n", String(np), exe, ...flags])));
    // cpu ranks meet through their own store: rank 0 serves it on a port picked here.
    const env: Record<string, string> = options.backend === "cpu"
      ? { MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(freePort()), DCOMM_STORE_SECRET: crypto.randomUUID() }
      : {};
    const ranks = samplesOf(
      await run("mpiexec", [
        ...["-n", String(np), Deno.execPath(), "run", "-A", self],
        ...["--rank", "--backend", options.backend, "--lib", options.lib, ...flags],
        ...(options.pool ? ["--pool"] : []),
      ], env),
    );
    keepBest(best, ranks);
    addPairs(pairs, ranks);
  }
  const rows: CollectiveRow[] = [];
  const cells = (r: AllReduceSample): string =>
    `${r.timeUs.toFixed(1).padStart(9)} ${r.busbwGBs.toFixed(3).padStart(7)} ${String(r.wrong).padStart(6)}`;
  const version = (await run("mpichversion", []).catch(() => "")).split("\n")[0] ?? "";
  console.log(
    `# all-reduce, float32 sum in place, ${np} ranks, best of ${trials} runs × ${options.repeats} rounds`,
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
  console.log(
    "#                                               dcomm                  C here                 C alone" +
      "     dcomm busbw / C here        / C alone",
  );
  console.log(
    "#     size      count  type redop root      time   busbw #wrong      time   busbw #wrong      time" +
      "   busbw #wrong   best paired(n)   best",
  );
  console.log(
    "#      (B) (elements)                       (us)  (GB/s)           (us)  (GB/s)           (us)" +
      "  (GB/s)",
  );
  let wrong = 0;
  const ratio = (a: AllReduceSample, b: AllReduceSample): number =>
    b.busbwGBs > 0 ? a.busbwGBs / b.busbwGBs : 0;
  for (const bytes of sizes) {
    const d = best.get(`dcomm:${bytes}`),
      here = best.get(`c-inproc:${bytes}`),
      alone = best.get(`c:${bytes}`);
    if (!d || !here || !alone) continue;
    const vsHere = ratio(d, here), vsAlone = ratio(d, alone);
    const paired = pairs.get(bytes) ?? [];
    const vsPaired = paired.length > 0 ? median(paired) : 0;
    console.log(
      `${String(bytes).padStart(10)} ${String(d.count).padStart(10)} float   sum   -1 ${cells(d)} ` +
        `${cells(here)} ${cells(alone)} ${vsHere.toFixed(2).padStart(6)} ` +
        `${vsPaired.toFixed(2).padStart(6)}(${String(paired.length).padStart(2)}) ${
          vsAlone.toFixed(2).padStart(6)
        }`,
    );
    const common = {
      collective: "allReduce",
      algorithm: options.backend === "mpi" ? "mpi" : "auto",
      transport: options.backend === "mpi" ? "mpi" : "shm",
      ranks: np,
      dtype: "float32",
    };
    rows.push({
      ...common,
      runner: "dcomm",
      ...d,
      baselineBusbwGBs: here.busbwGBs,
      vsBaseline: vsHere,
      vsBaselinePaired: vsPaired,
      programBusbwGBs: alone.busbwGBs,
      vsProgram: vsAlone,
    });
    rows.push({ ...common, runner: "c-inproc", ...here });
    rows.push({ ...common, runner: "c", ...alone });
    wrong += d.wrong + here.wrong + alone.wrong;
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
