/**
 * `deno run -A bench/mpi_floor.ts`: how close a non-blocking MPI all-reduce polled from JavaScript can get to
 * MPI's blocking call, and where the mpi backend stands between the two. Four implementations of the same
 * in-place float32 sum run in the same processes under `mpiexec -n <--np>`, taking turns round by round (the
 * order rotates every round, so none always runs first):
 *
 * - `blocking`: `MPI_Allreduce` through FFI, one call per all-reduce (blocks the event loop; the reference);
 * - `bare loop`: `MPI_Iallreduce`, then `MPI_Test` in a synchronous loop until done (still blocks the event
 *   loop: what MPICH's non-blocking path costs when JavaScript polls it, and nothing else);
 * - `promise`: `MPI_Iallreduce` and one `MPI_Test`, then a microtask that tests until done and resolves a
 *   promise the caller awaits: the least a call can do and still return before it completes;
 * - `dcomm`: `await pg.allReduce(x).wait()` on the mpi backend.
 *
 * Each implementation is checked once on fresh data (every element the exact sum), then each round times `-n`
 * back-to-back calls per implementation (the slowest rank's average); per size the table
 * gives each implementation's median round and its paired ratio: the median over rounds of
 * blocking time / its time, with both taken a moment apart (this machine's speed drifts by up to 2× over
 * seconds, which the pairs cancel). Rows go to `bench/results/mpi-floor.json`.
 *
 * ```sh
 * deno run -A bench/mpi_floor.ts      # --np 2 -b 64K -e 4M -f 8 -n 20 -r 40
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { median, parseSize } from "./mpi.ts";

/** One implementation at one size. */
export interface FloorRow {
  /** `"blocking"`, `"bare loop"`, `"promise"` or `"dcomm"`. */
  implementation: string;
  /** World size. */
  ranks: number;
  /** Bytes of the float32 tensor. */
  bytes: number;
  /** The median round's microseconds per call (the slowest rank's average over `-n` calls). */
  medianUs: number;
  /** The fastest round's microseconds per call. */
  bestUs: number;
  /** Median over rounds of the blocking round's time / this implementation's round's time. */
  vsBlocking: number;
  /** Rounds measured. */
  rounds: number;
}

interface Flags {
  np: number;
  sizes: number[];
  iters: number;
  rounds: number;
  rank: boolean;
  out: string;
  args: string[];
}

function parseFlags(args: string[]): Flags {
  const { values } = parseArgs({
    args,
    options: {
      np: { type: "string", default: "2" },
      b: { type: "string", short: "b", default: "64K" },
      e: { type: "string", short: "e", default: "4M" },
      f: { type: "string", short: "f", default: "8" },
      n: { type: "string", short: "n", default: "20" },
      r: { type: "string", short: "r", default: "40" },
      rank: { type: "boolean", default: false },
      out: { type: "string", default: new URL("./results/mpi-floor.json", import.meta.url).pathname },
    },
  });
  const sizes: number[] = [];
  const factor = Math.max(2, Number(values.f));
  for (let b = parseSize(values.b); b <= parseSize(values.e); b *= factor) sizes.push(Math.floor(b / 4) * 4);
  return {
    np: Number(values.np),
    sizes,
    iters: Number(values.n),
    rounds: Number(values.r),
    rank: values.rank,
    out: values.out,
    args: ["-b", values.b, "-e", values.e, "-f", values.f, "-n", values.n, "-r", values.r],
  };
}

/** One rank: every implementation at every size; rank 0 prints a JSON line per row. */
async function rankMain(flags: Flags): Promise<void> {
  const { init } = await import("../backend/init.ts");
  const { mpi } = await import("../ffi/mpi/mpi.ts");
  const { MpiComm, MpiDatatype, MpiOp, MPI_IN_PLACE_ADDRESS, MPI_STATUS_SIZE, pointerTo } = await import(
    "../ffi/mpi/constants.ts"
  );
  const pg = await init({ backend: "mpi" });
  const m = mpi().symbols;
  const inPlace = pointerTo(MPI_IN_PLACE_ADDRESS);
  const req = new Int32Array(1), flag = new Int32Array(1), status = new Int32Array(MPI_STATUS_SIZE / 4);
  const statusPtr = Deno.UnsafePointer.of(status);
  const check = (rc: number, call: string): void => {
    if (rc !== 0) throw new Error(`${call} failed with code ${rc}`);
  };
  const implementations = (x: Float32Array): [string, () => unknown][] => {
    const p = Deno.UnsafePointer.of(x), n = x.length;
    const start = (): void =>
      check(
        m.MPI_Iallreduce(inPlace, p, n, MpiDatatype.FLOAT, MpiOp.SUM, MpiComm.WORLD, req),
        "MPI_Iallreduce",
      );
    const test = (): void => check(m.MPI_Test(req, flag, statusPtr), "MPI_Test");
    return [
      [
        "blocking",
        () =>
          check(m.MPI_Allreduce(inPlace, p, n, MpiDatatype.FLOAT, MpiOp.SUM, MpiComm.WORLD), "MPI_Allreduce"),
      ],
      ["bare loop", () => {
        start();
        flag[0] = 0;
        while (flag[0] === 0) test();
      }],
      ["promise", () => {
        start();
        flag[0] = 0;
        test();
        const { promise, resolve } = Promise.withResolvers<void>();
        queueMicrotask(() => {
          while (flag[0] === 0) test();
          resolve();
        });
        return promise;
      }],
      ["dcomm", () => pg.allReduce(x).wait()],
    ];
  };
  // The clock and the barrier through FFI, so that the backend's code sees only the calls it is timed on.
  const slowest = new Float64Array(1);
  const slowestPtr = Deno.UnsafePointer.of(slowest);
  const round = async (iters: number, call: () => unknown): Promise<number> => {
    check(m.MPI_Barrier(MpiComm.WORLD), "MPI_Barrier");
    const t0 = performance.now();
    for (let i = 0; i < iters; i++) await call();
    slowest[0] = ((performance.now() - t0) / iters) * 1000;
    check(
      m.MPI_Allreduce(inPlace, slowestPtr, 1, MpiDatatype.DOUBLE, MpiOp.MAX, MpiComm.WORLD),
      "MPI_Allreduce",
    );
    return slowest[0];
  };
  // 3000 small calls each first: the JIT's optimising tier.
  for (const [, call] of implementations(new Float32Array(256))) for (let i = 0; i < 3000; i++) await call();
  for (const bytes of flags.sizes) {
    const x = new Float32Array(bytes / 4);
    const impls = implementations(x);
    const want = (pg.size * (pg.size + 1)) / 2;
    for (const [name, call] of impls) {
      x.fill(pg.rank + 1);
      await call();
      const wrong = x.findIndex((v) => v !== want);
      if (wrong >= 0) {
        throw new Error(`${name}: element ${wrong} of ${bytes} B is ${x[wrong]}, expected ${want}`);
      }
    }
    // Zeros while timing: the sums stay 0 (no overflow, no denormals).
    x.fill(0);
    for (const [, call] of impls) for (let i = 0; i < 20; i++) await call();
    const times: number[][] = impls.map(() => []);
    for (let r = 0; r < flags.rounds; r++) {
      for (let j = 0; j < impls.length; j++) {
        const k = (j + r) % impls.length;
        times[k].push(await round(flags.iters, impls[k][1]));
      }
    }
    if (pg.rank === 0) {
      for (let k = 0; k < impls.length; k++) {
        const row: FloorRow = {
          implementation: impls[k][0],
          ranks: pg.size,
          bytes,
          medianUs: median(times[k]),
          bestUs: Math.min(...times[k]),
          vsBlocking: median(times[k].map((t, r) => times[0][r] / t)),
          rounds: flags.rounds,
        };
        console.log(JSON.stringify(row));
      }
    }
  }
  await pg.close();
}

async function main(flags: Flags): Promise<void> {
  const out = await new Deno.Command("mpiexec", {
    args: [
      "-n",
      String(flags.np),
      Deno.execPath(),
      "run",
      "-A",
      new URL(import.meta.url).pathname,
      "--rank",
      ...flags.args,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    console.error(new TextDecoder().decode(out.stderr));
    Deno.exit(out.code || 1);
  }
  const rows = new TextDecoder().decode(out.stdout).split("\n").filter((l) => l.startsWith("{")).map((l) =>
    JSON.parse(l) as FloorRow
  );
  console.log(
    `# all-reduce, float32 sum in place, ${flags.np} ranks, ${flags.rounds} rounds of ${flags.iters} calls`,
  );
  console.log("#     size  implementation   median µs   best µs   blocking / it (paired median)");
  for (const r of rows) {
    console.log(
      `${String(r.bytes).padStart(10)}  ${r.implementation.padEnd(14)} ${
        r.medianUs.toFixed(1).padStart(10)
      } ` +
        `${r.bestUs.toFixed(1).padStart(9)}   ${r.vsBlocking.toFixed(3)}`,
    );
  }
  Deno.writeTextFileSync(flags.out, JSON.stringify(rows, null, 2) + "\n");
  console.log(`# wrote ${rows.length} rows to ${flags.out}`);
}

if (import.meta.main) {
  const flags = parseFlags(Deno.args);
  if (flags.rank) await rankMain(flags);
  else await main(flags);
}
