/**
 * `deno task bench:kernels`: GB/s of every WASM kernel against the same C built natively and a plain
 * TypeScript loop, in one process. Each row allocates its 64 MiB inputs in wasm memory once; the WASM
 * column calls the kernel there (in place), and the native column calls the same C functions, built by gcc
 * as a shared library (`bench/native/build/libdcomm_kernels.so`, from every `kernels/*.c` but heap.c) and
 * opened with `Deno.dlopen`, on the very same arrays: `_native_kernels.ts` dresses the library as a
 * `KernelModule` over the WASM module's heap, translating every wasm32 offset into an address, so that
 * `Kernels` and `CompressionKernels` run the same wrapper code in both columns. The two columns are timed
 * alternately, call by call (`--warmup` untimed pairs, then `--runs` timed pairs: wasm, native, wasm,
 * native, ...), so that both see the same pages, the same caches and the same load on a busy machine; each
 * takes its median. Then the TypeScript reference runs on JS arrays holding the same data (median of
 * `--runs` after `--warmup`). GB/s counts bytes read plus bytes written over the median time (the same
 * counts for every column). Results go to `bench/results/kernels.json` (only when every row ran, i.e. no
 * `--filter`), or `kernels-march-<arch>.json` with `--march` (gcc's `-march`, `native` by default).
 *
 * Before timing, each row is checked on fresh data: one TypeScript call, then one WASM call, whose outputs
 * must equal the TypeScript ones bit for bit; then the outputs are put back and one native call must give
 * the same bits too (gcc builds with `-ffp-contract=off`, as the WASM build does).
 *
 * ```sh
 * deno task bench:kernels                       # every row
 * deno task bench:kernels --filter reduce       # rows whose name contains "reduce"
 * deno task bench:kernels --runs 15 --warmup 3  # more timed calls
 * deno task bench:kernels --no-native           # skip the C baseline
 * deno task bench:kernels --march x86-64        # gcc -march=x86-64: SSE2, WASM's 128-bit vector width
 * ```
 *
 * Exits non-zero when a WASM or native result differs from the TypeScript one.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { loadKernelModule } from "../wasm/loader.ts";
import { COMPRESS_CASES } from "./_compress_cases.ts";
import type { KernelCase, KernelRuns } from "./_kernel_case.ts";
import { type NativeKernelModule, openNativeKernels } from "./_native_kernels.ts";
import { MATMUL_CASE, REDUCE_CASES } from "./_reduce_cases.ts";

/** Every gcc flag, each with the reason it is there. */
const GCC_FLAGS: readonly (readonly [string, string])[] = [
  ["-O3", "as the WASM build"],
  ["-march=native", "the best this machine can do natively (AVX2 where WASM has 128-bit SIMD)"],
  ["-ffp-contract=off", "no fused multiply-add, as the WASM build: same bits"],
  ["-fno-math-errno", "as the WASM build"],
  ["-fno-trapping-math", "lets gcc if-convert (vectorize) the branch-free selects; clang's default"],
  ["-std=gnu11", "C11, the language of the kernels (the WASM build's -std=c11), GNU extensions allowed"],
  ["-w", "the WASM build is the one that enforces warnings"],
  ["-fPIC", "position-independent code, which a shared library needs"],
  ["-shared", "a library for Deno.dlopen (no main); at the link step, ignored with -c"],
];

const here = new URL(".", import.meta.url);
const root = new URL("../", here);
const buildDir = new URL("native/build/", here);
const kernelsDir = new URL("kernels/", root);

/** Runs gcc with `args`. */
async function gcc(args: string[]): Promise<{ ok: boolean; stderr: string }> {
  const out = await new Deno.Command("gcc", { args, stdout: "piped", stderr: "piped" }).output();
  return { ok: out.success, stderr: new TextDecoder().decode(out.stderr) };
}

/**
 * Builds `bench/native/build/libdcomm_kernels.so` from every `kernels/*.c` but heap.c (wasm-only). A kernel
 * file that does not compile is left out (with a note), so that only the rows that need it lose their
 * native column.
 *
 * @returns The library's path, or undefined (gcc missing, or nothing built), and notes for the report.
 */
async function buildNativeLibrary(march: string): Promise<{ path?: string; notes: string[] }> {
  const libraryPath =
    new URL(`libdcomm_kernels${march === "native" ? "" : `-${march}`}.so`, buildDir).pathname;
  const notes: string[] = [];
  try {
    await new Deno.Command("gcc", { args: ["--version"], stdout: "null", stderr: "null" }).output();
  } catch {
    return { notes: ["gcc was not found: the native column is empty (apt-get install -y gcc)"] };
  }
  Deno.mkdirSync(buildDir, { recursive: true });
  const flags = GCC_FLAGS.map(([f]) => (f === "-march=native" ? `-march=${march}` : f));
  const include = `-I${kernelsDir.pathname}`;
  const objects: string[] = [];
  const sources = [...Deno.readDirSync(kernelsDir)]
    .filter((e) => e.isFile && e.name.endsWith(".c") && e.name !== "heap.c")
    .map((e) => e.name)
    .sort();
  await Promise.all(sources.map(async (name) => {
    const obj = new URL(`kernel_${march}_${name.replace(/\.c$/, ".o")}`, buildDir).pathname;
    const r = await gcc([...flags, include, "-c", new URL(name, kernelsDir).pathname, "-o", obj]);
    if (r.ok) objects.push(obj);
    else notes.push(`kernels/${name} does not compile natively; left out:\n${r.stderr.trim()}`);
  }));
  objects.sort();
  if (objects.length === 0) {
    return { notes: [...notes, "no kernel file compiled: the native column is empty"] };
  }
  const r = await gcc([...flags, ...objects, "-o", libraryPath, "-lm"]);
  if (!r.ok) {
    return {
      notes: [...notes, `${libraryPath} does not link: the native column is empty:\n${r.stderr.trim()}`],
    };
  }
  return { path: libraryPath, notes };
}

/**
 * Medians of `runs` timed calls of `wasm` and of `native`, alternating call by call (wasm, native, wasm,
 * native, ...) after `warmup` untimed pairs, in seconds; only `wasm` without `native`.
 */
function alternateMedians(
  wasm: () => void,
  native: (() => void) | undefined,
  warmup: number,
  runs: number,
): { wasm: number; native?: number } {
  for (let i = 0; i < warmup; i++) {
    wasm();
    native?.();
  }
  const w: number[] = [], n: number[] = [];
  for (let i = 0; i < runs; i++) {
    let t0 = performance.now();
    wasm();
    w.push((performance.now() - t0) / 1000);
    if (native === undefined) continue;
    t0 = performance.now();
    native();
    n.push((performance.now() - t0) / 1000);
  }
  return { wasm: median(w), ...(native === undefined ? {} : { native: median(n) }) };
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
  return median(times);
}

/** The median (the upper one of an even count). */
function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
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
    march: { type: "string", default: "native" },
  },
});
const runs = Number(values.runs), warmup = Number(values.warmup);
if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(warmup) || warmup < 0) {
  throw new RangeError(`Expected --runs >= 1 and --warmup >= 0, found ${values.runs} and ${values.warmup}`);
}

const notes: string[] = [];
const module = await loadKernelModule();
let native: NativeKernelModule | undefined;
if (values["no-native"]) notes.push("--no-native: the native column is empty");
else {
  const built = await buildNativeLibrary(values.march);
  notes.push(...built.notes);
  if (built.path !== undefined) {
    try {
      native = openNativeKernels(built.path, module);
      if (native.missing.length > 0) {
        notes.push(
          `${built.path} lacks dc_${native.missing.join(", dc_")}: rows that need them have no native column`,
        );
      }
    } catch (e) {
      notes.push(`${built.path} does not open: the native column is empty: ${(e as Error).message}`);
    }
  }
}
const results: Result[] = [];

/**
 * Sets a case up; checks one WASM and one native call against one TypeScript call on fresh data; times the
 * WASM and native columns alternately, call by call, on the same arrays; times the TypeScript column; and
 * pops wasm memory.
 */
async function measure(
  label: string,
  setup: () => KernelRuns,
): Promise<{ wasm: number; native?: number; ts: number; wrong?: string }> {
  const mark = module.heap.top;
  try {
    console.error(`timing ${label} ...`);
    const runsOf = setup();
    if (native !== undefined && runsOf.native === undefined) notes.push(`${label}: no native column`);
    const wrong: string[] = [];
    const check = (column: string): void => {
      try {
        runsOf.check();
      } catch (e) {
        wrong.push(`${column}: ${(e as Error).message}`);
      }
    };
    runsOf.ts();
    runsOf.wasm();
    check("wasm");
    if (runsOf.native !== undefined) {
      runsOf.reset();
      runsOf.native();
      check("native");
    }
    runsOf.reset();
    // Let the collector finish with the previous row's garbage and the check's (the TypeScript loops of the
    // 16-bit formats allocate hundreds of MiB) before timing: its threads would compete on a small machine.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const t = alternateMedians(runsOf.wasm, runsOf.native, warmup, runs);
    const ts = medianSeconds(runsOf.ts, warmup, runs);
    return { ...t, ts, ...(wrong.length === 0 ? {} : { wrong: wrong.join("; ") }) };
  } finally {
    module.heap.reset(mark);
  }
}

const cases: readonly KernelCase[] = [...REDUCE_CASES, ...COMPRESS_CASES];
for (const c of cases) {
  if (!`${c.name} ${c.dtype}`.includes(values.filter)) continue;
  const t = await measure(`${c.name} ${c.dtype}`, () => c.setup(module, native?.module));
  results.push({
    name: c.name,
    dtype: c.dtype,
    bytes: c.bytes,
    gbps: c.bytes / t.wasm / 1e9,
    tsGbps: c.bytes / t.ts / 1e9,
    nativeGbps: t.native === undefined ? null : c.bytes / t.native / 1e9,
    ...(t.wrong === undefined ? {} : { wrong: t.wrong }),
  });
}
if (MATMUL_CASE.name.includes(values.filter)) {
  const t = await measure(`matmul ${MATMUL_CASE.size}^3`, () => MATMUL_CASE.setup(module, native?.module));
  const bytes = 3 * 4 * MATMUL_CASE.size ** 2;
  results.push({
    name: "matmul",
    dtype: "float32",
    bytes,
    gbps: bytes / t.wasm / 1e9,
    tsGbps: bytes / t.ts / 1e9,
    nativeGbps: t.native === undefined ? null : bytes / t.native / 1e9,
    gflops: MATMUL_CASE.flops / t.wasm / 1e9,
    tsGflops: MATMUL_CASE.flops / t.ts / 1e9,
    nativeGflops: t.native === undefined ? null : MATMUL_CASE.flops / t.native / 1e9,
    ...(t.wrong === undefined ? {} : { wrong: t.wrong }),
  });
}
native?.close();

const fmt = (
  x: number | null | undefined,
  digits = 2,
) => (x === null || x === undefined ? "—" : x.toFixed(digits));
const ratio = (a: number, b: number | null | undefined) => (b ? `${(a / b).toFixed(2)}x` : "—");
console.log(
  `\nkernels: ${runs} timed runs after ${warmup} warm-up, median; WASM and native alternate call by call on ` +
    `the same arrays; every input array 64 MiB\n`,
);
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
for (const note of notes) console.log(`\nnote: ${note}`);
const wrong = results.filter((r) => r.wrong);
for (const r of wrong) console.log(`\nWRONG: ${r.name} ${r.dtype}: ${r.wrong}`);

if (values.filter === "") {
  const file = values.march === "native" ? "kernels.json" : `kernels-march-${values.march}.json`;
  Deno.mkdirSync(new URL("results/", here), { recursive: true });
  Deno.writeTextFileSync(
    new URL(`results/${file}`, here),
    JSON.stringify(
      results,
      (_, v) => (typeof v === "number" && !Number.isInteger(v) ? +v.toFixed(3) : v),
      2,
    ) + "\n",
  );
  console.log(`\nwrote bench/results/${file}`);
}
if (wrong.length > 0) Deno.exit(1);
