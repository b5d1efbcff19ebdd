/**
 * `deno task bench:collectives`: nccl-tests for dcomm. The same flags (`-b -e -f -n -w -c -o -d -r`, plus
 * `--backend --collective --algorithm --transport --ranks --rounds --pool`), the same table
 * (`size count type redop root | time algbw busbw #wrong`), the same timing (the input written once per
 * size, `-w` untimed calls, then `-n` calls timed back to back, each awaited: nothing else in the timed
 * loop), correctness checked on every run (`_harness.ts` says how), and a non-zero exit on any wrong
 * element. The harness is `_harness.ts` (one descriptor per collective in `_descriptors.ts`, one row and
 * table in `_rows.ts`). Before the first size, `--jit-warmup` (3000) calls of a 1 KiB collective and a third
 * as many of 256 KiB take the JIT to its optimising tier, and a first size up to 1 MiB gets 200 more untimed
 * calls, as in `bench/mpi.ts`. Writes `bench/results/collectives-<backend>.json`.
 *
 * ```sh
 * deno task bench:collectives -b 1K -e 64M -f 4 --ranks 4 --transport shm
 * deno task bench:collectives --collective allGather --algorithm recursive-doubling --ranks 8
 * deno task bench:collectives --backend mpi --ranks 2 -b 1K -e 32M -f 8   # bench/mpi.ts, against C
 * deno task bench:collectives --backend mpi --ranks 2 --collective allToAll   # under mpiexec
 * deno task bench:collectives --ranks 2 -b 8 -e 256M -f 4 -d float --peer mpi,gloo
 * deno task bench:collectives --ranks 4 -b 1K -e 16M -d float --peer mpi --collective gather -r 1
 * deno task bench:collectives --ranks 2 -b 64K -e 64M -d float --peer mpi --collective allgatherv
 * deno task bench:collectives --ranks 4 -b 64K -e 64M -d float --peer mpi -c sendrecv
 * ```
 *
 * `--collective` takes a descriptor's name (`_descriptors.ts`) in any case, or nccl-tests' (`sendrecv`,
 * `alltoall`, `all_gather`, ...); `allGatherv` and `allToAllv` are the uneven forms (`{ counts }`,
 * `{ sendCounts, recvCounts }`; blocks in proportion to rank + 1, `unevenStarts`), `sendRecv` nccl-tests'
 * ring exchange. `-c` is nccl-tests' check; a collective's name there is taken as `--collective`.
 *
 * `--backend mpi` runs the mpi backend under `mpiexec -n <--ranks>`: for all-reduce of float32 sums (and,
 * with `--peer mpi`, any collective of float32, sum where an op applies) through `bench/mpi.ts`, beside
 * MPICH's own call from C; any other collective, op or dtype through the same rank script as the cpu
 * backend. `--peer mpi` measures the cpu backend against MPICH in one invocation (`bench/mpi.ts --backend
 * cpu`: the ranks under mpiexec, the C program's loop of the same collective (`MPI_Allreduce`, `MPI_Bcast`,
 * `MPI_Reduce`, `MPI_Allgather`, `MPI_Reduce_scatter_block`, `MPI_Alltoall`, `MPI_Gather`, `MPI_Scatter`,
 * `MPI_Allgatherv`, `MPI_Alltoallv`, `MPI_Sendrecv`)
 * in the same processes round by round, and the C program alone), for every collective of float32, sum
 * where an op applies, `-r` its root; all-reduce's rows go to `bench/results/collectives-cpu-mpich.json`,
 * another collective's to `collectives-cpu-mpich-<collective>.json`. `--peer gloo` runs PyTorch's Gloo
 * all-reduce on the same sizes and ranks afterwards; both together end with one table of all three. `--pool` gives dcomm's ranks
 * tensors from `pg.alloc()` (the host segment's pool, all-reduced in place). `-d` takes dcomm's dtype names
 * and nccl-tests' (`float`, `half`, `double`, `bfloat16`, `int8`, `uint8`, `int32`, `uint32`, `int64`,
 * `uint64`).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { launch } from "../cli/launch.ts";
import { checkDType, checkOp } from "../core/dtype.ts";
import type { BenchConfig } from "./_collectives_common.ts";
import { COLLECTIVES, findCollective } from "./_descriptors.ts";
import { mpichResultsFile } from "./mpi.ts";
import {
  type BenchRow,
  type ExtraColumn,
  makeRow,
  mergeRows,
  NCCL_TESTS_DTYPES,
  parseBytes,
  tableHeader,
  tableRow,
} from "./_rows.ts";

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
    collective: { type: "string" },
    algorithm: { type: "string", default: "auto" },
    transport: { type: "string", default: "auto" },
    ranks: { type: "string", default: "4" },
    "check-calls": { type: "string", default: "1" },
    deterministic: { type: "boolean", default: false },
    out: { type: "string" },
    peer: { type: "string" },
    rounds: { type: "string" },
    pool: { type: "boolean", default: false },
    trials: { type: "string", default: "2" },
    "jit-warmup": { type: "string", default: "3000" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (values.help) {
  console.log(
    `Usage: deno task bench:collectives [-b 8] [-e 64M] [-f 4] [-n 20] [-w 5] [-c 1] [-o sum] [-d float32] [-r 0]
  [--backend cpu|mpi] [--collective ${COLLECTIVES.map((c) => c.name).join("|")}] (any case; nccl-tests'
  names too: sendrecv, all_gather, alltoall; -c NAME is --collective NAME with the check on)
  [--algorithm auto] [--transport auto|tcp|shm] [--ranks 4] [--check-calls 1] [--out FILE]
  [--rounds 1] [--pool] [--deterministic] [--jit-warmup 3000] [--peer mpi,gloo] [--trials 2]
  --rounds: timed rounds per size, the fastest counts (5 against MPICH); --pool: dcomm's tensors from
  pg.alloc(), in the host segment's pool; --jit-warmup: calls of a 1 KiB collective (and a third as many of
  256 KiB) before the first size; --trials: runs against MPICH, the best counts; --peer mpi: any collective
  of float32 (sum where an op applies) against MPICH's own call from C; --peer gloo: allReduce only`,
  );
  Deno.exit(0);
}

/** A whole number at least `min`, or a RangeError naming the flag. */
function whole(flag: string, text: string, min: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) {
    throw new RangeError(`Invalid ${flag}: expected a whole number >= ${min}, found "${text}"`);
  }
  return n;
}

/**
 * `-c` is nccl-tests' check (0 or 1, any whole number); a collective's name there (`-c gather`) is taken
 * as `--collective`, with the check on.
 */
function checkAndCollective(check: string, named: string | undefined): { check: string; name: string } {
  if (/^\d+$/.test(check)) return { check, name: findCollective(named ?? "allReduce").name };
  let byCheck;
  try {
    byCheck = findCollective(check);
  } catch {
    throw new RangeError(
      `Invalid -c: expected 0, 1 (nccl-tests' check) or a collective's name, found "${check}"`,
    );
  }
  if (named !== undefined && findCollective(named) !== byCheck) {
    throw new RangeError(`-c ${check} and --collective ${named} name different collectives`);
  }
  return { check: "1", name: byCheck.name };
}

const chosen = checkAndCollective(values.check, values.collective);
const descriptor = findCollective(chosen.name);
const backend = values.backend;
if (backend !== "cpu" && backend !== "mpi") {
  console.error(
    `bench:collectives --backend ${backend}: expected cpu or mpi; for nccl run deno task bench:nccl on a GPU machine`,
  );
  Deno.exit(2);
}
const peers = (values.peer ?? "").split(",").filter((p) => p !== "");
for (const p of peers) {
  if (p !== "mpi" && p !== "gloo") throw new RangeError(`Unknown --peer: expected mpi or gloo, found "${p}"`);
}
const config: BenchConfig = {
  backend,
  collective: descriptor.name,
  minBytes: parseBytes(values.minbytes),
  maxBytes: parseBytes(values.maxbytes),
  factor: Number(values.stepfactor),
  iters: whole("-n", values.iters, 1),
  warmup: whole("-w", values.warmup_iters, 0),
  check: chosen.check !== "0",
  rounds: whole("--rounds", values.rounds ?? "1", 1),
  op: checkOp(values.op),
  dtype: checkDType(NCCL_TESTS_DTYPES[values.datatype] ?? values.datatype),
  root: whole("-r", values.root, 0),
  algorithm: values.algorithm,
  transport: values.transport,
  checkCalls: values["check-calls"] !== "0",
  deterministic: values.deterministic,
  pool: values.pool,
  jitWarmup: whole("--jit-warmup", values["jit-warmup"], 0),
  // As bench/mpi.ts and its C program: 200 more untimed calls of the first size, when it is a small one.
  firstWarmup: parseBytes(values.minbytes) <= 1 << 20 ? 200 : 0,
};
if (!(config.factor > 1)) {
  throw new RangeError(`Invalid -f: expected a factor > 1, found ${values.stepfactor}`);
}
const ranks = whole("--ranks", values.ranks, 1);
if (ranks < (descriptor.minRanks ?? 1)) {
  throw new RangeError(
    `Invalid --ranks: ${descriptor.name} needs at least ${descriptor.minRanks} ranks, found ${ranks}`,
  );
}
if (config.root >= ranks) {
  throw new RangeError(`Invalid -r: expected a root below --ranks ${ranks}, found ${config.root}`);
}
/** What MPICH's C program measures (bench/mpi.ts): any collective of float32, sum where an op applies. */
const againstC = config.dtype === "float32" && (!descriptor.reduces || config.op === "sum");
/** What the Gloo script measures: all-reduce of float32 sums. */
const againstGloo = descriptor.name === "allReduce" && config.op === "sum" && config.dtype === "float32";
if (peers.includes("gloo") && !againstGloo) {
  throw new RangeError(
    `bench:collectives --peer gloo measures allReduce of float32 sums; found --collective ${descriptor.name} ` +
      `-o ${config.op} -d ${config.dtype}`,
  );
}

if (backend === "mpi" && (peers.includes("mpi") || againstGloo)) Deno.exit(await runMpi("mpi"));
if (backend === "cpu" && peers.includes("mpi")) Deno.exit(await againstPeers());

/**
 * `--backend mpi`, or `--peer mpi`: bench/mpi.ts under `mpiexec -n <--ranks>`, which runs MPICH's own call
 * of the collective from C in the same invocation as the baseline (float32, sum where an op applies).
 */
async function runMpi(measured: "mpi" | "cpu", out?: string): Promise<number> {
  if (!againstC) {
    throw new RangeError(
      `bench:collectives --peer mpi measures float32, with op sum where the collective reduces (MPICH's C ` +
        `program); found --collective ${descriptor.name} -o ${config.op} -d ${config.dtype}`,
    );
  }
  const file = out ?? values.out;
  const args = [
    "run",
    "-A",
    new URL("./mpi.ts", import.meta.url).pathname,
    ...["--backend", measured, "--np", String(ranks)],
    ...["--collective", descriptor.name, "--root", String(config.root)],
    ...["-b", values.minbytes, "-e", values.maxbytes, "-f", values.stepfactor],
    ...["-n", values.iters, "-w", values.warmup_iters, "-c", chosen.check],
    ...["--rounds", values.rounds ?? "5", "--trials", values.trials, "--jit-warmup", values["jit-warmup"]],
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
  const out = values.out ?? mpichResultsFile("cpu", values.pool, descriptor.name);
  const code = await runMpi("cpu", out);
  if (code !== 0) return code;
  const all = JSON.parse(Deno.readTextFileSync(out)) as MpichRow[];
  const dcomm = all.filter((r) => r.runner === "dcomm");
  const glooRows = peers.includes("gloo") ? await gloo(dcomm) : [];
  console.log(
    `#\n# ${descriptor.name}, float32${descriptor.reduces ? " sum" : ""}${
      descriptor.rooted ? `, root ${config.root}` : ""
    }, ${ranks} ranks: dcomm cpu (shm${
      values.pool ? ", pool tensors" : ""
    }) against MPICH (in the same processes, and alone)${glooRows.length ? " and Gloo" : ""}`,
  );
  const extras: ExtraColumn[] = [
    { title: "dcomm/MPICH busbw", unit: "best (paired)", width: 17 },
    ...(glooRows.length ? [{ title: "Gloo/dcomm", unit: "time", width: 10 }] : []),
  ];
  const groups = ["dcomm", "MPICH here", "MPICH alone", ...(glooRows.length ? ["Gloo"] : [])];
  console.log(tableHeader(groups, extras));
  for (const d of dcomm) {
    const here = all.find((r) => r.runner === "c-inproc" && r.bytes === d.bytes);
    const alone = all.find((r) => r.runner === "c" && r.bytes === d.bytes);
    const g = glooRows.find((r) => r.bytes === d.bytes);
    const cells = [
      `${(here ? d.busbwGBs / here.busbwGBs : NaN).toFixed(2)} (${(d.vsBaselinePaired ?? NaN).toFixed(2)})`,
      ...(glooRows.length ? [g ? (g.timeUs / d.timeUs).toFixed(2) : "–"] : []),
    ];
    console.log(
      tableRow([d, here, alone, ...(glooRows.length ? [g] : [])], cells, extras.map((e) => e.width)),
    );
  }
  return 0;
}

/** Runs the rank script (under dcomm's launcher, or mpiexec for the mpi backend); returns its rows. */
async function runRanks(): Promise<{ code: number; rows: BenchRow[] }> {
  const script = new URL("./_collectives_rank.ts", import.meta.url).pathname;
  let rows: BenchRow[] = [];
  const take = (text: string): void => {
    if (text.startsWith("RESULTS ")) rows = JSON.parse(text.slice(8));
    else console.log(text);
  };
  if (backend === "mpi") {
    const child = new Deno.Command("mpiexec", {
      args: ["-n", String(ranks), Deno.execPath(), "run", "-A", script, JSON.stringify(config)],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    let rest = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) take(line);
    }
    if (rest) take(rest);
    return { code: (await child.status).code, rows };
  }
  const result = await launch({
    nprocPerNode: ranks,
    command: [script, JSON.stringify(config)],
    env: values.transport === "auto" ? {} : { DCOMM_TRANSPORT: values.transport },
    write: (line, stream) => {
      const text = line.replace(/^\[rank\d+\]: /, "");
      if (line.startsWith("[rank0]: ") || stream === "stderr") take(text);
    },
  });
  return { code: result.code, rows };
}

const { code, rows } = await runRanks();
if (code !== 0 && rows.length === 0) {
  console.error(`bench:collectives: a rank exited with code ${code}`);
  Deno.exit(code);
}
const out = values.out ?? new URL(`./results/collectives-${backend}.json`, import.meta.url).pathname;
mergeRows(out, rows);
if (peers.includes("gloo")) {
  const g = await gloo(rows);
  console.log("#\n# the same sizes with PyTorch's Gloo (torch all_reduce, same ranks, same machine)");
  const extras: ExtraColumn[] = [{ title: "Gloo/dcomm", unit: "time", width: 10 }];
  console.log(tableHeader(["dcomm", "Gloo"], extras));
  for (const d of rows) {
    const peer = g.find((r) => r.bytes === d.bytes);
    console.log(tableRow([d, peer], [peer ? (peer.timeUs / d.timeUs).toFixed(2) : "–"], [10]));
  }
}
const wrong = rows.reduce((s, r) => s + Math.max(0, r.wrong), 0);
console.log(
  `# ${rows.length} sizes, ${config.check ? `${wrong} wrong elements` : "not checked"}; wrote ${out}`,
);
if (wrong > 0 || code !== 0) Deno.exit(code || 1);

/**
 * Runs PyTorch's Gloo all-reduce (`bench/native/gloo_allreduce.py`, timed as the harness times: the input
 * written once, then the calls alone) on the same sizes and ranks; writes
 * `bench/results/gloo-<ranks>ranks-<transport>.json` (each size's dcomm and Gloo times) and returns Gloo's
 * rows.
 */
async function gloo(dcomm: readonly BenchRow[]): Promise<BenchRow[]> {
  if (!againstGloo) throw new RangeError("--peer gloo compares allReduce of float32 with op sum only");
  const lines: string[] = [];
  const script = new URL("./native/gloo_allreduce.py", import.meta.url).pathname;
  const r = await launch({
    nprocPerNode: ranks,
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
  const label = { algorithm: "gloo", transport: "gloo", ranks, dtype: "float32", runner: "gloo" };
  const rows = lines.map((l) => {
    const p = JSON.parse(l) as { bytes: number; timeUs: number; wrong: number };
    return makeRow(descriptor, p.bytes / 4, p.timeUs, p.wrong, label);
  });
  const comparison = rows.flatMap((g) => {
    const mine = dcomm.find((d) => d.bytes === g.bytes);
    return mine
      ? [{ bytes: g.bytes, dcommUs: mine.timeUs, glooUs: g.timeUs, speedup: g.timeUs / mine.timeUs }]
      : [];
  });
  const file = new URL(`./results/gloo-${ranks}ranks-${dcomm[0]?.transport ?? "auto"}.json`, import.meta.url)
    .pathname;
  Deno.writeTextFileSync(file, JSON.stringify(comparison, null, 2) + "\n");
  return rows;
}
