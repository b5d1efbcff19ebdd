/**
 * `deno task bench:floor`: the floor of a small all-reduce on 2 ranks of one host, as JavaScript allows it,
 * and dcomm's 8-byte `pg.allReduce` beside it, in the same two processes, taking turns round by round (the
 * order rotates every round, so none always runs first):
 *
 * - `ping-pong`: a bare ping-pong over an `Int32Array` in shared memory mapped as the host segment maps
 *   its areas (`shm_open` + `mmap`, `Deno.UnsafePointerView.getArrayBuffer`), each side spinning on
 *   `Atomics.load` (`Atomics.wait` does not work on that memory): its round trip over two is the one-way
 *   latency of a store seen by a spinning peer;
 * - `bare all-reduce`: an 8-byte (2 × float32) sum over the same memory: each rank writes its values and a
 *   sequence number into its cache line (two slots, by the number's parity, so a slot is never rewritten
 *   before the peer read it), spins for the peer's number, and sums in rank order: the collective itself;
 * - `bare all-reduce, awaited`: the same, returned in a resolved promise and awaited call by call: the
 *   least a call that returns a promise can do;
 * - `a report and its done Work` and `await resolved`: the cost of one `Work` as dcomm's small path returns
 *   it (two clock reads, the report, `doneWork(report)`, awaited) and of `await` of a resolved promise;
 * - `dcomm pg.allReduce`: `await pg.allReduce(x)` of the same 8 bytes (the cpu backend, the host segment);
 * - `MPICH MPI_Allreduce`: with mpiexec and mpicc, MPICH's blocking loop from C in the same processes
 *   (`bench/native/mpi_collectives.c`'s `dcomm_allreduce_loop`, one FFI call per round, as `bench/mpi.ts`).
 *
 * Each round times `-n` calls per implementation after a short untimed run; a round's time is the slower
 * rank's; per implementation the table gives the median and the fastest round, and two paired ratios: the
 * median over rounds of MPICH's round time over its round time (≥ 1: faster than MPICH), and of its round
 * time over the bare all-reduce's (how many floors it costs); each pair taken a moment apart, so that the
 * machine's drift (up to 2× within minutes here) cancels. Every all-reduce is checked once on fresh data
 * first. Rows go to `bench/results/small-floor.json`.
 *
 * ```sh
 * deno task bench:floor              # -n 2000 -r 15; under mpiexec when mpiexec and mpicc are installed
 * deno task bench:floor --no-mpi     # the two ranks started directly, without the MPICH row
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { close, epochNowMs, ftruncate, mmapShared, munmap, shmOpen, shmUnlink } from "../ffi/libc/libc.ts";
import { freePort, median } from "./mpi.ts";

/** One implementation's row of `bench/results/small-floor.json`. */
export interface FloorRow {
  /** Its key: `ping-pong`, `bare`, `bare-awaited`, `work`, `await`, `dcomm`, `mpich`. */
  readonly implementation: string;
  /** What the table calls it. */
  readonly label: string;
  /** What its time counts: one way of a ping-pong, one call, or one await. */
  readonly unit: "one-way" | "call" | "await";
  /** Ranks. */
  readonly ranks: number;
  /** Bytes of the all-reduce (0 for the rows that reduce nothing). */
  readonly bytes: number;
  /** Calls per round. */
  readonly iters: number;
  /** Microseconds per call (per one way for the ping-pong), median round. */
  readonly medianUs: number;
  /** The fastest round's. */
  readonly bestUs: number;
  /** Median over rounds of MPICH's round time / this one's (absent without MPICH). */
  readonly vsMpichPaired?: number;
  /** Median over rounds of this round time / the bare all-reduce's. */
  readonly vsFloorPaired: number;
  /** Every round's microseconds per call, the slower rank's. */
  readonly roundsUs: readonly number[];
}

/** The implementations, in table order. */
const IMPLEMENTATIONS = [
  { key: "ping-pong", label: "(a) ping-pong over shared memory, one way", unit: "one-way", bytes: 0 },
  { key: "bare", label: "(b) bare 8 B all-reduce over shared memory", unit: "call", bytes: 8 },
  { key: "bare-awaited", label: "(b) the same, in a resolved promise, awaited", unit: "call", bytes: 8 },
  { key: "work", label: "(c) a report and its done Work, awaited", unit: "await", bytes: 0 },
  { key: "await", label: "(c) await of a resolved promise", unit: "await", bytes: 0 },
  { key: "dcomm", label: "(d) dcomm pg.allReduce, 8 B, awaited", unit: "call", bytes: 8 },
  { key: "mpich", label: "(e) MPICH MPI_Allreduce loop, 8 B", unit: "call", bytes: 8 },
] as const;

interface Flags {
  iters: number;
  rounds: number;
  mpi: boolean;
  rank: boolean;
  shm: string;
  lib: string;
  out: string;
}

function parseFlags(args: string[]): Flags {
  const { values } = parseArgs({
    args,
    options: {
      n: { type: "string", short: "n", default: "2000" },
      r: { type: "string", short: "r", default: "15" },
      "no-mpi": { type: "boolean", default: false },
      rank: { type: "boolean", default: false },
      shm: { type: "string", default: "" },
      lib: { type: "string", default: "" },
      out: { type: "string", default: new URL("./results/small-floor.json", import.meta.url).pathname },
    },
  });
  const iters = Number(values.n), rounds = Number(values.r);
  if (!Number.isInteger(iters) || iters < 1) {
    throw new RangeError(`Invalid -n: expected >= 1, found ${values.n}`);
  }
  if (!Number.isInteger(rounds) || rounds < 1) {
    throw new RangeError(`Invalid -r: expected >= 1, found ${values.r}`);
  }
  return {
    iters,
    rounds,
    mpi: !values["no-mpi"],
    rank: values.rank,
    shm: values.shm,
    lib: values.lib,
    out: values.out,
  };
}

// The shared page: each rank's ping-pong word and its all-reduce line, 128 bytes apart (no false sharing,
// and clear of the adjacent-line prefetcher's pairs).
const PAGE_BYTES = 4096;
const PING_WORD = (rank: number): number => rank * 32;
/** A rank's all-reduce line: word 0 the sequence number, then two slots of 2 float32 (bytes 8 and 16). */
const LINE_WORD = (rank: number): number => 256 + rank * 32;

/** One rank: every implementation, round by round; rank 0 prints the rounds as a `RESULTS` line. */
async function rankMain(flags: Flags): Promise<void> {
  type Loop = { dcomm_allreduce_loop(x: Float32Array, n: number, iters: bigint): number };
  let mpich: Loop | undefined;
  let closeLib = (): void => {};
  if (flags.lib !== "") {
    const lib = Deno.dlopen(flags.lib, {
      dcomm_allreduce_loop: { parameters: ["buffer", "i32", "i64"], result: "f64" },
      dcomm_mpi_init: { parameters: [], result: "i32" },
      dcomm_mpi_finalize: { parameters: [], result: "void" },
    });
    lib.symbols.dcomm_mpi_init();
    mpich = lib.symbols as unknown as Loop;
    closeLib = () => {
      lib.symbols.dcomm_mpi_finalize();
      lib.close();
    };
  }
  const { init } = await import("../backend/init.ts");
  const { doneWork, workReport } = await import("../backend/work.ts");
  const pg = await init({ backend: "cpu" });
  if (pg.size !== 2) throw new RangeError(`bench:floor runs on 2 ranks, found ${pg.size}`);
  const me = pg.rank, peer = 1 - me;
  const fd = shmOpen(flags.shm);
  const mapping = mmapShared(fd, PAGE_BYTES);
  close(fd);
  const words = new Int32Array(mapping.buffer);
  const floats = new Float32Array(mapping.buffer);
  const myPing = PING_WORD(me), peerPing = PING_WORD(peer);
  const myLine = LINE_WORD(me), peerLine = LINE_WORD(peer);
  let pings = 0, sums = 0;

  const pingPong = (iters: number): void => {
    for (let i = 0; i < iters; i++) {
      const seq = ++pings;
      if (me === 0) {
        Atomics.store(words, myPing, seq);
        while (Atomics.load(words, peerPing) !== seq);
      } else {
        while (Atomics.load(words, peerPing) !== seq);
        Atomics.store(words, myPing, seq);
      }
    }
  };
  /** One bare all-reduce of `x` (2 float32) in place: post, spin for the peer, sum in rank order. */
  const bareAllReduce = (x: Float32Array): void => {
    const seq = ++sums;
    const slot = myLine + 2 + 2 * (seq & 1), theirs = peerLine + 2 + 2 * (seq & 1);
    floats[slot] = x[0];
    floats[slot + 1] = x[1];
    Atomics.store(words, myLine, seq);
    while (((Atomics.load(words, peerLine) - seq) | 0) < 0);
    const first = me === 0 ? slot : theirs, second = me === 0 ? theirs : slot;
    x[0] = floats[first] + floats[second];
    x[1] = floats[first + 1] + floats[second + 1];
  };
  const resolved = Promise.resolve();
  const REPORT = {
    collective: "allReduce",
    algorithm: "segment",
    transport: "shm",
    bytes: 8,
    bytesSent: 8,
  } as const;

  // Every all-reduce checked once on fresh data: rank r holds [r + 1, 2(r + 1)], so the sum is [3, 6].
  const fresh = (): Float32Array => new Float32Array([me + 1, 2 * (me + 1)]);
  const checks: [string, (x: Float32Array) => Promise<void> | void][] = [
    ["bare all-reduce", bareAllReduce],
    ["dcomm pg.allReduce", async (x) => void await pg.allReduce(x)],
  ];
  if (mpich) checks.push(["MPICH", (x) => void mpich.dcomm_allreduce_loop(x, 2, 1n)]);
  for (const [name, run] of checks) {
    const x = fresh();
    await run(x);
    if (x[0] !== 3 || x[1] !== 6) throw new Error(`${name} summed [${x}] on rank ${me}, expected [3, 6]`);
  }

  const x = fresh();
  const timed: Record<string, (iters: number) => Promise<number> | number> = {
    "ping-pong": (iters) => {
      const t0 = performance.now();
      pingPong(iters);
      return (performance.now() - t0) / 2;
    },
    "bare": (iters) => {
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) bareAllReduce(x);
      return performance.now() - t0;
    },
    "bare-awaited": async (iters) => {
      const call = (): Promise<void> => {
        bareAllReduce(x);
        return resolved;
      };
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) await call();
      return performance.now() - t0;
    },
    "work": async (iters) => {
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) {
        // As the small path makes it: two clock reads, the report, a Work done when made.
        const began = epochNowMs(), ended = epochNowMs();
        await doneWork(workReport({ ...REPORT, timeMs: ended - began, startedAt: began, finishedAt: ended }));
      }
      return performance.now() - t0;
    },
    "await": async (iters) => {
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) await resolved;
      return performance.now() - t0;
    },
    "dcomm": async (iters) => {
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) await pg.allReduce(x);
      return performance.now() - t0;
    },
  };
  if (mpich) timed["mpich"] = (iters) => mpich.dcomm_allreduce_loop(x, 2, BigInt(iters)) * 1000;
  const keys = IMPLEMENTATIONS.map((i) => i.key).filter((k) => timed[k] !== undefined);

  // Warm-up (the JIT's optimising tier for every loop), then the rounds.
  for (const k of keys) await timed[k](Math.min(flags.iters, 1000));
  const times = new Float64Array(keys.length * flags.rounds);
  for (let r = 0; r < flags.rounds; r++) {
    for (let j = 0; j < keys.length; j++) {
      const i = (j + r) % keys.length;
      await pg.barrier();
      pingPong(8); // both ranks leave the barrier together
      await timed[keys[i]](Math.min(flags.iters, 50));
      times[i * flags.rounds + r] = (await timed[keys[i]](flags.iters)) * 1000 / flags.iters;
    }
  }
  await pg.allReduce(times, { op: "max" });
  if (me === 0) {
    const rounds = Object.fromEntries(
      keys.map((k, i) => [k, [...times.subarray(i * flags.rounds, (i + 1) * flags.rounds)]]),
    );
    console.log("RESULTS " + JSON.stringify(rounds));
  }
  munmap(mapping);
  await pg.close();
  closeLib();
}

/**
 * The rows of one run, from each implementation's rounds (µs per call, the slower rank's).
 *
 * @param rounds Each implementation's rounds, by key.
 * @param iters Calls per round.
 * @returns The rows, in table order.
 */
export function floorRows(rounds: Readonly<Record<string, readonly number[]>>, iters: number): FloorRow[] {
  const paired = (a: readonly number[] | undefined, b: readonly number[] | undefined): number | undefined =>
    a && b ? median(a.map((v, i) => v / b[i])) : undefined;
  const rows: FloorRow[] = [];
  for (const impl of IMPLEMENTATIONS) {
    const us = rounds[impl.key];
    if (us === undefined) continue;
    const vsMpich = paired(rounds["mpich"], us);
    rows.push({
      implementation: impl.key,
      label: impl.label,
      unit: impl.unit,
      ranks: 2,
      bytes: impl.bytes,
      iters,
      medianUs: median(us),
      bestUs: Math.min(...us),
      ...(vsMpich === undefined ? {} : { vsMpichPaired: vsMpich }),
      vsFloorPaired: paired(us, rounds["bare"]) ?? 0,
      roundsUs: us,
    });
  }
  return rows;
}

/**
 * The table of {@linkcode floorRows}.
 *
 * @param rows The rows.
 * @returns Its lines.
 */
export function floorTable(rows: readonly FloorRow[]): string[] {
  const mpich = rows.some((r) => r.vsMpichPaired !== undefined);
  const head = ["what", "µs median", "µs best", "× bare all-reduce (paired)"];
  if (mpich) head.push("MPICH / it (paired)");
  const cells = rows.map((r) => {
    const line = [
      r.label,
      r.medianUs.toFixed(3),
      r.bestUs.toFixed(3),
      `${r.vsFloorPaired.toFixed(2)}×`,
    ];
    if (mpich) line.push(r.vsMpichPaired === undefined ? "–" : `${r.vsMpichPaired.toFixed(2)}×`);
    return line;
  });
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const fmt = (c: string[]): string =>
    `| ${c.map((v, i) => (i === 0 ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join(" | ")} |`;
  return [
    fmt(head),
    `| ${widths.map((w, i) => (i === 0 ? "-".repeat(w) : "-".repeat(w - 1) + ":")).join(" | ")} |`,
    ...cells.map(fmt),
  ];
}

function hasCommand(cmd: string): boolean {
  try {
    new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" }).outputSync();
    return true;
  } catch {
    return false;
  }
}

async function output(child: Deno.ChildProcess, what: string): Promise<string> {
  const out = await child.output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${what} failed (${out.code}):\n${text}\n${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/** Builds the C loop's shared library (as bench/mpi.ts does) when it is missing or older than its source. */
async function buildLibrary(): Promise<string> {
  const here = new URL(".", import.meta.url).pathname;
  const source = `${here}native/mpi_collectives.c`, lib = `${here}native/build/libmpi_collectives.so`;
  const mtime = (p: string): number => {
    try {
      return Deno.statSync(p).mtime?.getTime() ?? 0;
    } catch {
      return -1;
    }
  };
  if (mtime(lib) < mtime(source)) {
    Deno.mkdirSync(`${here}native/build`, { recursive: true });
    const cmd = new Deno.Command("mpicc", {
      args: ["-O2", "-shared", "-fPIC", "-DDCOMM_BENCH_LIBRARY", source, "-o", lib],
      stdout: "piped",
      stderr: "piped",
    });
    await output(cmd.spawn(), "mpicc");
  }
  return lib;
}

async function main(flags: Flags): Promise<void> {
  const mpi = flags.mpi && hasCommand("mpiexec") && hasCommand("mpicc");
  const lib = mpi ? await buildLibrary() : "";
  const shm = `/dcomm-floor-${crypto.randomUUID()}`;
  const fd = shmOpen(shm, { create: true });
  let text: string;
  try {
    ftruncate(fd, PAGE_BYTES);
    close(fd);
    const self = new URL(import.meta.url).pathname;
    const args = [
      "run",
      "-A",
      self,
      "--rank",
      "--shm",
      shm,
      "-n",
      String(flags.iters),
      "-r",
      String(flags.rounds),
    ];
    const env = {
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: String(freePort()),
      DCOMM_STORE_SECRET: crypto.randomUUID(),
    };
    if (mpi) {
      const cmd = new Deno.Command("mpiexec", {
        args: ["-n", "2", Deno.execPath(), ...args, "--lib", lib],
        env,
        stdout: "piped",
        stderr: "piped",
      });
      text = await output(cmd.spawn(), "mpiexec");
    } else {
      const ranks = [0, 1].map((rank) =>
        new Deno.Command(Deno.execPath(), {
          args,
          env: { ...env, RANK: String(rank), WORLD_SIZE: "2" },
          stdout: "piped",
          stderr: "piped",
        }).spawn()
      );
      const texts = await Promise.all(ranks.map((c, r) => output(c, `rank ${r}`)));
      text = texts.join("\n");
    }
  } finally {
    shmUnlink(shm);
  }
  const line = text.split("\n").find((l) => l.startsWith("RESULTS "));
  if (line === undefined) throw new Error(`No RESULTS line from the ranks:\n${text}`);
  const rows = floorRows(JSON.parse(line.slice(8)), flags.iters);
  console.log(
    `# 8-byte all-reduce (2 × float32 sum) on 2 ranks of one host, and its floor; ${flags.rounds} rounds × ` +
      `${flags.iters} calls, taking turns${mpi ? ", under mpiexec" : ""}`,
  );
  for (const l of floorTable(rows)) console.log(l);
  Deno.writeTextFileSync(flags.out, JSON.stringify(rows, null, 2) + "\n");
  console.log(`# wrote ${rows.length} rows to ${flags.out}`);
}

if (import.meta.main) {
  const flags = parseFlags(Deno.args);
  if (flags.rank) await rankMain(flags);
  else await main(flags);
}
