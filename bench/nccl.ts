/**
 * `deno task bench:collectives --backend nccl` until the CPU harness (`bench/collectives.ts`) calls
 * {@linkcode runNcclBench} itself: the nccl-tests sweep of every collective on the `nccl` backend, the
 * per-call overhead of an all-reduce through FFI beside a C program's, results as nccl-tests' table and as
 * JSON rows in `bench/results/collectives-nccl.json`. One rank per GPU: run it under the launcher for
 * several (`deno run -A cli/launch.ts --nproc-per-node 8 bench/nccl.ts`); alone it is a world of one.
 *
 * ```sh
 * deno run -A bench/nccl.ts -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 -d float32
 * deno run -A bench/nccl.ts --quick --overhead --native bench/native/build/nccl_overhead
 * ```
 *
 * Flags as nccl-tests: `-b/--minbytes`, `-e/--maxbytes`, `-f/--stepfactor`, `-n/--iters`,
 * `-w/--warmup_iters`, `-c/--check`, `-d/--datatype`; plus `--collectives a,b`, `--quick` (1 KiB to
 * 64 MiB by 4), `--overhead`, `--native <program>` (the C program of `bench/native/nccl_overhead.cu`, run
 * for the same measurement), `--out <file>` (the JSON rows, merged as `bench:collectives` merges them), `--details <file>` (NCCL's version,
 * the tuning and the overhead). Exits 1 if any element is wrong.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { checkDType } from "../core/dtype.ts";
import { initNccl } from "../backend/nccl/create.ts";
import {
  formatNcclRow,
  measureCallOverhead,
  NCCL_TABLE_HEADER,
  type NcclBenchRow,
  runNcclBench,
} from "./_nccl_cases.ts";

function bytes(text: string): number {
  const m = /^(\d+(?:\.\d+)?)([KMG]?)$/i.exec(text.trim());
  if (!m) throw new RangeError(`Invalid size: expected e.g. 8, 64K, 128M or 1G, found ${text}`);
  return Math.round(Number(m[1]) * ({ "": 1, K: 1 << 10, M: 1 << 20, G: 1 << 30 }[m[2].toUpperCase()] ?? 1));
}

/** What the C program printed: microseconds per call. */
async function runNative(program: string): Promise<{ hostUs: number; gpuUs: number } | string> {
  try {
    const out = await new Deno.Command(program, { stdout: "piped", stderr: "piped" }).output();
    const text = new TextDecoder().decode(out.stdout);
    const m = /host_us_per_call\s+([\d.]+)\s+gpu_us_per_call\s+([\d.]+)/.exec(text);
    if (!out.success || !m) {
      return `the native program failed: ${new TextDecoder().decode(out.stderr).trim() || text}`;
    }
    return { hostUs: Number(m[1]), gpuUs: Number(m[2]) };
  } catch (e) {
    return `the native program did not run: ${(e as Error).message}`;
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      minbytes: { type: "string", short: "b", default: "8" },
      maxbytes: { type: "string", short: "e", default: "128M" },
      stepfactor: { type: "string", short: "f", default: "2" },
      iters: { type: "string", short: "n", default: "20" },
      warmup_iters: { type: "string", short: "w", default: "5" },
      check: { type: "string", short: "c", default: "1" },
      datatype: { type: "string", short: "d", default: "float32" },
      collectives: { type: "string" },
      quick: { type: "boolean", default: false },
      overhead: { type: "boolean", default: false },
      native: { type: "string" },
      out: { type: "string", default: new URL("results/collectives-nccl.json", import.meta.url).pathname },
      details: { type: "string", default: new URL("results/nccl-details.json", import.meta.url).pathname },
    },
  });
  // Under a launcher the environment names the rank; alone, this is a world of one.
  const launched = ["RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"].some((v) => Deno.env.get(v));
  const pg = await initNccl(
    launched ? { timeoutMs: 120_000 } : { rank: 0, worldSize: 1, timeoutMs: 120_000 },
  );
  const leader = pg.rank === 0;
  const say = (line: string): void => {
    if (leader) console.log(line);
  };
  say(`# dcomm nccl bench: NCCL ${pg.ncclVersion} (${pg.ncclPath}), ${pg.size} rank(s), device ${pg.device}`);
  say(`# tuning: ${JSON.stringify(pg.tuning.env)}`);
  say(NCCL_TABLE_HEADER);
  const rows: NcclBenchRow[] = await runNcclBench(pg, {
    minBytes: values.quick ? 1024 : bytes(values.minbytes),
    maxBytes: values.quick ? 64 << 20 : bytes(values.maxbytes),
    stepFactor: values.quick ? 4 : Number(values.stepfactor),
    iters: Number(values.iters),
    warmup: Number(values.warmup_iters),
    check: values.check !== "0",
    dtype: checkDType(values.datatype),
    collectives: values.collectives?.split(","),
    onRow: (row) => say(formatNcclRow(row)),
  });
  const wrong = rows.reduce((a, r) => a + Math.max(0, r.wrong), 0);
  const details: Record<string, unknown> = {
    ncclVersion: pg.ncclVersion,
    ncclPath: pg.ncclPath,
    ranks: pg.size,
    device: pg.device,
    tuning: pg.tuning,
  };
  if (values.overhead) {
    const o = await measureCallOverhead(pg);
    const native = values.native ? await runNative(values.native) : "not run (no --native program)";
    details.overhead = { ...o, native };
    say("#");
    say("# per-call cost of a 1-element all-reduce (host µs per call, median of batches)");
    say(
      `#   Deno FFI, bare ncclAllReduce     ${o.ffiUs.toFixed(2)} µs   (GPU ${
        o.gpuUs.toFixed(2)
      } µs per call)`,
    );
    say(`#   dcomm pg.allReduce()             ${o.dcommUs.toFixed(2)} µs`);
    say(
      typeof native === "string"
        ? `#   C (nvcc), bare ncclAllReduce     ${native}`
        : `#   C (nvcc), bare ncclAllReduce     ${native.hostUs.toFixed(2)} µs   (GPU ${
          native.gpuUs.toFixed(2)
        } µs per call)` +
          `   FFI/C = ${(o.ffiUs / native.hostUs).toFixed(2)}x`,
    );
  }
  if (leader) {
    // Rows merge into the file as bench:collectives does: this run's configurations replace their old rows.
    let existing: NcclBenchRow[] = [];
    try {
      existing = JSON.parse(await Deno.readTextFile(values.out));
    } catch {
      // First run.
    }
    const key = (r: NcclBenchRow): string =>
      `${r.collective}|${r.algorithm}|${r.transport}|${r.ranks}|${r.dtype}|${r.bytes}`;
    const mine = new Set(rows.map(key));
    const merged = [...(Array.isArray(existing) ? existing : []).filter((r) => !mine.has(key(r))), ...rows];
    await Deno.writeTextFile(values.out, JSON.stringify(merged, null, 2) + "\n");
    await Deno.writeTextFile(values.details, JSON.stringify(details, null, 2) + "\n");
    say(`# ${rows.length} rows to ${values.out}; details to ${values.details}`);
  }
  say(`# out-of-bounds values : ${wrong} ${wrong ? "ERROR" : "OK"}`);
  await pg.close();
  Deno.exit(wrong ? 1 : 0);
}
