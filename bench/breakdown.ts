/**
 * `deno task bench:breakdown`: where the time of one all-reduce goes on the cpu backend, for
 * docs/benchmarks.md. For each size and rank count it times calls one at a time (a barrier before each)
 * and splits each into what the caller's thread spends inside `allReduce()` (argument checks, staging or
 * the whole call when it runs on the calling thread), the wait until the communication thread starts it,
 * the communication thread's own time (its report), and the wait from its end to the caller's `await`
 * returning; medians over the calls. It also times the physical limit: a plain copy (`TypedArray.set`) of
 * the same bytes, in one process and in two processes at once.
 *
 * ```sh
 * deno task bench:breakdown                      # 2 and 4 ranks, 8 B, 1 MiB, 64 MiB
 * deno task bench:breakdown --ranks 2 --sizes 8,1M --out /tmp/breakdown.json
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { launch } from "../cli/launch.ts";
import { parseBytes } from "./_collectives_common.ts";

/** One size's phases, in microseconds (medians over the calls). */
export interface BreakdownRow {
  /** Ranks. */
  ranks: number;
  /** Bytes of the tensor. */
  bytes: number;
  /** The algorithm and transport of the calls' reports. */
  algorithm: string;
  /** Inside `allReduce()` on the caller's thread. */
  callUs: number;
  /** From `allReduce()` returning to the communication thread starting it (0 when run in the call). */
  toWorkerUs: number;
  /** The communication thread's (or the calling thread's) time on the call, by its report. */
  runUs: number;
  /** From the report's end to the caller's `await` returning. */
  backUs: number;
  /** The whole call, start to `await` returning. */
  totalUs: number;
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "2,4" },
    sizes: { type: "string", default: "8,1M,64M" },
    out: { type: "string" },
    rank: { type: "boolean", default: false },
    copy: { type: "string" },
  },
});
const sizes = values.sizes.split(",").map(parseBytes);

if (values.copy !== undefined) {
  // One process of the copy measurement: the median GB/s of copying `--copy` bytes, after a warm-up.
  const bytes = Number(values.copy);
  const src = new Uint8Array(bytes).fill(1), dst = new Uint8Array(bytes);
  const reps = Math.max(5, Math.min(2000, Math.floor((512 << 20) / Math.max(bytes, 1))));
  for (let i = 0; i < 3; i++) dst.set(src);
  const times: number[] = [];
  for (let r = 0; r < 9; r++) {
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) dst.set(src);
    times.push((performance.now() - t0) / reps);
  }
  times.sort((a, b) => a - b);
  console.log(`COPY ${bytes / (times[4] * 1e-3) / 1e9}`);
  Deno.exit(0);
}

if (values.rank) {
  const { init } = await import("../backend/init.ts");
  const pg = await init();
  const warm = new Float32Array(256);
  for (let i = 0; i < 3000; i++) await pg.allReduce(warm);
  const rows: BreakdownRow[] = [];
  for (const bytes of sizes) {
    const t = new Float32Array(Math.max(1, bytes / 4));
    const calls = bytes >= 32 << 20 ? 10 : bytes >= 1 << 20 ? 100 : 1000;
    const phases: number[][] = [];
    let algorithm = "";
    for (let i = 0; i < calls + 5; i++) {
      t.fill(1);
      await pg.barrier();
      const t0 = performance.timeOrigin + performance.now();
      const work = pg.allReduce(t);
      const t1 = performance.timeOrigin + performance.now();
      const report = await work.wait();
      const t2 = performance.timeOrigin + performance.now();
      if (report === undefined || i < 5) continue;
      algorithm = `${report.algorithm} over ${report.transport}`;
      // A call that ran inside allReduce() reports a start before t1: nothing crossed to another thread.
      const inCall = report.startedAt < t1;
      phases.push([
        inCall ? report.startedAt - t0 : t1 - t0,
        inCall ? 0 : report.startedAt - t1,
        report.finishedAt - report.startedAt,
        Math.max(0, t2 - Math.max(report.finishedAt, t1)),
        t2 - t0,
      ]);
    }
    const median = (k: number): number => {
      const v = phases.map((p) => p[k] * 1000).sort((a, b) => a - b);
      return v[v.length >> 1];
    };
    rows.push({
      ranks: pg.size,
      bytes: t.byteLength,
      algorithm,
      callUs: median(0),
      toWorkerUs: median(1),
      runUs: median(2),
      backUs: median(3),
      totalUs: median(4),
    });
  }
  if (pg.rank === 0) console.log(`ROWS ${JSON.stringify(rows)}`);
  await pg.close();
  Deno.exit(0);
}

async function copyGBs(bytes: number, processes: number): Promise<number> {
  const self = new URL(import.meta.url).pathname;
  const runs = Array.from(
    { length: processes },
    () =>
      new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", self, "--copy", String(bytes)],
        stdout: "piped",
      })
        .output(),
  );
  const outs = await Promise.all(runs);
  const rates = outs.map((o) => Number(/COPY (\S+)/.exec(new TextDecoder().decode(o.stdout))?.[1]));
  return rates.reduce((a, b) => a + b, 0) / rates.length;
}

const rows: BreakdownRow[] = [];
for (const ranks of values.ranks.split(",").map(Number)) {
  const r = await launch({
    nprocPerNode: ranks,
    command: [new URL(import.meta.url).pathname, "--rank", "--sizes", values.sizes],
    write: (line) => {
      const m = /ROWS (.*)$/.exec(line);
      if (m) rows.push(...JSON.parse(m[1]));
      else if (/rror/.test(line)) console.error(line);
    },
  });
  if (r.code !== 0) Deno.exit(r.code);
}
console.log("# one all-reduce of float32, medians over calls (µs)");
console.log(
  "# ranks        size  algorithm                    in call  to worker    running    back    total",
);
for (const r of rows) {
  console.log(
    `${String(r.ranks).padStart(7)} ${String(r.bytes).padStart(11)}  ${r.algorithm.padEnd(26)} ${
      [r.callUs, r.toWorkerUs, r.runUs, r.backUs, r.totalUs].map((x) => x.toFixed(1).padStart(9)).join(" ")
    }`,
  );
}
console.log("#\n# the physical limit: TypedArray.set of the same bytes (GB/s copied, per process)");
const copies = [];
for (const bytes of sizes) {
  const one = await copyGBs(bytes, 1), two = await copyGBs(bytes, 2);
  copies.push({ bytes, oneProcessGBs: one, twoProcessesGBs: two });
  console.log(
    `${String(bytes).padStart(19)}  one process ${one.toFixed(2)}  two at once ${two.toFixed(2)} each`,
  );
}
if (values.out) Deno.writeTextFileSync(values.out, JSON.stringify({ rows, copies }, null, 2) + "\n");
