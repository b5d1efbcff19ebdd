/**
 * One rank of `bench/zero.ts`: an MLP of `--layers` square layers of `--width` (ReLU between, a squared
 * error against random targets) trained with Adam on random inputs, by DDP (the optimizer over the whole
 * parameters after the all-reduce) and by ShardedDataParallel at each configuration of `--configs`
 * (`1`, `2`, `3`, with `+qwz`, `+qgz`, `+hpz`, `+sign`, `+topk`, `+p0` for no prefetch), in one world.
 * For each: the bytes this rank holds by kind, the bytes it sent per step, and the step time (the median
 * of `--steps` after one warm-up, the slowest rank's). With `--overlap`, stage 3's step beside the
 * compute alone (every layer gathered first) and the gathers alone (two passes of gather and release).
 * With `--comm-only` no matrix product runs (a step is its communication and the optimizer). Rank 0
 * prints `RESULT {json}`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { init } from "../backend/init.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { DistributedDataParallel } from "../ddp/mod.ts";
import { kernels } from "../wasm/kernels.ts";
import { optimizerKernels } from "../wasm/optim.ts";
import { ShardedDataParallel, type ZeroOptions } from "../zero/mod.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    width: { type: "string", default: "1536" },
    layers: { type: "string", default: "12" },
    batch: { type: "string", default: "4" },
    steps: { type: "string", default: "5" },
    configs: { type: "string", default: "ddp,1,2,3,3+qwz+qgz" },
    overlap: { type: "boolean", default: false },
    /** Skip the matrix products: a step is then its communication and the optimizer (the cluster's rows). */
    "comm-only": { type: "boolean", default: false },
  },
});
const W = Number(flags.width), L = Number(flags.layers), B = Number(flags.batch), STEPS = Number(flags.steps);
const k = await kernels(), ok = await optimizerKernels();
await using pg = await init();

// Random inputs and targets, the same on every rank but for a per-rank stream (data parallel).
let seed = 12345 + pg.rank;
const random = (): number => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return seed / 2 ** 32 - 0.5;
};
const x = Float32Array.from({ length: B * W }, random);
const target = Float32Array.from({ length: B * W }, random);
const acts = Array.from({ length: L + 1 }, () => new Float32Array(B * W));
const dh = new Float32Array(B * W), dprev = new Float32Array(B * W);

function initialParams(): Float32Array[] {
  let s = 99;
  const r = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * Math.sqrt(3 / W); // uniform, variance 1/W
  };
  return Array.from(
    { length: 2 * L },
    (_, i) => i % 2 === 0 ? Float32Array.from({ length: W * W }, r) : new Float32Array(W),
  );
}

let COMPUTE = !flags["comm-only"];

/** Layer l's forward: acts[l + 1] = relu(acts[l] · Wl + bl). */
function forward(l: number, w: Float32Array, b: Float32Array): void {
  if (!COMPUTE) return;
  const out = acts[l + 1];
  k.matmul(acts[l], w, { c: out, m: B, k: W, n: W });
  for (let r = 0; r < B; r++) for (let j = 0; j < W; j++) out[r * W + j] = Math.max(0, out[r * W + j] + b[j]);
}

/** Layer l's backward, with dh its output's gradient: its weight and bias gradients, and dh for l − 1. */
function backward(l: number, w: Float32Array, gw: Float32Array, gb: Float32Array): void {
  if (!COMPUTE) return;
  const out = acts[l + 1];
  for (let i = 0; i < dh.length; i++) if (out[i] <= 0) dh[i] = 0;
  k.matmul(acts[l], dh, { c: gw, m: W, k: B, n: W, transA: true, accumulate: true });
  for (let r = 0; r < B; r++) for (let j = 0; j < W; j++) gb[j] += dh[r * W + j];
  if (l > 0) {
    k.matmul(dh, w, { c: dprev, m: B, k: W, n: W, transB: true });
    dh.set(dprev);
  }
}

function lossGrad(): void {
  const y = acts[L];
  for (let i = 0; i < dh.length; i++) dh[i] = (y[i] - target[i]) / B;
}

acts[0].set(x);
const PSI = L * (W * W + W);

/** Bytes this host's interfaces sent (its network namespace's, but loopback): the wire's count. */
function netTx(): number {
  let total = 0;
  for (const e of Deno.readDirSync("/sys/class/net")) {
    if (e.name === "lo") continue;
    try {
      total += Number(Deno.readTextFileSync(`/sys/class/net/${e.name}/statistics/tx_bytes`));
    } catch {
      // an interface that went away
    }
  }
  return total;
}

interface Row {
  config: string;
  /** Bytes this host's interfaces sent per step (every rank of the host together). */
  wirePerStep: number;
  /** Milliseconds of codec kernels per step (the slowest rank's median). */
  codecMs: number;
  params: number;
  grads: number;
  optimizer: number;
  buffers: number;
  total: number;
  bytesPerStep: number;
  stepMs: number;
  waitMs: number;
}

async function slowest(pg: ProcessGroup, ms: number): Promise<number> {
  const t = new Float64Array([ms]);
  await pg.allReduce(t, { op: "max" });
  return t[0];
}

const median = (a: number[]): number => [...a].sort((p, q) => p - q)[Math.floor(a.length / 2)];

async function runDdp(): Promise<Row> {
  const params = initialParams();
  await using ddp = await DistributedDataParallel.create(pg, params);
  const m = params.map((p) => new Float32Array(p.length)), v = params.map((p) => new Float32Array(p.length));
  const times: number[] = [], waits: number[] = [];
  let bytes = 0, tx = 0;
  for (let s = 0; s <= STEPS; s++) {
    await pg.barrier();
    if (s === 1) tx = netTx();
    const t = performance.now();
    for (let l = 0; l < L; l++) forward(l, params[2 * l], params[2 * l + 1]);
    lossGrad();
    for (let l = L - 1; l >= 0; l--) {
      ddp.grads[2 * l].fill(0);
      ddp.grads[2 * l + 1].fill(0);
      backward(l, params[2 * l], ddp.grads[2 * l], ddp.grads[2 * l + 1]);
      ddp.gradReady(2 * l + 1);
      ddp.gradReady(2 * l);
    }
    const report = await ddp.synchronize();
    params.forEach((p, i) => ok.adam(p, ddp.grads[i], { m: m[i], v: v[i], step: s + 1, lr: 1e-4 }));
    if (s > 0) {
      times.push(performance.now() - t);
      waits.push(report.waitMs);
      bytes = report.bytesSent;
    }
  }
  await pg.barrier();
  const wirePerStep = (netTx() - tx) / STEPS;
  return {
    config: "ddp",
    wirePerStep,
    codecMs: 0,
    params: 4 * PSI,
    grads: 4 * PSI,
    optimizer: 8 * PSI,
    buffers: 0,
    total: 16 * PSI,
    bytesPerStep: bytes,
    stepMs: await slowest(pg, median(times)),
    waitMs: await slowest(pg, median(waits)),
  };
}

function optionsOf(config: string): ZeroOptions {
  const [stage, ...extras] = config.split("+");
  const codec = extras.includes("sign")
    ? { codec: "sign" as const }
    : extras.includes("topk")
    ? { codec: "topk" as const, ratio: 0.01 }
    : undefined;
  return {
    stage: Number(stage) as 1 | 2 | 3,
    optimizer: { type: "adam", lr: 1e-4 },
    layers: Array.from({ length: L }, (_, l) => [2 * l, 2 * l + 1]),
    quantizeWeights: extras.includes("qwz") ? "int8" : undefined,
    quantizeGradients: extras.includes("qgz") ? "int8" : undefined,
    hierarchical: extras.includes("hpz"),
    compression: codec,
    prefetch: extras.includes("p0") ? 0 : 1,
  };
}

async function zeroStep(
  sdp: ShardedDataParallel,
): Promise<{ bytes: number; waitMs: number; codecMs: number }> {
  for (let l = 0; l < L; l++) {
    await sdp.gather(l);
    const [w, b] = sdp.params(l);
    forward(l, w, b);
    sdp.release(l);
  }
  lossGrad();
  for (let l = L - 1; l >= 0; l--) {
    await sdp.gather(l);
    const [gw, gb] = sdp.grads(l);
    backward(l, sdp.params(l)[0], gw, gb);
    sdp.gradReady(l);
    sdp.release(l);
  }
  const report = await sdp.step();
  return { bytes: report.bytesSent, waitMs: report.waitMs, codecMs: report.codecMs };
}

async function runZero(config: string): Promise<Row> {
  await using sdp = await ShardedDataParallel.create(pg, initialParams(), optionsOf(config));
  const times: number[] = [], waits: number[] = [], codec: number[] = [];
  let bytes = 0, tx = 0;
  for (let s = 0; s <= STEPS; s++) {
    await pg.barrier();
    if (s === 1) tx = netTx();
    const t = performance.now();
    const r = await zeroStep(sdp);
    if (s > 0) {
      times.push(performance.now() - t);
      waits.push(r.waitMs);
      codec.push(r.codecMs);
      bytes = r.bytes;
    }
  }
  await pg.barrier();
  const wirePerStep = (netTx() - tx) / STEPS;
  const memory = sdp.memory();
  return {
    config,
    wirePerStep,
    codecMs: await slowest(pg, median(codec)),
    ...memory,
    bytesPerStep: bytes,
    stepMs: await slowest(pg, median(times)),
    waitMs: await slowest(pg, median(waits)),
  };
}

/** Per step, the slowest rank's median of `STEPS` after a warm-up of `fn`. */
async function timed(fn: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let s = 0; s <= STEPS; s++) {
    await pg.barrier();
    const t = performance.now();
    await fn();
    if (s > 0) times.push(performance.now() - t);
  }
  return await slowest(pg, median(times));
}

/**
 * Stage 3 apart and together: the compute alone (every layer gathered first), the gathers alone (two
 * passes of gather and release), the communication alone (a whole step without the matrix products:
 * gathers, reduce-scatters, optimizer), and the step, with prefetch 1 and 0.
 */
async function overlap(): Promise<Record<string, number>> {
  await using sdp = await ShardedDataParallel.create(pg, initialParams(), optionsOf("3"));
  await using noPrefetch = await ShardedDataParallel.create(pg, initialParams(), optionsOf("3+p0"));
  const gw = new Float32Array(W * W), gb = new Float32Array(W);
  for (let l = 0; l < L; l++) await sdp.gather(l);
  const computeMs = await timed(() => {
    for (let l = 0; l < L; l++) forward(l, ...sdp.params(l) as [Float32Array, Float32Array]);
    lossGrad();
    for (let l = L - 1; l >= 0; l--) backward(l, sdp.params(l)[0], gw, gb);
    return Promise.resolve();
  });
  for (let l = 0; l < L; l++) sdp.release(l);
  const gathersMs = await timed(async () => {
    for (const l of [...Array(L).keys(), ...[...Array(L).keys()].reverse()]) {
      await sdp.gather(l);
      sdp.release(l);
    }
  });
  COMPUTE = false;
  const commMs = await timed(() => zeroStep(sdp));
  COMPUTE = true;
  const stepMs = await timed(() => zeroStep(sdp));
  const noPrefetchMs = await timed(() => zeroStep(noPrefetch));
  return { computeMs, gathersMs, commMs, stepMs, noPrefetchMs };
}

const rows: Row[] = [];
for (const config of flags.configs ? flags.configs.split(",") : []) {
  rows.push(config === "ddp" ? await runDdp() : await runZero(config));
  if (pg.rank === 0) console.error(`${pg.size} ranks, ${config}: ${rows.at(-1)?.stepMs.toFixed(1)} ms/step`);
}
const overlapRow = flags.overlap ? await overlap() : undefined;
if (pg.rank === 0) {
  console.log(
    `RESULT ${
      JSON.stringify({ size: pg.size, psi: PSI, width: W, layers: L, batch: B, rows, overlap: overlapRow })
    }`,
  );
}
