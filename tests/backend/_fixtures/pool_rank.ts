/**
 * A rank of the pool tests (started by the launcher over shared memory, with a pool): all-reduces of
 * tensors from `pg.alloc()` in place, of several dtypes, ops and sizes (one past the calling thread's
 * limit, so the Worker runs it), checked against the formula; alloc and release; the errors. Mode
 * `mixed`: rank 1 passes an ordinary tensor where the others pass pool tensors. Prints `RESULT {json}`.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { checkReduction, input } from "../_reference.ts";
import type { DType, ReduceOp, TypedArray } from "../../../core/dtype.ts";

const mode = Deno.args[0] ?? "run";
const pg = await init({ segment: { poolBytes: 16 << 20 } });
const failures: string[] = [];
const fail = (what: string): void => {
  failures.push(`rank ${pg.rank}: ${what}`);
};
let ran = 0;
if (mode === "mixed") {
  const t = pg.rank === 1 ? new Float32Array(1024) : pg.alloc(1024);
  try {
    await pg.allReduce(t);
    fail("a call mixing pool and ordinary tensors did not fail");
  } catch (e) {
    console.log(`MIXED ${(e as Error).name}: ${(e as Error).message}`);
  }
} else {
  const cases: [DType, ReduceOp, number][] = [
    ["float32", "sum", 0],
    ["float32", "sum", 1],
    ["float32", "sum", 1001],
    ["int32", "max", 7],
    ["bfloat16", "avg", 4097],
    ["float64", "sum", 300_001],
    ["float32", "avg", (6 << 20) / 4 + 3], // past the 4 MiB the calling thread runs itself
  ];
  let id = 100;
  for (const [dtype, op, count] of cases) {
    const inputs = Array.from({ length: pg.size }, (_, r) => input(dtype, op, count, id, r));
    const t = pg.alloc(count, { dtype }) as TypedArray;
    if (!t.every((x: number | bigint) => x == 0)) fail(`alloc(${count}, ${dtype}) is not zeroed`);
    (t as unknown as { set(a: ArrayLike<unknown>): void }).set(
      inputs[pg.rank] as unknown as ArrayLike<unknown>,
    );
    const report = await pg.allReduce(t, { op, dtype }).wait();
    if (report?.algorithm !== "segment") fail(`algorithm ${report?.algorithm}`);
    if (report && report.bytesSent !== 0) {
      fail(`a pool all-reduce sent ${report.bytesSent} bytes through buffers`);
    }
    const bad = checkReduction(dtype, op, inputs, t);
    if (bad) fail(`${dtype} ${op} ${count}: element ${bad.index}: expected ${bad.expected}, got ${bad.got}`);
    pg.release(t);
    id++;
    ran++;
  }
  // The pool is empty again: one tensor of nearly all of it fits, and one more byte does not.
  const whole = pg.alloc((16 << 20) / 4);
  try {
    pg.alloc(16);
    fail("alloc past the pool's end did not throw");
  } catch (e) {
    if (!(e instanceof RangeError) || !/pool/.test(e.message)) fail(`alloc past the end: ${e}`);
  }
  pg.release(whole);
  for (const bad of [new Float32Array(4), whole]) {
    try {
      pg.release(bad);
      fail("release of a tensor not from alloc (or released twice) did not throw");
    } catch (e) {
      if (!(e instanceof TypeError)) fail(`release: ${e}`);
    }
  }
  const kept = pg.alloc(4);
  kept[0] = 5;
  await pg.close();
  // A pool tensor outliving the group reads as memory, not a crash.
  console.log(`AFTER ${kept[0]}`);
}
if (mode === "mixed") await pg.close().catch(() => {});
console.log(`RESULT ${JSON.stringify({ rank: pg.rank, ran, failures })}`);
