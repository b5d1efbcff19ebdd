/**
 * A rank of `bench/compress.ts`: for each size and hook, all-reduces (op avg) a float32 gradient with the
 * codec as a DDP hook would (error feedback state kept across the calls), one untimed call and then
 * `iterations` timed ones; prints `RESULT {json}` on rank 0 with the slowest rank's mean time per call and
 * the bytes each rank sent.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../backend/init.ts";
import type { ReduceOptions } from "../backend/process_group.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    sizes: { type: "string", default: "1M,4M,16M,64M,256M" },
    hooks: { type: "string", default: "allreduce,fp16,int8,1bit,topk,powersgd" },
    "min-seconds": { type: "string", default: "0.5" },
  },
});

const MIB = 1 << 20;
const sizeOf = (s: string): number => Number(s.replace(/M$/, "")) * MIB;

/** The options of one hook's all-reduce of `count` floats, its state made once. */
function optionsOf(hook: string, count: number): ReduceOptions {
  switch (hook) {
    case "allreduce":
      return { op: "avg" };
    case "fp16":
      return { op: "avg", commDtype: "float16" };
    case "int8":
      return { op: "avg", compression: { codec: "int8" } };
    case "1bit":
      return {
        op: "avg",
        compression: {
          codec: "sign",
          residual: new Float32Array(count),
          serverResidual: new Float32Array(count),
        },
      };
    case "topk":
      return {
        op: "avg",
        compression: { codec: "topk", k: Math.round(count / 100), residual: new Float32Array(count) },
      };
    case "powersgd": {
      // One square matrix (the sizes are 4^k MiB), rank 2, as a large layer's weight.
      const rows = 2 ** Math.round(Math.log2(Math.sqrt(count)));
      const cols = count / rows;
      const q = new Float32Array(cols * 2);
      for (let i = 0; i < q.length; i++) q[i] = Math.sin(i + 1);
      return {
        op: "avg",
        compression: {
          codec: "powersgd",
          rank: 2,
          matrices: [{ offset: 0, rows, cols }],
          q,
          residual: new Float32Array(count),
        },
      };
    }
    default:
      throw new RangeError(`Unknown hook ${hook}`);
  }
}

await using pg = await init();
const rows: { hook: string; bytes: number; ms: number; bytesSent: number; iterations: number }[] = [];
for (const size of flags.sizes.split(",")) {
  const bytes = sizeOf(size), count = bytes / 4;
  const grad = new Float32Array(count);
  for (const hook of flags.hooks.split(",")) {
    const options = optionsOf(hook, count);
    const fill = (): void => {
      for (let i = 0; i < count; i += 1024) {
        grad.fill(Math.sin(i * 0.001 + pg.rank), i, Math.min(count, i + 1024));
      }
    };
    fill();
    await pg.barrier();
    let t0 = performance.now();
    const first = await pg.allReduce(grad, options).wait();
    const once = performance.now() - t0;
    // As many as fit in min-seconds (the same on every rank: rank 0's first call decides), 2 to 20.
    const plan = new Float64Array([
      Math.min(20, Math.max(2, Math.ceil(Number(flags["min-seconds"]) * 1000 / once))),
    ]);
    await pg.broadcast(plan);
    const iterations = plan[0];
    let sent = 0;
    await pg.barrier();
    t0 = performance.now();
    for (let i = 0; i < iterations; i++) sent += (await pg.allReduce(grad, options).wait())?.bytesSent ?? 0;
    const ms = (performance.now() - t0) / iterations;
    const worst = new Float64Array([ms]);
    await pg.allReduce(worst, { op: "max" });
    rows.push({
      hook,
      bytes,
      ms: worst[0],
      bytesSent: sent / iterations || first?.bytesSent || 0,
      iterations,
    });
  }
}
if (pg.rank === 0) console.log(`RESULT ${JSON.stringify({ ranks: pg.size, rows })}`);
