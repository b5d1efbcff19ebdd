/**
 * A rank of the small all-reduce tests (started by the launcher over shared memory): the calling thread's
 * path for sums of at most 16 KiB (`backend/cpu/_segment_small.ts`: a JavaScript sum to 64 bytes, the
 * kernels' above). Modes:
 *
 * - `bits`: float32/float64 sum and avg, int32 sum, counts 1 to the limit and one past it (both sides of
 *   the JavaScript sum's limit too), each against
 *   the reference kernels' `reduceMany` of every rank's input, bit for bit; how many calls the path took
 *   and how many it handed on to the general pipeline;
 * - `late`: rank 1 sleeps before each call, so rank 0's calls go on through the general pipeline;
 * - `mixed`: rank 0 asks for `algorithm: "segment"` (the general pipeline) and the others do not;
 * - `mismatch`: rank 0 all-reduces 2 elements and the others 3.
 *
 * Prints `RESULT {json}`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import type { DType, ReduceOp } from "../../../core/dtype.ts";
import { reduceMany } from "../../../wasm/reference.ts";
import { input } from "../_reference.ts";
import { SMALL_ALLREDUCE_BYTES, SmallAllReduce } from "../../../backend/cpu/_segment_small.ts";

// Counts the calls the small path takes (and those it hands on), wrapping its one method.
let small = 0, handedOn = 0;
const run = SmallAllReduce.prototype.run;
SmallAllReduce.prototype.run = function (...args): ReturnType<typeof run> {
  small++;
  const state = run.apply(this, args);
  if (state !== undefined) handedOn++;
  return state;
};

const mode = Deno.args[0] ?? "bits";
const pg = await init({ transport: "shm" });
const failures: string[] = [];
let calls = 0, smallCalls = 0;

async function check(
  dtype: DType,
  op: ReduceOp,
  count: number,
  seed: number,
  algorithm?: string,
): Promise<void> {
  const inputs = Array.from({ length: pg.size }, (_, r) => input(dtype, op, count, seed, r));
  const t = inputs[pg.rank].slice();
  const expected = inputs[0].slice();
  reduceMany(expected, inputs, { dtype, op });
  const work = pg.allReduce(t, { op, algorithm });
  calls++;
  if (t.byteLength <= SMALL_ALLREDUCE_BYTES && algorithm === undefined) smallCalls++;
  const report = await work.wait();
  if (report?.algorithm !== "segment") failures.push(`${dtype} ${op} ${count}: ran ${report?.algorithm}`);
  const a = new Uint8Array(t.buffer), b = new Uint8Array(expected.buffer);
  if (a.some((x, i) => x !== b[i])) {
    failures.push(
      `${dtype} ${op} ${count}: got ${[...t.slice(0, 4)]}, expected ${[...expected.slice(0, 4)]}`,
    );
  }
}

if (mode === "bits") {
  let seed = 1;
  for (
    const [dtype, op] of [["float32", "sum"], ["float32", "avg"], ["float64", "sum"], ["float64", "avg"], [
      "int32",
      "sum",
    ]] as const
  ) {
    const es = dtype === "float64" ? 8 : 4, limit = SMALL_ALLREDUCE_BYTES / es;
    for (const count of [1, 2, 7, 64 / es, 64 / es + 1, 1000, limit, limit + 1]) {
      // The same tensor again and again, as a training loop calls it, then a fresh one.
      for (let i = 0; i < 3; i++) await check(dtype, op, count, seed++);
    }
  }
} else if (mode === "late") {
  for (let i = 0; i < 4; i++) {
    if (pg.rank === 1) await new Promise((r) => setTimeout(r, 30));
    await check("float32", "sum", 2, 50 + i);
  }
} else if (mode === "mixed") {
  for (let i = 0; i < 20; i++) {
    await check("float32", "avg", 5, 80 + i, pg.rank === 0 ? "segment" : undefined);
  }
} else if (mode === "abandoned") {
  // The last rank comes after the others timed out of the call: it must fail too, not succeed.
  await pg.barrier();
  const late = pg.rank === pg.size - 1;
  if (late) await new Promise((r) => setTimeout(r, 1500));
  try {
    await pg.allReduce(new Float32Array(4).fill(1), { timeoutMs: 500 });
    failures.push(`rank ${pg.rank}: the abandoned all-reduce succeeded`);
  } catch (e) {
    console.log(`ABANDONED ${pg.rank} ${(e as Error).name}: ${(e as Error).message}`);
  }
  // The ranks that gave up wait for the late one before they go.
  await new Promise((r) => setTimeout(r, late ? 100 : 2000));
} else if (mode === "mismatch") {
  try {
    await pg.allReduce(new Float32Array(pg.rank === 0 ? 2 : 3));
    failures.push("mismatched calls did not fail");
  } catch (e) {
    console.log(`MISMATCH ${(e as Error).name}: ${(e as Error).message}`);
  }
}
console.log(`RESULT ${JSON.stringify({ rank: pg.rank, failures, calls, smallCalls, small, handedOn })}`);
if (mode !== "mismatch" && mode !== "abandoned") await pg.close();
else Deno.exit(0);
