/**
 * A rank of `bench/faults.ts`.
 * - `soak N SEED`: N calls, each picked by a seeded stream that every rank draws alike (all-reduce,
 *   broadcast, all-gather, reduce-scatter, all-to-all, barrier; 1 to 64 Ki elements), each result checked
 *   against what the inputs (a function of rank, call and index, exact in float32) must give; prints
 *   `RESULT {calls, checks, wrong, rssStartMiB, rssEndMiB, ms}`.
 * - `loop`: all-reduces until one fails, then prints `FAILED <epoch ms> <message>`.
 *
 * @module
 */
import { init } from "../mod.ts";

const [mode, nArg, seedArg] = Deno.args;
const pg = await init();
const { rank, size } = pg;

if (mode === "loop") {
  const t = new Float32Array(1024);
  console.log("READY");
  try {
    for (;;) await pg.allReduce(t, { timeoutMs: 30_000 });
  } catch (e) {
    console.log(`FAILED ${Date.now()} ${(e as Error).message.split("\n")[0]}`);
  }
  Deno.exit(0);
}

/** sfc32, the same stream on every rank. */
let a = 0x9e3779b9, b = 0x243f6a88, c = 0xb7e15162, d = Number(seedArg) >>> 0;
function u32(): number {
  const t = (((a + b) | 0) + d) | 0;
  d = (d + 1) | 0;
  a = b ^ (b >>> 9);
  b = (c + (c << 3)) | 0;
  c = (c << 21) | (c >>> 11);
  c = (c + t) | 0;
  return t >>> 0;
}
/** An input value, small integers so every sum is exact in float32. */
const v = (r: number, call: number, i: number): number => ((r * 7 + call * 3 + i) % 17) - 8;

const calls = Number(nArg);
let checks = 0, wrong = 0;
const rssStart = Deno.memoryUsage().rss;
const began = performance.now();
const expect = (got: number, want: number): void => {
  checks++;
  if (got !== want) wrong++;
};
for (let call = 0; call < calls; call++) {
  const kind = u32() % 6, n = Math.max(1, (1 + (u32() % 65536)) >>> (u32() % 12));
  if (kind === 0) {
    const t = Float32Array.from({ length: n }, (_, i) => v(rank, call, i));
    await pg.allReduce(t);
    for (let i = 0; i < n; i += 97) {
      let want = 0;
      for (let r = 0; r < size; r++) want += v(r, call, i);
      expect(t[i], want);
    }
  } else if (kind === 1) {
    const root = u32() % size;
    const t = Float32Array.from({ length: n }, (_, i) => rank === root ? v(root, call, i) : -99);
    await pg.broadcast(t, { root });
    for (let i = 0; i < n; i += 97) expect(t[i], v(root, call, i));
  } else if (kind === 2) {
    const m = Math.max(1, n >> 2);
    const input = Float32Array.from({ length: m }, (_, i) => v(rank, call, i));
    const output = new Float32Array(m * size);
    await pg.allGather(output, input);
    for (let r = 0; r < size; r++) for (let i = 0; i < m; i += 97) expect(output[r * m + i], v(r, call, i));
  } else if (kind === 3) {
    const m = Math.max(1, n >> 2);
    const input = Float32Array.from({ length: m * size }, (_, i) => v(rank, call, i));
    const output = new Float32Array(m);
    await pg.reduceScatter(output, input);
    for (let i = 0; i < m; i += 97) {
      let want = 0;
      for (let r = 0; r < size; r++) want += v(r, call, rank * m + i);
      expect(output[i], want);
    }
  } else if (kind === 4) {
    const m = Math.max(1, n >> 2);
    const input = Float32Array.from({ length: m * size }, (_, i) => v(rank, call, i));
    const output = new Float32Array(m * size);
    await pg.allToAll(output, input);
    for (let r = 0; r < size; r++) {
      for (let i = 0; i < m; i += 97) expect(output[r * m + i], v(r, call, rank * m + i));
    }
  } else {
    await pg.barrier();
  }
}
const result = {
  calls,
  checks,
  wrong,
  rssStartMiB: rssStart / 2 ** 20,
  rssEndMiB: Deno.memoryUsage().rss / 2 ** 20,
  ms: performance.now() - began,
};
console.log(`RESULT ${JSON.stringify(result)}`);
await pg.close();
