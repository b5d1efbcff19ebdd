/**
 * `deno task bench:collectives`: nccl-tests for dcomm. The same flags (`-b -e -f -n -w -c -o -d`, plus
 * `--backend --collective --algorithm --transport --ranks --root`), the same table
 * (`size count type redop root | time algbw busbw #wrong`), correctness checked on every run, and a
 * non-zero exit on any wrong element. Writes `bench/results/collectives-<backend>.json`.
 *
 * ```sh
 * deno task bench:collectives -b 1K -e 64M -f 4 --ranks 4 --transport shm
 * deno task bench:collectives --collective allGather --algorithm recursive-doubling --ranks 8
 * deno task bench:collectives --backend mpi --ranks 2 -b 1K -e 32M -f 8   # bench/mpi.ts, against C
 * deno task bench:collectives --ranks 2 -b 8 -e 256M -f 4 -d float --peer mpi,gloo
 * ```
 *
 * `--peer mpi` measures the cpu backend against MPICH in one invocation (`bench/mpi.ts --backend cpu`:
 * the ranks under mpiexec, the C program's `MPI_Allreduce` loop in the same processes round by round,
 * and the C program alone); `--peer gloo` runs PyTorch's Gloo on the same sizes and ranks afterwards;
 * both together end with one table of all three; `--pool` gives dcomm's ranks tensors from `pg.alloc()`
 * (the host segment's pool, all-reduced in place). `-d` takes dcomm's dtype names and nccl-tests' (`float`,
 * `half`, `double`, `bfloat16`, `int8`, `uint8`, `int32`, `uint32`, `int64`, `uint64`).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { launch } from "../cli/launch.ts";
import { checkDType, checkOp, type DType } from "../core/dtype.ts";
import type { BenchCollective, BenchConfig, BenchRow } from "./_collectives_common.ts";
import { BUS_FACTOR, parseBytes } from "./_collectives_common.ts";

const COLLECTIVES: readonly BenchCollective[] = [
  "allReduce",
  "broadcast",
  "reduce",
  "allGather",
  "reduceScatter",
  "allToAll",
];

const { values } = parseArgs({
  args: Deno.args,
  options: {
    minbytes: { type: "string", short: "b", default: "8" },
    maxbytes: { type: "string", short: "e", default: "64M" },
    stepfactor: { type: "string", short: "f", default: "4" },
    iters: { type: "string", short: "n", default: "20" },
    warmup_iters: { type: "string", short: "w", default: "5" },
    check: { type: "string", short: "c", default: "1" },
    op: { type: "string", short: "o", default: "sum" },
    datatype: { type: "string", short: "d", default: "float32" },
    root: { type: "string", short: "r", default: "0" },
    backend: { type: "string", default: "cpu" },
    collective: { type: "string", default: "allReduce" },
    algorithm: { type: "string", default: "auto" },
    transport: { type: "string", default: "auto" },
    ranks: { type: "string", default: "4" },
    "check-calls": { type: "string", default: "1" },
    out: { type: "string" },
    peer: { type: "string" },
    rounds: { type: "string", short: "r", default: "5" },
    pool: { type: "boolean", default: false },
    trials: { type: "string", default: "2" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (values.help) {
  console.log(
    `Usage: deno task bench:collectives [-b 8] [-e 64M] [-f 4] [-n 20] [-w 5] [-c 1] [-o sum] [-d float32]
  [--backend cpu|mpi] [--collective allReduce|broadcast|reduce|allGather|reduceScatter|allToAll]
  [--algorithm auto] [--transport auto|tcp|shm] [--ranks 4] [--root 0] [--check-calls 1] [--out FILE]
  [--peer mpi,gloo] [-r 5] [--trials 2] [--pool]   (--peer mpi: rounds per size and runs, as bench/mpi.ts;
  --pool: dcomm's tensors from pg.alloc(), in the host segment's pool)`,
  );
  Deno.exit(0);
}
/** nccl-tests' dtype names (`-d float`), beside dcomm's own. */
const NCCL_TESTS_DTYPES: Readonly<Record<string, DType>> = {
  float: "float32",
  half: "float16",
  double: "float64",
  bfloat16: "bfloat16",
  int8: "int8",
  uint8: "uint8",
  int32: "int32",
  uint32: "uint32",
  int64: "int64",
  uint64: "uint64",
};

const collective = values.collective as BenchCollective;
if (!COLLECTIVES.includes(collective)) {
  throw new RangeError(
    `Unknown collective: expected one of ${COLLECTIVES.join(", ")}, found "${collective}"`,
  );
}
const config: BenchConfig = {
  collective,
  minBytes: parseBytes(values.minbytes),
  maxBytes: parseBytes(values.maxbytes),
  factor: Number(values.stepfactor),
  iters: Number(values.iters),
  warmup: Number(values.warmup_iters),
  check: values.check !== "0",
  op: checkOp(values.op),
  dtype: checkDType(NCCL_TESTS_DTYPES[values.datatype] ?? values.datatype),
  root: Number(values.root),
  algorithm: values.algorithm,
  transport: values.transport,
  checkCalls: values["check-calls"] !== "0",
};
if (!(config.factor > 1)) {
  throw new RangeError(`Invalid -f: expected a factor > 1, found ${values.stepfactor}`);
}
const backend = values.backend;
const peers = (values.peer ?? "").split(",").filter((p) => p !== "");
for (const p of peers) {
  if (p !== "mpi" && p !== "gloo") throw new RangeError(`Unknown --peer: expected mpi or gloo, found "${p}"`);
}
if (backend === "mpi") Deno.exit(await runMpi("mpi"));
if (backend === "cpu" && peers.includes("mpi")) Deno.exit(await againstPeers());
if (backend !== "cpu") {
  console.error(
    `bench:collectives --backend ${backend}: expected cpu or mpi; for nccl run deno task bench:nccl on a GPU machine`,
  );
  Deno.exit(2);
}

/**
 * `--backend mpi`, or `--peer mpi`: bench/mpi.ts under `mpiexec -n <--ranks>`, which runs MPICH's
 * `MPI_Allreduce` from C in the same invocation as the baseline (all-reduce of float32 sums only).
 */
async function runMpi(measured: "mpi" | "cpu", out?: string): Promise<number> {
  if (collective !== "allReduce" || config.op !== "sum" || config.dtype !== "float32") {
    throw new RangeError(
      `bench:collectives against MPICH measures allReduce of float32 sums; found --collective ` +
        `${collective} -o ${config.op} -d ${config.dtype}`,
    );
  }
  const file = out ?? values.out;
  const args = [
    "run",
    "-A",
    new URL("./mpi.ts", import.meta.url).pathname,
    ...["--backend", measured, "--np", values.ranks],
    ...["-b", values.minbytes, "-e", values.maxbytes, "-f", values.stepfactor],
    ...["-n", values.iters, "-w", values.warmup_iters, "-c", values.check],
    ...["-r", values.rounds, "--trials", values.trials],
    ...(values.pool ? ["--pool"] : []),
    ...(file === undefined ? [] : ["--out", file]),
  ];
  const { code } = await new Deno.Command(Deno.execPath(), { args, stdout: "inherit", stderr: "inherit" })
    .output();
  return code;
}

/** A row of bench/mpi.ts's output file. */
interface MpichRow extends BenchRow {
  runner: "dcomm" | "c-inproc" | "c";
  vsBaselinePaired?: number;
}

/**
 * `--peer mpi[,gloo]`: the cpu backend against MPICH (bench/mpi.ts --backend cpu), then Gloo on the same
 * sizes, and one table of the three.
 */
async function againstPeers(): Promise<number> {
  const out = values.out ??
    new URL(`./results/collectives-cpu${values.pool ? "-pool" : ""}-mpich.json`, import.meta.url).pathname;
  const code = await runMpi("cpu", out);
  if (code !== 0) return code;
  const all = JSON.parse(Deno.readTextFileSync(out)) as MpichRow[];
  const dcomm = all.filter((r) => r.runner === "dcomm");
  const glooRows = peers.includes("gloo") ? await gloo(dcomm) : [];
  console.log(
    `#\n# all-reduce, float32 sum, ${values.ranks} ranks: dcomm cpu (shm${
      values.pool ? ", pool tensors" : ""
    }) against MPICH and Gloo`,
  );
  console.log(
    "#       size   dcomm (us)  busbw   MPICH here  busbw  MPICH alone  busbw  dcomm/MPICH (paired)" +
      (glooRows.length ? "    Gloo (us)  busbw  dcomm/Gloo" : ""),
  );
  for (const d of dcomm) {
    const here = all.find((r) => r.runner === "c-inproc" && r.bytes === d.bytes);
    const alone = all.find((r) => r.runner === "c" && r.bytes === d.bytes);
    const g = glooRows.find((r) => r.bytes === d.bytes);
    const cells = [
      String(d.bytes).padStart(12),
      d.timeUs.toFixed(1).padStart(12),
      d.busbwGBs.toFixed(2).padStart(6),
      (here?.timeUs ?? NaN).toFixed(1).padStart(12),
      (here?.busbwGBs ?? NaN).toFixed(2).padStart(6),
      (alone?.timeUs ?? NaN).toFixed(1).padStart(12),
      (alone?.busbwGBs ?? NaN).toFixed(2).padStart(6),
      `${(here ? d.busbwGBs / here.busbwGBs : NaN).toFixed(2)} (${(d.vsBaselinePaired ?? NaN).toFixed(2)})`
        .padStart(21),
    ];
    if (g) {
      const glooBus = (d.bytes / (g.glooUs * 1e-6) / 1e9) * BUS_FACTOR.allReduce(Number(values.ranks));
      cells.push(
        g.glooUs.toFixed(1).padStart(12),
        glooBus.toFixed(2).padStart(6),
        g.speedup.toFixed(2).padStart(11),
      );
    }
    console.log(cells.join(" "));
  }
  return 0;
}

let rows: BenchRow[] = [];
const result = await launch({
  nprocPerNode: Number(values.ranks),
  command: [new URL("./_collectives_rank.ts", import.meta.url).pathname, JSON.stringify(config)],
  env: values.transport === "auto" ? {} : { DCOMM_TRANSPORT: values.transport },
  write: (line, stream) => {
    const text = line.replace(/^\[rank\d+\]: /, "");
    if (text.startsWith("RESULTS ")) rows = JSON.parse(text.slice(8));
    else if (line.startsWith("[rank0]: ") || stream === "stderr") console.log(text);
  },
});
if (result.code !== 0) {
  console.error(`bench:collectives: a rank exited with code ${result.code}`);
  Deno.exit(result.code);
}
const out = values.out ?? new URL(`./results/collectives-${backend}.json`, import.meta.url).pathname;
let existing: BenchRow[] = [];
try {
  existing = JSON.parse(Deno.readTextFileSync(out));
} catch { /* first run */ }
// Replace this configuration's rows, keep the others (other collectives, transports, rank counts).
const key = (r: BenchRow): string =>
  `${r.collective}|${r.algorithm}|${r.transport}|${r.ranks}|${r.dtype}|${r.bytes}`;
const mine = new Set(rows.map(key));
const merged = [...existing.filter((r) => !mine.has(key(r))), ...rows];
Deno.writeTextFileSync(out, JSON.stringify(merged, null, 2) + "\n");
if (peers.includes("gloo")) await gloo(rows);
const wrong = rows.reduce((s, r) => s + r.wrong, 0);
console.log(`# ${rows.length} sizes, ${wrong} wrong elements; wrote ${out}`);
if (wrong > 0) Deno.exit(1);

/** One size of the Gloo comparison. */
interface GlooRow {
  bytes: number;
  dcommUs: number;
  glooUs: number;
  speedup: number;
}

/** Runs PyTorch's Gloo all-reduce on the same sizes and ranks, and prints the ratio to dcomm's time. */
async function gloo(rows: BenchRow[]): Promise<GlooRow[]> {
  if (collective !== "allReduce" || config.dtype !== "float32" || config.op !== "sum") {
    throw new RangeError("--peer gloo compares allReduce of float32 with op sum only");
  }
  const lines: string[] = [];
  const script = new URL("./native/gloo_allreduce.py", import.meta.url).pathname;
  const r = await launch({
    nprocPerNode: Number(values.ranks),
    noDeno: true,
    hostStore: false,
    command: [
      "python3",
      script,
      String(config.minBytes),
      String(config.maxBytes),
      String(config.factor),
      String(config.iters),
      String(config.warmup),
    ],
    write: (line) => {
      const text = line.replace(/^\[rank\d+\]: /, "");
      if (text.startsWith("{")) lines.push(text);
      else if (/Error|error/.test(text)) console.error(text);
    },
  });
  if (r.code !== 0) throw new Error(`The Gloo peer failed (exit ${r.code}); is torch importable by python3?`);
  const peer = lines.map((l) => JSON.parse(l) as { bytes: number; timeUs: number; wrong: number });
  console.log("#\n# the same sizes with PyTorch's Gloo (torch " + "all_reduce, same ranks, same machine)");
  console.log("#       size   dcomm (us)    gloo (us)   gloo/dcomm  gloo #wrong");
  const comparison: GlooRow[] = [];
  for (const p of peer) {
    const mine = rows.find((row) => row.bytes === p.bytes);
    if (!mine) continue;
    comparison.push({
      bytes: p.bytes,
      dcommUs: mine.timeUs,
      glooUs: p.timeUs,
      speedup: p.timeUs / mine.timeUs,
    });
    console.log(
      `${String(p.bytes).padStart(12)} ${mine.timeUs.toFixed(1).padStart(12)} ${
        p.timeUs.toFixed(1).padStart(12)
      } ${(p.timeUs / mine.timeUs).toFixed(2).padStart(12)} ${String(p.wrong).padStart(12)}`,
    );
  }
  const file =
    new URL(`./results/gloo-${values.ranks}ranks-${rows[0]?.transport ?? "auto"}.json`, import.meta.url)
      .pathname;
  Deno.writeTextFileSync(file, JSON.stringify(comparison, null, 2) + "\n");
  return comparison;
}
