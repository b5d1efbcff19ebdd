/**
 * In-place all-gather (the input is this rank's block of the output) and reduce-scatter (the output is
 * this rank's block of the input), NCCL's and torch's in-place forms, against the out-of-place results,
 * for each algorithm named in `args.algorithms`, with even and uneven blocks.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";

function starts(counts: readonly number[]): number[] {
  let at = 0;
  return counts.map((c) => (at += c) - c);
}

/** Runs every case on this rank; returns the cases whose in-place result differs. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const { algorithms } = ctx.args as { algorithms: Record<string, string[]> };
  const wrong: string[] = [];
  const n = pg.size, me = pg.rank;
  for (const counts of [Array(n).fill(5000), Array.from({ length: n }, (_, r) => 3001 + 7 * r)]) {
    const uneven = counts[0] !== counts[n - 1];
    const total = counts.reduce((a, b) => a + b, 0), at = starts(counts);
    for (const algorithm of algorithms.allGather) {
      if (uneven && algorithm === "recursive-doubling") continue; // even blocks only
      const options = uneven ? { counts, algorithm } : { algorithm };
      const mine = Float32Array.from({ length: counts[me] }, (_, j) => me * 1000 + j);
      const out = new Float32Array(total);
      await pg.allGather(out, mine, options);
      const inPlace = new Float32Array(total).fill(-1);
      inPlace.set(mine, at[me]);
      await pg.allGather(inPlace, inPlace.subarray(at[me], at[me] + counts[me]), options);
      if (!inPlace.every((v, i) => v === out[i])) wrong.push(`allGather ${algorithm} counts ${counts[0]}..`);
    }
    for (const algorithm of algorithms.reduceScatter) {
      if (uneven && algorithm === "halving") continue; // even blocks only
      const input = Float32Array.from({ length: total }, (_, j) => ((me + 1) * (j % 97)) / 8);
      const out = new Float32Array(counts[me]);
      const options = uneven ? { counts, algorithm, op: "sum" as const } : { algorithm, op: "sum" as const };
      await pg.reduceScatter(out, input, options);
      const inPlace = input.slice();
      await pg.reduceScatter(inPlace.subarray(at[me], at[me] + counts[me]), inPlace, options);
      const got = inPlace.subarray(at[me], at[me] + counts[me]);
      if (!got.every((v, i) => v === out[i])) wrong.push(`reduceScatter ${algorithm} counts ${counts[0]}..`);
    }
  }
  return wrong;
}

if (import.meta.main) {
  // Under the launcher: the algorithms named on the command line, over the transport it picked.
  const { init } = await import("../../../backend/init.ts");
  await using pg = await init();
  const [allGather, reduceScatter] = Deno.args.map((a) => a.split(","));
  console.log(
    `RESULT ${JSON.stringify(await main(pg, { args: { algorithms: { allGather, reduceScatter } } }))}`,
  );
}
