/**
 * A rank of the `commDtype` tests: all-reduces of float32 tensors that travel as float16 or bfloat16, run
 * by `spawnThreads` (`main`) or as a process of the launcher (over shared memory: the host segment),
 * printing `RESULT {json}`. Inputs are seeded multiples of 1/64, so every rank computes the exact result in
 * float64 and checks the narrow one against the bound 2·n·eps·Σ|x| of n roundings to the narrow dtype
 * (eps 2^-11 for float16, 2^-8 for bfloat16); with 2 ranks and float16 the results are exact.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import type { DType, ReduceOp } from "../../../core/dtype.ts";
import { MismatchError } from "../../../core/errors.ts";

const EPS: Record<string, number> = { float16: 2 ** -11, bfloat16: 2 ** -8 };

function value(rank: number, j: number, seed: number): number {
  return (((rank * 131 + j * 7 + seed * 17) % 1024) - 512) / 64;
}

/** Runs every case on this rank. */
export async function main(pg: ProcessGroup, ctx?: { args: unknown }): Promise<unknown> {
  const scenario = (ctx?.args as { scenario?: string } | undefined)?.scenario ?? "values";
  const n = pg.size;
  if (scenario === "mismatch") {
    // Rank 1 sends float32 where the others send float16.
    try {
      const t = new Float32Array(1000).fill(1);
      await pg.allReduce(t, {
        op: "avg",
        commDtype: pg.rank === 1 ? undefined : "float16",
        timeoutMs: 20_000,
      });
      return { caught: "no error" };
    } catch (e) {
      return {
        caught: `${(e as Error).name}: ${(e as Error).message}`,
        mismatch: e instanceof MismatchError,
      };
    }
  }
  const failures: string[] = [];
  const reports: { commDtype: string; op: string; count: number; bytes: number; algorithm: string }[] = [];
  let exact = true;
  const cases: [DType, ReduceOp, number][] = [
    ["float16", "avg", 1000],
    ["float16", "sum", 77],
    ["bfloat16", "avg", 1000],
    ["bfloat16", "max", 300],
    ["float16", "avg", 300_000], // chunks, and past the calling thread's size
  ];
  for (const [seed, [commDtype, op, count]] of cases.entries()) {
    const t = new Float32Array(count).map((_, j) => value(pg.rank, j, seed));
    const work = pg.allReduce(t, { op, commDtype });
    const report = await work.wait();
    reports.push({ commDtype, op, count, bytes: report?.bytes ?? -1, algorithm: report?.algorithm ?? "" });
    for (let j = 0; j < count; j++) {
      let e = op === "max" ? -Infinity : 0;
      let mag = 0;
      for (let r = 0; r < n; r++) {
        const x = value(r, j, seed);
        e = op === "max" ? Math.max(e, x) : e + x;
        mag += Math.abs(x);
      }
      if (op === "avg") e /= n;
      const tol = op === "max"
        ? EPS[commDtype] * Math.abs(e)
        : (2 * n * EPS[commDtype] * mag) / (op === "avg" ? n : 1);
      if (!(Math.abs(t[j] - e) <= tol)) {
        failures.push(`${commDtype} ${op} ${count}: [${j}] = ${t[j]}, expected ${e} ± ${tol}`);
        break;
      }
      if (t[j] !== e && commDtype === "float16") exact = false;
    }
  }
  // Values whose float16 sum overflows (65504 is the largest float16): their average does not.
  const big = new Float32Array(64).fill(60_000);
  await pg.allReduce(big, { op: "avg", commDtype: "float16" });
  const overflowSafe = big.every((v) => v === 60_000);
  return { failures, reports, exact, overflowSafe };
}

if (import.meta.main) {
  await using pg = await init();
  console.log(`RESULT ${JSON.stringify({ rank: pg.rank, ...(await main(pg) as object) })}`);
}
