/**
 * `deno task bench:kernels`: GB/s of every WASM kernel against a plain TypeScript loop and native C, in
 * one run. Each row times the WASM kernel on 64 MiB inputs allocated in wasm memory (in place), then
 * the row of the same name and dtype of a native C program, then the TypeScript reference on JS arrays
 * of the same data. Every `bench/native/*_bench.c` is compiled with gcc together with `kernels/*.c` (not
 * heap.c) into `bench/native/build/` and run here, printing JSON lines `{"name","dtype","bytes","gbps"}`;
 * given `NAME DTYPE` arguments it may run that row alone, which keeps the WASM and native timings of a
 * row seconds apart on a busy machine. GB/s counts bytes read plus bytes written over the median of `--runs` timed calls
 * after `--warmup` untimed ones (the same counts for every column; the native programs use the same
 * constants, 2 and 9). Results go to `bench/results/kernels.json`.
 *
 * ```sh
 * deno task bench:kernels                       # every row
 * deno task bench:kernels --filter reduce       # rows whose name contains "reduce"
 * deno task bench:kernels --no-native           # skip the C baseline
 * ```
 *
 * Exits non-zero when a WASM result differs from the TypeScript one.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { loadKernelModule } from "../wasm/loader.ts";
import { COMPRESS_CASES } from "./_compress_cases.ts";
import type { KernelCase, KernelRuns } from "./_kernel_case.ts";
import { MATMUL_CASE, REDUCE_CASES } from "./_reduce_cases.ts";

/** Every gcc flag, each with the reason it is there. */
const GCC_FLAGS: readonly (readonly [string, string])[] = [
  ["-O3", "as the WASM build"],
  ["-march=native", "the best this machine can do natively (AVX2 where WASM has 128-bit SIMD)"],
  ["-ffp-contract=off", "no fused multiply-add, as the WASM build: same bits"],
  ["-fno-math-errno", "as the WASM build"],
  ["-fno-trapping-math", "lets gcc if-convert (vectorize) the branch-free selects; clang's default"],
  ["-std=gnu11", "C11 plus POSIX clock_gettime for the timers"],
  ["-w", "the WASM build is the one that enforces warnings"],
];

const here = new URL(".", import.meta.url);
const root = new URL("../", here);
const nativeDir = new URL("native/", here);
const buildDir = new URL("native/build/", here);
const kernelsDir = new URL("kernels/", root);

/** One row of the native programs' output. */
interface NativeRow {
  name: string;
  dtype: string;
  bytes: number;
  gbps: number;
  gflops?: number;
}

/** Runs gcc with `args`. */
async function gcc(args: string[]): Promise<{ ok: boolean; stderr: string }> {
  const out = await new Deno.Command("gcc", { args, stdout: "piped", stderr: "piped" }).output();
  return { ok: out.success, stderr: new TextDecoder().decode(out.stderr) };
}

/**
 * The native programs: every `bench/native/*_bench.c`, compiled. A kernel file that does not compile is
 * left out (with a warning), so that only the programs that need it fail to build.
 */
async function buildNative(): Promise<{ programs: string[]; notes: string[] }> {
  const notes: string[] = [];
  try {
    await new Deno.Command("gcc", { args: ["--version"], stdout: "null", stderr: "null" }).output();
  } catch {
    return {
      programs: [],
      notes: ["gcc was not found: the native column is empty (apt-get install -y gcc)"],
    };
  }
  Deno.mkdirSync(buildDir, { recursive: true });
  const flags = GCC_FLAGS.map(([f]) => f);
  const include = `-I${kernelsDir.pathname}`;
  const objects: string[] = [];
  const sources = [...Deno.readDirSync(kernelsDir)]
    .filter((e) => e.isFile && e.name.endsWith(".c") && e.name !== "heap.c")
    .map((e) => e.name)
    .sort();
  await Promise.all(sources.map(async (name) => {
    const obj = new URL(`kernel_${name.replace(/\.c$/, ".o")}`, buildDir).pathname;
    const r = await gcc([...flags, include, "-c", new URL(name, kernelsDir).pathname, "-o", obj]);
    if (r.ok) objects.push(obj);
    else notes.push(`kernels/${name} does not compile natively; left out:\n${r.stderr.trim()}`);
  }));
  objects.sort();
  const programs: string[] = [];
  const benches = [...Deno.readDirSync(nativeDir)]
    .filter((e) => e.isFile && e.name.endsWith("_bench.c"))
    .map((e) => e.name)
    .sort();
  for (const name of benches) {
    const exe = new URL(name.replace(/\.c$/, ""), buildDir).pathname;
    const r = await gcc([...flags, include, new URL(name, nativeDir).pathname, ...objects, "-o", exe, "-lm"]);
    if (r.ok) programs.push(exe);
    else {notes.push(
        `bench/native/${name} does not build; its rows have no native column:\n${r.stderr.trim()}`,
      );}
  }
  return { programs, notes };
}

/**
 * The native row `name`/`dtype`, measured now: each program is asked for that row alone (`prog NAME
 * DTYPE`), so that it runs right after the WASM and TypeScript runs of the same row, under the same load.
 * A program that ignores its arguments prints every row; those rows are kept and it is not run again.
 */
class NativeRows {
  #programs: string[];
  #cached = new Map<string, NativeRow>();
  #allAtOnce = new Set<string>();
  /** Problems met on the way, for the report. */
  readonly notes: string[];

  /**
   * @param programs The built native programs.
   * @param notes Problems met while building them.
   */
  constructor(programs: string[], notes: string[]) {
    this.#programs = programs;
    this.notes = notes;
  }

  /** The row, or undefined when no program has it. */
  async row(name: string, dtype: string): Promise<NativeRow | undefined> {
    const key = `${name}\u0000${dtype}`;
    const cached = this.#cached.get(key);
    if (cached !== undefined) return cached;
    for (const exe of this.#programs) {
      if (this.#allAtOnce.has(exe)) continue;
      const out = await new Deno.Command(exe, { args: [name, dtype], stdout: "piped", stderr: "piped" })
        .output();
      if (!out.success) {
        this.notes.push(
          `${exe} ${name} ${dtype} exited with ${out.code}: ${new TextDecoder().decode(out.stderr)}`,
        );
      }
      const rows = new TextDecoder().decode(out.stdout).split("\n").filter((l) => l.trim().startsWith("{"))
        .map((l) => JSON.parse(l) as NativeRow);
      const mine = rows.find((r) => r.name === name && r.dtype === dtype);
      if (rows.some((r) => r !== mine)) {
        this.#allAtOnce.add(exe);
        for (const r of rows) this.#cached.set(`${r.name}\u0000${r.dtype}`, r);
      }
      if (mine !== undefined) return mine;
    }
    return undefined;
  }
}

/** The median time of `runs` calls of `fn` after `warmup` calls, in seconds. */
function medianSeconds(fn: () => void, warmup: number, runs: number): number {
  for (let i = 0; i < warmup; i++) fn();
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    fn();
    times.push((performance.now() - t0) / 1000);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(runs / 2)];
}

/** One row of `bench/results/kernels.json`. */
interface Result {
  name: string;
  dtype: string;
  bytes: number;
  gbps: number;
  tsGbps: number;
  nativeGbps: number | null;
  gflops?: number;
  tsGflops?: number;
  nativeGflops?: number | null;
  wrong?: string;
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    filter: { type: "string", default: "" },
    runs: { type: "string", default: "9" },
    warmup: { type: "string", default: "2" },
    "no-native": { type: "boolean", default: false },
  },
});
const runs = Number(values.runs), warmup = Number(values.warmup);
if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(warmup) || warmup < 0) {
  throw new RangeError(`Expected --runs >= 1 and --warmup >= 0, found ${values.runs} and ${values.warmup}`);
}

const built = values["no-native"] ? { programs: [], notes: ["--no-native"] } : await buildNative();
const native = new NativeRows(built.programs, built.notes);

const module = await loadKernelModule();
const results: Result[] = [];

/** Sets a case up, times both columns, checks, and pops wasm memory. */
/**
 * Sets a case up, times the WASM column, runs the native row right after it (the two columns whose ratio
 * the targets are about, as close in time as possible), times the TypeScript column, checks the WASM
 * result against the TypeScript one, and pops wasm memory.
 */
async function measure(
  label: string,
  setup: () => KernelRuns,
  nativeRow: () => Promise<NativeRow | undefined>,
): Promise<{ wasm: number; ts: number; native?: NativeRow; wrong?: string }> {
  const mark = module.heap.top;
  try {
    console.error(`timing ${label} ...`);
    const runsOf = setup();
    // Let the collector finish with the previous row's garbage (the TypeScript loops of the 16-bit
    // formats allocate hundreds of MiB) before timing: its threads would compete on a small machine.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const wasm = medianSeconds(runsOf.wasm, warmup, runs);
    const native = await nativeRow();
    const ts = medianSeconds(runsOf.ts, warmup, runs);
    try {
      runsOf.check();
      return { wasm, ts, native };
    } catch (e) {
      return { wasm, ts, native, wrong: (e as Error).message };
    }
  } finally {
    module.heap.reset(mark);
  }
}

const cases: readonly KernelCase[] = [...REDUCE_CASES, ...COMPRESS_CASES];
for (const c of cases) {
  if (!`${c.name} ${c.dtype}`.includes(values.filter)) continue;
  const t = await measure(`${c.name} ${c.dtype}`, () => c.setup(module), () => native.row(c.name, c.dtype));
  const nat = t.native;
  results.push({
    name: c.name,
    dtype: c.dtype,
    bytes: c.bytes,
    gbps: c.bytes / t.wasm / 1e9,
    tsGbps: c.bytes / t.ts / 1e9,
    nativeGbps: nat?.gbps ?? null,
    ...(t.wrong === undefined ? {} : { wrong: t.wrong }),
  });
}
if (MATMUL_CASE.name.includes(values.filter)) {
  const t = await measure(
    `matmul ${MATMUL_CASE.size}^3`,
    () => MATMUL_CASE.setup(module),
    () => native.row("matmul", "float32"),
  );
  const nat = t.native;
  const bytes = 3 * 4 * MATMUL_CASE.size ** 2;
  results.push({
    name: "matmul",
    dtype: "float32",
    bytes,
    gbps: bytes / t.wasm / 1e9,
    tsGbps: bytes / t.ts / 1e9,
    nativeGbps: nat?.gbps ?? null,
    gflops: MATMUL_CASE.flops / t.wasm / 1e9,
    tsGflops: MATMUL_CASE.flops / t.ts / 1e9,
    nativeGflops: nat?.gflops ?? null,
    ...(t.wrong === undefined ? {} : { wrong: t.wrong }),
  });
}

const fmt = (
  x: number | null | undefined,
  digits = 2,
) => (x === null || x === undefined ? "—" : x.toFixed(digits));
const ratio = (a: number, b: number | null | undefined) => (b ? `${(a / b).toFixed(2)}x` : "—");
console.log(`\nkernels: ${runs} timed runs after ${warmup} warm-up, median; every input array 64 MiB\n`);
console.log(
  "| kernel | dtype | MiB moved | WASM GB/s | TS GB/s | native GB/s | wasm/native | wasm/ts | #wrong |",
);
console.log("|---|---|---:|---:|---:|---:|---:|---:|---|");
for (const r of results.filter((r) => r.gflops === undefined)) {
  console.log(
    `| ${r.name} | ${r.dtype} | ${(r.bytes / 2 ** 20).toFixed(0)} | ${fmt(r.gbps)} | ${fmt(r.tsGbps)} | ` +
      `${fmt(r.nativeGbps)} | ${ratio(r.gbps, r.nativeGbps)} | ${ratio(r.gbps, r.tsGbps)} | ${
        r.wrong ? "WRONG" : "0"
      } |`,
  );
}
for (const r of results.filter((r) => r.gflops !== undefined)) {
  console.log(`\n| kernel | shape | WASM GFLOP/s | TS GFLOP/s | native GFLOP/s | wasm/native | wasm/ts |`);
  console.log("|---|---|---:|---:|---:|---:|---:|");
  const g = r.gflops as number;
  console.log(
    `| matmul | ${MATMUL_CASE.size}x${MATMUL_CASE.size}x${MATMUL_CASE.size} | ${fmt(g)} | ${
      fmt(r.tsGflops)
    } | ` +
      `${fmt(r.nativeGflops)} | ${ratio(g, r.nativeGflops)} | ${ratio(g, r.tsGflops)} |`,
  );
}
for (const note of native.notes) console.log(`\nnote: ${note}`);
const wrong = results.filter((r) => r.wrong);
for (const r of wrong) console.log(`\nWRONG: ${r.name} ${r.dtype}: ${r.wrong}`);

if (values.filter === "") {
  Deno.mkdirSync(new URL("results/", here), { recursive: true });
  Deno.writeTextFileSync(
    new URL("results/kernels.json", here),
    JSON.stringify(
      results,
      (_, v) => (typeof v === "number" && !Number.isInteger(v) ? +v.toFixed(3) : v),
      2,
    ) + "\n",
  );
  console.log("\nwrote bench/results/kernels.json");
}
if (wrong.length > 0) Deno.exit(1);
