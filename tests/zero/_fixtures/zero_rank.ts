/**
 * Rank bodies of the ZeRO tests (run by `spawnThreads`); `args.scenario` names which. Each rank computes
 * the 1-rank reference itself: the same optimizer kernel over the whole parameters with the exact average
 * of every rank's gradient. Gradients are multiples of 1/64 below 8 in magnitude, so over a power-of-two
 * number of ranks every average (and average of averages, as the hierarchy takes) is exact in float32,
 * and the sharded trainer must reproduce the reference bit for bit.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { optimizerKernels } from "../../../wasm/optim.ts";
import {
  ShardedDataParallel,
  type ZeroOptions,
  type ZeroState,
  type ZeroStepReport,
} from "../../../zero/mod.ts";

/** Parameter lengths: uneven (none divisible by 4 but the second), some smaller than the world. */
export const LENGTHS = [1001, 40, 3, 70001, 1, 517];
/** Layers: three of them, of uneven sizes. */
export const LAYERS = [[0, 1], [2, 3, 4], [5]];

/** Rank r's gradient element j of parameter i at step s: a multiple of 1/64 in [-8, 8). */
export function grad(r: number, i: number, j: number, s: number): number {
  return (((r * 131 + i * 31 + j * 7 + s * 17) % 1024) - 512) / 64;
}

/** The starting value of parameter i, element j: the same on every rank. */
function start(i: number, j: number): number {
  return Math.fround(Math.sin(i * 1000 + j) * 0.5);
}

export interface Scenario {
  readonly scenario: string;
  readonly options?: Partial<ZeroOptions>;
  readonly steps?: number;
  readonly states?: readonly ZeroState[];
  readonly constant?: boolean;
  /** Ranks whose gradients the world uses: rank r takes rank (r mod gradRanks)'s. @default the world */
  readonly gradRanks?: number;
}

type Optimizer = ZeroOptions["optimizer"];

/** The reference: `steps` steps of the optimizer on whole parameters with exact averages over `size`. */
async function reference(
  size: number,
  steps: number,
  optimizer: Optimizer,
  constant = false,
): Promise<Float32Array[]> {
  const k = await optimizerKernels();
  const params = LENGTHS.map((n, i) => Float32Array.from({ length: n }, (_, j) => start(i, j)));
  const m = LENGTHS.map((n) => new Float32Array(n)), v = LENGTHS.map((n) => new Float32Array(n));
  for (let s = 0; s < steps; s++) {
    params.forEach((p, i) => {
      const g = new Float32Array(p.length);
      for (let j = 0; j < g.length; j++) {
        let sum = 0;
        for (let r = 0; r < size; r++) sum += grad(r, i, j, constant ? 0 : s);
        g[j] = sum / size;
      }
      if (optimizer.type === "sgd") {
        k.sgd(p, g, { ...optimizer, buffer: m[i], first: s === 0 });
      } else {
        k.adam(p, g, {
          m: m[i],
          v: v[i],
          step: s + 1,
          lr: optimizer.lr,
          beta1: optimizer.beta1,
          beta2: optimizer.beta2,
          eps: optimizer.eps,
          weightDecay: optimizer.weightDecay ?? (optimizer.type === "adamw" ? 0.01 : 0),
          decoupled: optimizer.type === "adamw",
        });
      }
    });
  }
  return params;
}

/**
 * The gradient this rank uses to stand for `gradRanks` ranks in a world of `size`: rank r's own
 * (r mod gradRanks) when the world is at least that large, else the average of the ranks it stands for
 * (r, r + size, ...), so the world's average is always the average over `gradRanks` ranks.
 */
function standIn(rank: number, size: number, gradRanks: number): (i: number, j: number, s: number) => number {
  if (size >= gradRanks) return (i, j, s) => grad(rank % gradRanks, i, j, s);
  const mine: number[] = [];
  for (let r = rank; r < gradRanks; r += size) mine.push(r);
  return (i, j, s) => mine.reduce((sum, r) => sum + grad(r, i, j, s), 0) / mine.length;
}

/** One training step: stage 3 gathers forward, then backward writes, releases and reduces in reverse. */
async function trainStep(
  sdp: ShardedDataParallel,
  g: (i: number, j: number, s: number) => number,
  s: number,
  constant: boolean,
): Promise<ZeroStepReport> {
  const n = sdp.layers.length;
  for (let l = 0; l < n; l++) {
    await sdp.gather(l); // forward through layer l
    sdp.release(l);
  }
  for (let l = n - 1; l >= 0; l--) {
    await sdp.gather(l);
    const grads = sdp.grads(l);
    sdp.layers[l].params.forEach((i, jp) => {
      const out = grads[jp];
      for (let j = 0; j < out.length; j++) out[j] = g(i, j, constant ? 0 : s);
    });
    sdp.gradReady(l);
    sdp.release(l);
  }
  return await sdp.step();
}

/** Every parameter, whole (stage 3 gathers each layer). */
async function wholeParams(sdp: ShardedDataParallel): Promise<Float32Array[]> {
  const out: Float32Array[] = new Array(LENGTHS.length);
  for (let l = 0; l < sdp.layers.length; l++) {
    await sdp.gather(l);
    sdp.layers[l].params.forEach((i, jp) => (out[i] = sdp.params(l)[jp].slice()));
    sdp.release(l);
  }
  return out;
}

/** The first element whose bits differ, or null. */
function firstDifference(a: readonly Float32Array[], b: readonly Float32Array[]): string | null {
  for (let i = 0; i < a.length; i++) {
    const x = new Uint32Array(a[i].buffer, a[i].byteOffset, a[i].length);
    const y = new Uint32Array(b[i].buffer, b[i].byteOffset, b[i].length);
    for (let j = 0; j < x.length; j++) {
      if (x[j] !== y[j]) return `param ${i}[${j}]: ${a[i][j]}, reference ${b[i][j]}`;
    }
  }
  return null;
}

/** The largest |a − b| over every element. */
function maxDifference(a: readonly Float32Array[], b: readonly Float32Array[]): number {
  let d = 0;
  a.forEach((x, i) => x.forEach((v, j) => (d = Math.max(d, Math.abs(v - b[i][j])))));
  return d;
}

function errorText(e: unknown): string {
  return `${(e as Error).name}: ${(e as Error).message}`;
}

function initial(): Float32Array[] {
  return LENGTHS.map((n, i) => Float32Array.from({ length: n }, (_, j) => start(i, j)));
}

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const args = ctx.args as Scenario;
  const steps = args.steps ?? 3;
  const constant = args.constant ?? false;
  const gradRanks = args.gradRanks ?? pg.size, me = standIn(pg.rank, pg.size, gradRanks);
  const options = {
    stage: 1,
    optimizer: { type: "adam", lr: 0.01 },
    layers: LAYERS,
    ...args.options,
  } as ZeroOptions;

  if (args.scenario === "exact") {
    // The trainer against the reference, bit for bit after every step; every rank the same whole.
    await using sdp = await ShardedDataParallel.create(pg, initial(), options);
    const diffs: (string | null)[] = [];
    for (let s = 0; s < steps; s++) {
      await trainStep(sdp, me, s, constant);
      const ref = await reference(gradRanks, s + 1, options.optimizer, constant);
      diffs.push(firstDifference(await wholeParams(sdp), ref));
    }
    return { diffs, layers: sdp.layers, memory: sdp.memory() };
  }

  if (args.scenario === "lossy") {
    // Lossy codecs: every rank holds the same parameters, within `maxDifference` of the reference.
    await using sdp = await ShardedDataParallel.create(pg, initial(), options);
    for (let s = 0; s < steps; s++) await trainStep(sdp, me, s, constant);
    const mine = await wholeParams(sdp);
    const all = await pg.allGatherObject(mine.map((p) => Array.from(p)));
    const same = all.every((ps) => ps.every((p, i) => p.every((v, j) => Object.is(v, mine[i][j]))));
    const ref = await reference(gradRanks, steps, options.optimizer, constant);
    const delta = mine.map((p, i) => Float64Array.from(p, (v, j) => v - ref[i][j]));
    return { same, maxDiff: maxDifference(mine, ref), delta, residuals: sdp.residuals() };
  }

  if (args.scenario === "bytes") {
    // Bytes one step sends, by configuration.
    await using sdp = await ShardedDataParallel.create(pg, initial(), options);
    const report = await trainStep(sdp, me, 0, constant);
    return { bytesSent: report.bytesSent, collectives: report.collectives };
  }

  if (args.scenario === "save") {
    await using sdp = await ShardedDataParallel.create(pg, initial(), options);
    for (let s = 0; s < steps; s++) await trainStep(sdp, me, s, constant);
    const consolidated = await sdp.consolidatedState();
    return { state: sdp.state(), consolidated };
  }

  if (args.scenario === "load") {
    // Load the states saved by a world of another size, take one more step, compare with the reference.
    await using sdp = await ShardedDataParallel.create(pg, LENGTHS.map((n) => new Float32Array(n)), options);
    await sdp.load(args.states as ZeroState[]);
    const loaded = firstDifference(
      await wholeParams(sdp),
      await reference(gradRanks, steps, options.optimizer, constant),
    );
    await trainStep(sdp, me, steps, constant);
    const next = firstDifference(
      await wholeParams(sdp),
      await reference(gradRanks, steps + 1, options.optimizer, constant),
    );
    return { loaded, next, step: sdp.steps };
  }

  if (args.scenario === "subgroups") {
    // Two trainers on two halves of the world, each against the reference of its half.
    const half = pg.size / 2, mine = pg.rank < half ? 0 : 1;
    const groups = [
      await pg.newGroup(Array.from({ length: half }, (_, i) => i)),
      await pg.newGroup(Array.from({ length: half }, (_, i) => half + i)),
    ];
    const sub = groups[mine];
    await using sdp = await ShardedDataParallel.create(sub, initial(), options);
    for (let s = 0; s < steps; s++) await trainStep(sdp, standIn(sub.rank, sub.size, sub.size), s, constant);
    const diff = firstDifference(
      await wholeParams(sdp),
      await reference(sub.size, steps, options.optimizer, constant),
    );
    await pg.barrier();
    return { diff, subRank: sub.rank, subSize: sub.size };
  }

  if (args.scenario === "differ") {
    const params = initial();
    if (pg.rank === 1) params[3][17] += 1;
    const errors: string[] = [];
    try {
      await ShardedDataParallel.create(pg, params, options);
    } catch (e) {
      errors.push(errorText(e));
    }
    // broadcastFrom: 0 makes rank 0's values everyone's.
    await using sdp = await ShardedDataParallel.create(pg, params, { ...options, broadcastFrom: 0 });
    const whole = await wholeParams(sdp);
    return { errors, broadcastOk: whole[3][17] === initial()[3][17] };
  }

  if (args.scenario === "misuse") {
    await using sdp = await ShardedDataParallel.create(pg, initial(), { ...options, stage: 3, prefetch: 0 });
    const errors: string[] = [];
    const attempt = (fn: () => unknown): void => {
      try {
        fn();
        errors.push("no error");
      } catch (e) {
        errors.push(errorText(e));
      }
    };
    attempt(() => sdp.params(1)); // used without gather
    attempt(() => sdp.release(1)); // released without gather
    const pending = sdp.gather(1);
    attempt(() => sdp.params(1)); // gather not finished
    attempt(() => sdp.release(1)); // in use: gather pending
    await pending;
    sdp.grads(1);
    attempt(() => sdp.release(1)); // in use: gradient open
    sdp.gradReady(1);
    attempt(() => sdp.gradReady(1)); // twice
    attempt(() => sdp.grads(1)); // after it was handed on
    sdp.release(1);
    let stepError = "no error";
    try {
      await sdp.step();
    } catch (e) {
      stepError = errorText(e);
    }
    errors.push(stepError);
    return { errors };
  }

  throw new Error(`unknown scenario ${args.scenario}`);
}
