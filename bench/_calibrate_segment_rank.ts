/**
 * One rank of `deno task bench:calibrate`'s segment measurement (two ranks over shared memory, started by
 * the launcher with `DCOMM_SEGMENT_PLAN` set): the median time of awaited float32 all-reduces through the
 * host segment at sizes from 8 B to 16 MiB, after a JIT warm-up: the fastest of 7 rounds per size. Rank
 * 0 prints the samples.
 *
 * @module
 */
import { init } from "../backend/init.ts";
import type { SegmentSample } from "../sim/cost_model.ts";
import { DEFAULT_SEGMENT_LAYOUT } from "../transport/segment.ts";

const plan = Deno.env.get("DCOMM_SEGMENT_PLAN") as SegmentSample["plan"];
const pg = await init({ transport: "shm" });
const warm = new Float32Array(256);
for (let i = 0; i < 3000; i++) await pg.allReduce(warm);
const samples: SegmentSample[] = [];
for (const bytes of [8, 4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20]) {
  const t = new Float32Array(bytes / 4);
  const iters = Math.max(5, Math.min(400, Math.floor((64 << 20) / bytes)));
  const rounds: number[] = [];
  for (let r = 0; r < 7; r++) {
    await pg.barrier();
    const t0 = performance.now();
    for (let i = 0; i < iters; i++) await pg.allReduce(t);
    const mine = new Float64Array([(performance.now() - t0) / iters / 1000]);
    await pg.allReduce(mine, { op: "max" });
    rounds.push(mine[0]);
  }
  rounds.sort((a, b) => a - b);
  samples.push({
    plan,
    size: pg.size,
    bytes,
    chunkBytes: DEFAULT_SEGMENT_LAYOUT.bufferBytes,
    seconds: rounds[3],
  });
}
if (pg.rank === 0) console.log(`SEGMENT ${JSON.stringify(samples)}`);
await pg.close();
