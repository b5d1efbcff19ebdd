/**
 * Rank bodies of the DDP tests (run by `spawnThreads`); `args.scenario` names which. Gradients are seeded
 * multiples of 1/64 (exact in every float dtype used), so each rank can compute the exact average of all
 * ranks' gradients itself and compare.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { DistributedDataParallel } from "../../../ddp/mod.ts";
import { DistError, MismatchError } from "../../../core/errors.ts";

/** Parameter lengths of the model the scenarios train: 5 "layers", the last ones small. */
const LENGTHS = [3000, 40, 70000, 10, 5];

/** Rank r's gradient element j of parameter i at step s: a multiple of 1/64 in [-8, 8). */
function grad(r: number, i: number, j: number, s: number): number {
  return (((r * 131 + i * 31 + j * 7 + s * 17) % 1024) - 512) / 64;
}

/** The average over `size` ranks of {@linkcode grad}, in float64. */
function average(size: number, i: number, j: number, s: number): number {
  let sum = 0;
  for (let r = 0; r < size; r++) sum += grad(r, i, j, s);
  return sum / size;
}

/**
 * Whether a float32 average `v` is right. Every sum of multiples of 1/64 below 2^17 is exact in float32, so
 * over a power-of-two number of ranks the average is exact; over others the one division (or product with
 * the rounded inverse, 1/n to within half an ulp) rounds, by at most 2^-23 of the average.
 */
function averageOk(v: number, size: number, i: number, j: number, s: number): boolean {
  const exact = average(size, i, j, s);
  if ((size & (size - 1)) === 0) return v === exact;
  return Math.abs(v - exact) <= 2 ** -23 * Math.abs(exact);
}

function shuffled(n: number, seed: number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  let x = seed + 1;
  for (let i = n - 1; i > 0; i--) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    const j = x % (i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

function errorText(e: unknown): string {
  return `${(e as Error).name}: ${(e as Error).message}`;
}

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const { scenario } = ctx.args as { scenario: string };
  const params = LENGTHS.map((n) => new Float32Array(n).fill(pg.rank + 1));

  if (scenario === "average") {
    // Three steps, each rank marking its gradients in its own order; the averages are exact.
    await using ddp = await DistributedDataParallel.create(pg, params, {
      bucketMb: 0.1,
      firstBucketMb: 0.00005, // buckets [4, 3] (60 bytes fill the first), [2] (over the cap), [1, 0]
    });
    const broadcastOk = params.every((p) => p.every((v) => v === 1));
    const wrong: string[] = [];
    const reports = [];
    for (let s = 0; s < 3; s++) {
      for (const i of shuffled(LENGTHS.length, pg.rank * 10 + s)) {
        ddp.grads[i].forEach((_, j, g) => (g[j] = grad(pg.rank, i, j, s)));
        ddp.gradReady(i);
      }
      const step = await ddp.synchronize();
      reports.push({ buckets: step.buckets.length, bytes: step.buckets.map((b) => b.bytes) });
      ddp.grads.forEach((g, i) =>
        g.forEach((v, j) => {
          if (!averageOk(v, pg.size, i, j, s) && wrong.length < 5) {
            wrong.push(`step ${s} grad ${i}[${j}] = ${v}`);
          }
        })
      );
    }
    return { broadcastOk, wrong, reports, buckets: ddp.buckets };
  }

  if (scenario === "given-grads") {
    // The caller's own gradient arrays: copied into the buckets at gradReady, back at synchronize.
    const grads = LENGTHS.map((n) => new Float32Array(n));
    await using ddp = await DistributedDataParallel.create(pg, params, { grads, bucketMb: 0.1 });
    for (let i = LENGTHS.length - 1; i >= 0; i--) {
      grads[i].forEach((_, j, g) => (g[j] = grad(pg.rank, i, j, 0)));
      ddp.gradReady(i);
    }
    await ddp.synchronize();
    const same = ddp.grads.every((g, i) => g === grads[i]);
    const wrong = grads.flatMap((g, i) =>
      [...g].flatMap((v, j) => (v === average(pg.size, i, j, 0) ? [] : [i]))
    );
    return { same, wrong: wrong.length };
  }

  if (scenario === "no-sync") {
    // Two accumulation steps without communication, then one that averages the sum.
    await using ddp = await DistributedDataParallel.create(pg, params);
    const add = (s: number) => {
      ddp.grads.forEach((g, i) => {
        g.forEach((_, j) => (g[j] += grad(pg.rank, i, j, s)));
        ddp.gradReady(i);
      });
    };
    for (const g of ddp.grads) g.fill(0);
    const quiet = [await ddp.noSync(() => add(0)), await ddp.noSync(() => add(1))];
    const local = ddp.grads[4][0];
    add(2);
    const step = await ddp.synchronize();
    const expected = average(pg.size, 4, 0, 0) + average(pg.size, 4, 0, 1) + average(pg.size, 4, 0, 2);
    return {
      quiet,
      local,
      localExpected: grad(pg.rank, 4, 0, 0) + grad(pg.rank, 4, 0, 1),
      value: ddp.grads[4][0],
      expected,
      communicated: step.communicated,
    };
  }

  if (scenario === "unused") {
    await using strict = await DistributedDataParallel.create(pg, params, { broadcastFrom: false });
    for (const i of [4, 3, 2, 0]) strict.gradReady(i); // parameter 1 unused
    const error = await strict.synchronize().then(
      () => "no error",
      (e) => `${errorText(e)} [${(e as DistError).code}]`,
    );
    await using lenient = await DistributedDataParallel.create(pg, params, {
      findUnusedParameters: true,
      broadcastFrom: false,
    });
    lenient.grads[1].fill(99);
    for (const i of [4, 3, 2, 0]) {
      lenient.grads[i].fill(1);
      lenient.gradReady(i);
    }
    const step = await lenient.synchronize();
    return {
      error,
      unused: step.unused,
      zero: lenient.grads[1].every((v) => v === 0),
      one: lenient.grads[0][0],
    };
  }

  if (scenario === "half") {
    // float16 gradients are averaged in float16: 2 bytes per element, and the hook says so.
    const halfParams = [new Float16Array(1000), new Float16Array(24)];
    await using ddp = await DistributedDataParallel.create(pg, halfParams);
    ddp.grads.forEach((g, i) => {
      g.forEach((_, j) => (g[j] = grad(pg.rank, i, j, 0)));
      ddp.gradReady(i);
    });
    const step = await ddp.synchronize();
    const wrong = ddp.grads.flatMap((g, i) =>
      [...g].flatMap((v, j) => (v === average(pg.size, i, j, 0) ? [] : [j]))
    );
    return {
      wire: step.buckets.map((b) => b.hook.wireDtype),
      bytes: step.buckets.map((b) => b.hook.works[0].bytes),
      counts: step.buckets.map((b) => b.count),
      wrong: wrong.length,
    };
  }

  if (scenario === "mixed") {
    // Parameters of several dtypes: each bucket holds one.
    const mixed = [new Float64Array(10), new Float32Array(10), new Float64Array(10), new Float32Array(10)];
    await using ddp = await DistributedDataParallel.create(pg, mixed);
    ddp.grads.forEach((g, i) => {
      g.fill(pg.rank + i);
      ddp.gradReady(i);
    });
    await ddp.synchronize();
    return {
      buckets: ddp.buckets.map((b) => ({ dtype: b.dtype, params: b.params })),
      values: ddp.grads.map((g) => g[0]),
    };
  }

  if (scenario === "overlap") {
    // The last layer's bucket must start while the "backward pass" still computes the others.
    // The first bucket holds parameter 4 alone (20 bytes fill a 10-byte cap).
    await using ddp = await DistributedDataParallel.create(pg, params, {
      firstBucketMb: 0.00001,
      bucketMb: 1,
    });
    ddp.grads[4].fill(1);
    ddp.gradReady(4);
    const busyUntil = performance.now() + 150;
    let x = 0;
    while (performance.now() < busyUntil) x += Math.sqrt(x + 1);
    const backwardEnd = performance.timeOrigin + performance.now();
    for (const i of [3, 2, 1, 0]) ddp.gradReady(i);
    const step = await ddp.synchronize();
    return {
      firstStarted: step.buckets[0].hook.works[0].startedAt,
      firstFinished: step.buckets[0].hook.works[0].finishedAt,
      backwardEnd,
      x: x > 0,
    };
  }

  if (scenario === "mismatch") {
    // Rank 1 lays out its buckets differently: the first all-reduce differs, and every rank fails naming it.
    try {
      await using ddp = await DistributedDataParallel.create(pg, params, {
        broadcastFrom: false,
        firstBucketMb: pg.rank === 1 ? 0.5 : 0.001,
      });
      ddp.grads.forEach((_, i) => ddp.gradReady(LENGTHS.length - 1 - i));
      await ddp.synchronize();
      return { caught: "no error" };
    } catch (e) {
      return { caught: errorText(e), mismatch: e instanceof MismatchError, dist: e instanceof DistError };
    }
  }
  throw new Error(`unknown scenario ${scenario}`);
}
