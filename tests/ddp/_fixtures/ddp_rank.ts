/**
 * Rank bodies of the DDP tests (run by `spawnThreads`); `args.scenario` names which. Gradients are seeded
 * multiples of 1/64 (exact in every float dtype used), so each rank can compute the exact average of all
 * ranks' gradients itself and compare.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import {
  allReduceHook,
  type CommHook,
  DistributedDataParallel,
  fp16CompressHook,
  int8CompressHook,
  powerSgdHook,
  signCompressHook,
  topKHook,
} from "../../../ddp/mod.ts";
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
  if (scenario === "hooks") return await hooks(pg);
  if (scenario === "hook-mismatch") {
    // Rank 1 compresses with int8 where the others use 1-bit: the first stage's descriptors differ.
    try {
      await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(5000)], {
        hook: pg.rank === 1 ? int8CompressHook() : signCompressHook(),
      });
      ddp.gradReady(0);
      await ddp.synchronize();
      return { caught: "no error" };
    } catch (e) {
      return { caught: errorText(e), mismatch: e instanceof MismatchError };
    }
  }
  throw new Error(`unknown scenario ${scenario}`);
}

/** Rank r's float32 gradient of parameter i at step s: seeded, structured, the same on every rank. */
function noisyGrad(r: number, i: number, n: number, s: number): Float32Array {
  const g = new Float32Array(n);
  let x = (r * 7919 + i * 104_729 + s * 1_299_709 + 1) >>> 0;
  for (let j = 0; j < n; j++) {
    x = (Math.imul(x, 1_664_525) + 1_013_904_223) >>> 0;
    g[j] = Math.fround((x / 2 ** 32 - 0.5) + Math.sin(j * 0.05 + s + i));
  }
  return g;
}

/**
 * Every hook through DDP on a model of two matrices and two vectors (shapes given, for PowerSGD) and a
 * float16 vector: per hook, 4 steps; the float32 gradients checked against the float64 averages (exact for
 * `allreduce` over a power of two ranks, within the int8 bound, and for the hooks with error feedback the
 * identity Σ out + mean(residuals) = Σ avg read back through `hook.state()`); the float16 parameter
 * averaged uncompressed by every hook; and a checkpoint: a second hook loading the first one's state after
 * step 3 gives the same step 4 bit for bit.
 */
async function hooks(pg: ProcessGroup): Promise<unknown> {
  const n = pg.size;
  const lengths = [48 * 40, 40, 40 * 10, 10];
  const shapes = [[48, 40], undefined, [40, 10], undefined, undefined];
  const makers: Record<string, () => CommHook> = {
    allreduce: allReduceHook,
    fp16: fp16CompressHook,
    int8: () => int8CompressHook({ blockSize: 64 }),
    "1bit": () => signCompressHook({ blockSize: 64 }),
    topk: () => topKHook({ ratio: 0.05 }),
    powersgd: () => powerSgdHook({ rank: 2, minCompressionRate: 1 }),
  };
  const out: Record<string, unknown> = {};
  for (const [name, make] of Object.entries(makers)) {
    const params: (Float32Array | Uint16Array)[] = lengths.map((len) => new Float32Array(len));
    params.push(new Uint16Array(64));
    const hook = make();
    await using ddp = await DistributedDataParallel.create(pg, params, {
      hook,
      dtype: "float16",
      shapes,
      bucketMb: 0.005,
      firstBucketMb: 0.002,
    });
    const failures: string[] = [];
    const sumOut = lengths.map((len) => new Float64Array(len));
    const sumAvg = lengths.map((len) => new Float64Array(len));
    let saved: unknown;
    let codecs: (string | undefined)[] = [];
    let lastStep: Float32Array[] = [];
    for (let s = 0; s < 4; s++) {
      for (const [i, len] of lengths.entries()) {
        (ddp.grads[i] as Float32Array).set(noisyGrad(pg.rank, i, len, s));
      }
      // float16 ones: 1.5 on rank 0, 0.5 elsewhere, exact in float16.
      (ddp.grads[4] as Uint16Array).fill(pg.rank === 0 ? 0x3e00 : 0x3800);
      for (let i = params.length - 1; i >= 0; i--) ddp.gradReady(i);
      const step = await ddp.synchronize();
      codecs = step.buckets.map((b) => b.hook.codec);
      const half = (ddp.grads[4] as Uint16Array)[0];
      const expectHalf = (1.5 + 0.5 * (n - 1)) / n;
      if (Math.abs(halfToFloat(half) - expectHalf) > 1e-3) {
        failures.push(`float16 average ${halfToFloat(half)}`);
      }
      for (const [i, len] of lengths.entries()) {
        const g = ddp.grads[i] as Float32Array;
        const avg = new Float64Array(len);
        for (let r = 0; r < n; r++) {
          const gr = noisyGrad(r, i, len, s);
          for (let j = 0; j < len; j++) avg[j] += gr[j] / n;
        }
        for (let j = 0; j < len; j++) {
          sumOut[i][j] += g[j];
          sumAvg[i][j] += avg[j];
        }
        if (name === "allreduce" || name === "fp16") {
          // |g| < 1.5, partial sums < 2: n − 1 additions (and for fp16 n casts), each rounding by at most
          // half an ulp below 2 (2^-23 in float32, 2^-10 in float16), and the division's.
          const tol = name === "fp16" ? 2 * n * 2 ** -11 : n * 2 ** -22;
          for (let j = 0; j < len; j++) {
            if (Math.abs(g[j] - avg[j]) > tol) {
              failures.push(`${name} param ${i}[${j}]: ${g[j]} vs ${avg[j]}`);
              break;
            }
          }
        }
        if (name === "int8") {
          // Blocks of 64 are aligned to the bucket and may span parameters: the bound takes the absolute
          // max over every float32 gradient of every rank (looser than the per-block one, still derived):
          // half a step of each contribution, averaged, plus half a step of the result's.
          let amax = 0, avgMax = 0;
          for (let r = 0; r < n; r++) {
            for (const [i2, len2] of lengths.entries()) {
              for (const v of noisyGrad(r, i2, len2, s)) amax = Math.max(amax, Math.abs(v));
            }
          }
          for (const v of avg) avgMax = Math.max(avgMax, Math.abs(v));
          const first = amax / 127 / 2, bound = first + (avgMax + first) / 127 / 2 + 1e-6;
          for (let j = 0; j < len; j++) {
            if (Math.abs(g[j] - avg[j]) > bound) {
              failures.push(`int8 param ${i}[${j}]: ${g[j]} vs ${avg[j]} > ${bound}`);
              break;
            }
          }
        }
      }
      if (s === 2) saved = hook.state();
      if (s === 3) lastStep = lengths.map((_, i) => (ddp.grads[i] as Float32Array).slice());
    }
    // Error feedback: Σ out + mean_i(residual_i) (+ the servers' residuals) = Σ avg, to float32 rounding.
    let identity: number | undefined;
    const state = hook.state() as {
      buckets: { index: number; residual?: Float32Array; serverResidual?: Float32Array }[];
    } | undefined;
    if (state && state.buckets.some((b) => b.residual)) {
      let worst = 0;
      for (const b of state.buckets) {
        const info = ddp.buckets[b.index];
        if (info.dtype !== "float32") continue;
        const residual = b.residual?.slice() ?? new Float32Array(info.count);
        await pg.allReduce(residual, { op: "avg" });
        const server = b.serverResidual?.slice() ?? new Float32Array(info.count);
        await pg.allReduce(server, { op: "sum" });
        let at = 0;
        for (const i of info.params) {
          for (let j = 0; j < lengths[i]; j++) {
            const left = sumOut[i][j] + residual[at + j] + server[at + j];
            worst = Math.max(worst, Math.abs(left - sumAvg[i][j]) / (1 + Math.abs(sumAvg[i][j])));
          }
          at += lengths[i];
        }
      }
      identity = worst;
    }
    // A checkpoint: a new hook loaded with the state after step 3 reproduces step 4.
    let restored = true;
    if (saved !== undefined) {
      const again = make();
      again.load(saved);
      const params2: (Float32Array | Uint16Array)[] = lengths.map((len) => new Float32Array(len));
      params2.push(new Uint16Array(64));
      await using ddp2 = await DistributedDataParallel.create(pg, params2, {
        hook: again,
        dtype: "float16",
        shapes,
        bucketMb: 0.005,
        firstBucketMb: 0.002,
      });
      for (const [i, len] of lengths.entries()) {
        (ddp2.grads[i] as Float32Array).set(noisyGrad(pg.rank, i, len, 3));
      }
      for (let i = params2.length - 1; i >= 0; i--) ddp2.gradReady(i);
      await ddp2.synchronize();
      restored = lengths.every((_, i) =>
        (ddp2.grads[i] as Float32Array).every((v, j) => Object.is(v, lastStep[i][j]))
      );
    }
    out[name] = { failures, identity, restored, codecs, stateful: saved !== undefined };
  }
  return out;
}

function halfToFloat(h: number): number {
  const e = (h >> 10) & 31, m = h & 1023, sign = h & 0x8000 ? -1 : 1;
  if (e === 0) return sign * m * 2 ** -24;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}
