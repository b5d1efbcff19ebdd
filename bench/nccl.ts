/**
 * `deno task bench:nccl`: nccl-tests for the `nccl` backend, on the harness every path shares
 * (`_harness.ts`, with `_nccl_cases.ts`'s device: device buffers, `-n` calls queued back to back between two
 * CUDA events after `-w` untimed ones, the input written once per size and checked as `_harness.ts` says),
 * every collective of `_descriptors.ts` in turn, each with nccl-tests' table; then, with `--overhead`, the
 * per-call cost of an all-reduce through FFI beside a C program's. Rows go to
 * `bench/results/collectives-nccl.json` (`_rows.ts`'s rows, merged as `bench:collectives` merges them). One
 * rank per GPU: run it under the launcher for several (`deno run -A cli/launch.ts --nproc-per-node 8
 * bench/nccl.ts`); alone it is a world of one.
 *
 * ```sh
 * deno run -A bench/nccl.ts -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 -d float32
 * deno run -A bench/nccl.ts --quick --overhead --native bench/native/build/nccl_overhead
 * ```
 *
 * Flags as nccl-tests: `-b/--minbytes`, `-e/--maxbytes`, `-f/--stepfactor`, `-n/--iters`,
 * `-w/--warmup_iters`, `-c/--check`, `-o/--op`, `-d/--datatype`, `-r/--root`; plus `--collectives a,b`,
 * `--quick` (1 KiB to 64 MiB by 4), `--overhead`, `--native <program>` (the C program of
 * `bench/native/nccl_overhead.cu`, run for the same measurement), `--out <file>` (the JSON rows),
 * `--details <file>` (NCCL's version, the tuning and the overhead). Exits 1 if any element is wrong.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { checkDType, checkOp } from "../core/dtype.ts";
import { initNccl } from "../backend/nccl/create.ts";
import { measureCallOverhead, type NcclBenchOptions, runNcclBench } from "./_nccl_cases.ts";
import { collective } from "./_descriptors.ts";
import { sweepSizes } from "./_harness.ts";
import { mergeRows, NCCL_TESTS_DTYPES, parseBytes, tableHeader, tableRow } from "./_rows.ts";

/** bench/nccl.ts's command line, parsed. */
export interface NcclFlags {
  /** What {@linkcode runNcclBench} runs. */
  bench: NcclBenchOptions;
  /** `--overhead`: measure the per-call cost too. */
  overhead: boolean;
  /** `--native`: the C program of `bench/native/nccl_overhead.cu`. */
  native?: string;
  /** `--out`: the JSON rows. */
  out: string;
  /** `--details`: NCCL's version, the tuning and the overhead. */
  details: string;
}

/**
 * Parses bench/nccl.ts's flags (nccl-tests' `-b -e -f -n -w -c -o -d -r`, and `--collectives --quick
 * --overhead --native --out --details`).
 *
 * @param args The command line.
 * @returns The sweep's options and the rest.
 * @throws {RangeError} On a size, factor, count, op, dtype or collective that is not one.
 */
export function parseNcclArgs(args: readonly string[]): NcclFlags {
  const { values } = parseArgs({
    args: [...args],
    options: {
      minbytes: { type: "string", short: "b", default: "8" },
      maxbytes: { type: "string", short: "e", default: "128M" },
      stepfactor: { type: "string", short: "f", default: "2" },
      iters: { type: "string", short: "n", default: "20" },
      warmup_iters: { type: "string", short: "w", default: "5" },
      check: { type: "string", short: "c", default: "1" },
      op: { type: "string", short: "o", default: "sum" },
      datatype: { type: "string", short: "d", default: "float32" },
      root: { type: "string", short: "r", default: "0" },
      collectives: { type: "string" },
      quick: { type: "boolean", default: false },
      overhead: { type: "boolean", default: false },
      native: { type: "string" },
      out: { type: "string", default: new URL("results/collectives-nccl.json", import.meta.url).pathname },
      details: { type: "string", default: new URL("results/nccl-details.json", import.meta.url).pathname },
    },
  });
  const whole = (flag: string, text: string, min: number): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < min) {
      throw new RangeError(`Invalid ${flag}: expected a whole number >= ${min}, found "${text}"`);
    }
    return n;
  };
  // Unknown collectives and bad ranges fail here, before NCCL starts.
  const collectives = values.collectives?.split(",").filter((c) => c !== "").map((c) => collective(c).name);
  const minBytes = values.quick ? 1024 : parseBytes(values.minbytes);
  const maxBytes = values.quick ? 64 << 20 : parseBytes(values.maxbytes);
  const stepFactor = values.quick ? 4 : Number(values.stepfactor);
  sweepSizes(minBytes, maxBytes, stepFactor);
  return {
    bench: {
      minBytes,
      maxBytes,
      stepFactor,
      iters: whole("-n", values.iters, 1),
      warmup: whole("-w", values.warmup_iters, 0),
      check: values.check !== "0",
      op: checkOp(values.op),
      dtype: checkDType(NCCL_TESTS_DTYPES[values.datatype] ?? values.datatype),
      root: whole("-r", values.root, 0),
      ...(collectives ? { collectives } : {}),
    },
    overhead: values.overhead,
    ...(values.native === undefined ? {} : { native: values.native }),
    out: values.out,
    details: values.details,
  };
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
  const flags = parseNcclArgs(Deno.args);
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
  say(
    `# ${flags.bench.iters} calls queued back to back between two CUDA events after ${flags.bench.warmup} ` +
      `warm-up, check ${flags.bench.check ? "on" : "off"}`,
  );
  const rows = await runNcclBench(pg, {
    ...flags.bench,
    onCollective: (name) => say(`#\n# ${name}\n${tableHeader()}`),
    onRow: (row) => say(tableRow([row])),
  });
  const wrong = rows.reduce((a, r) => a + Math.max(0, r.wrong), 0);
  const details: Record<string, unknown> = {
    ncclVersion: pg.ncclVersion,
    ncclPath: pg.ncclPath,
    ranks: pg.size,
    device: pg.device,
    tuning: pg.tuning,
  };
  if (flags.overhead) {
    const o = await measureCallOverhead(pg);
    const native = flags.native ? await runNative(flags.native) : "not run (no --native program)";
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
    // Rows merge into the file as bench:collectives merges them: this run's configurations replace their old rows.
    mergeRows(flags.out, rows);
    await Deno.writeTextFile(flags.details, JSON.stringify(details, null, 2) + "\n");
    say(`# ${rows.length} rows to ${flags.out}; details to ${flags.details}`);
  }
  say(`# out-of-bounds values : ${wrong} ${wrong ? "ERROR" : "OK"}`);
  await pg.close();
  Deno.exit(wrong ? 1 : 0);
}
