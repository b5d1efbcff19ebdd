/**
 * `@dcomm/dcomm/tfjs` on a world of one: one tfjs in the process (the user's), the optimizer's contract
 * (updates bucket by bucket, steps that must be awaited, errors that name what is wrong, state saved and
 * restored, the learning rate, no tensors leaked, a wrapped optimizer that keeps its gradients caught), the
 * wasm backend, and the data shards.
 */
import assert from "node:assert/strict";
import * as tf from "npm:@tensorflow/tfjs@4.22.0";
import * as tfCore from "npm:@tensorflow/tfjs-core@4.22.0";
import * as ours from "../../tfjs/_tf.ts";
import { init } from "../../backend/init.ts";
import type { ProcessGroup } from "../../backend/process_group.ts";
import { allReduceHook, type CommHook, type HookReport } from "../../ddp/mod.ts";
import { DistError } from "../../core/errors.ts";
import { broadcastVariables, DistributedOptimizer, shard, shardDataset } from "../../tfjs/mod.ts";

tf.enableProdMode();
await tf.setBackend("cpu");

async function world(): Promise<ProcessGroup> {
  return await init({ rank: 0, worldSize: 1, env: {} });
}

function weights(vars: readonly tf.Variable[]): number[] {
  return vars.flatMap((v) => [...v.dataSync()]);
}

Deno.test("one tfjs in the process: dcomm's tfjs is the user's module (classes, engine, kernels), and takes the user's tensors", async () => {
  assert.equal(ours.Tensor, tf.Tensor);
  assert.equal(ours.Optimizer, tf.Optimizer);
  assert.equal(ours.engine(), tf.engine());
  assert.equal(ours.Callback, tf.Callback);
  // tfjs-core named on its own resolves to the same copy as the one inside tfjs.
  assert.equal(tfCore.Tensor, tf.Tensor);
  assert.equal(tfCore.engine(), tf.engine());
  await using pg = await world();
  const w = tf.variable(tf.tensor1d([1, 2]), true, "one-tfjs/w");
  await using dopt = new DistributedOptimizer(pg, tf.train.sgd(0.5));
  const before = tf.memory().numTensors;
  for (let i = 0; i < 3; i++) {
    dopt.applyGradients({ [w.name]: tf.tensor1d([1, 1]) });
    await dopt.synchronize();
  }
  assert.deepEqual([...w.dataSync()], [-0.5, 0.5]);
  // The three gradients given are the caller's; the optimizer's own tensors are all released.
  assert.equal(tf.memory().numTensors, before + 3);
});

Deno.test("importing @dcomm/dcomm (and ./ddp) never loads tfjs; @dcomm/dcomm/tfjs does", async () => {
  const modules = async (entry: string): Promise<string[]> => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", new URL(entry, import.meta.url).pathname],
      stdout: "piped",
    }).output();
    assert.equal(out.code, 0);
    return (JSON.parse(new TextDecoder().decode(out.stdout)) as { modules: { specifier: string }[] }).modules
      .map((m) => m.specifier);
  };
  for (const entry of ["../../mod.ts", "../../ddp/mod.ts"]) {
    assert.deepEqual((await modules(entry)).filter((m) => /tensorflow/.test(m)), [], entry);
  }
  assert.ok((await modules("../../tfjs/mod.ts")).some((m) => m.includes("@tensorflow/tfjs@4.22.0")));
});

Deno.test("the model.fit() and minimize() paths: a DistributedOptimizer is a tf.Optimizer and trains like the one it wraps", async () => {
  await using pg = await world();
  const make = (seed: number): tf.Sequential =>
    tf.sequential({
      layers: [
        tf.layers.dense({
          units: 5,
          inputShape: [3],
          kernelInitializer: tf.initializers.glorotUniform({ seed }),
        }),
        tf.layers.dense({ units: 1, kernelInitializer: tf.initializers.glorotUniform({ seed: seed + 1 }) }),
      ],
    });
  const x = tf.randomNormal([32, 3], 0, 1, "float32", 3), y = tf.randomNormal([32, 1], 0, 1, "float32", 4);
  const plain = make(7), distributed = make(7);
  plain.compile({ optimizer: tf.train.adam(0.01), loss: "meanSquaredError" });
  const dopt = new DistributedOptimizer(pg, tf.train.adam(0.01), {
    firstBucketMb: 0.00001,
    bucketMb: 0.00001,
  });
  assert.ok(dopt instanceof tf.Optimizer);
  assert.ok(!(tf.train.adam(0.01) instanceof DistributedOptimizer));
  distributed.compile({ optimizer: dopt, loss: "meanSquaredError" });
  await plain.fit(x, y, { epochs: 2, batchSize: 8, shuffle: false, verbose: 0 });
  await distributed.fit(x, y, { epochs: 2, batchSize: 8, shuffle: false, verbose: 0 });
  assert.deepEqual(
    distributed.getWeights().map((t) => [...t.dataSync()]),
    plain.getWeights().map((t) => [...t.dataSync()]),
  );
  assert.equal(dopt.iterations, 8);
  // 10-byte buckets: the output bias (4 bytes) shares the first with the output kernel; the others alone.
  assert.deepEqual(dopt.buckets.map((b) => b.params), [[3, 2], [1], [0]]);
  assert.equal(dopt.getClassName(), "Adam"); // what model.save() records: the wrapped optimizer
  assert.deepEqual(dopt.getConfig(), tf.train.adam(0.01).getConfig());
  const step = dopt.lastStep;
  assert.ok(
    step && step.overlapped && step.communication.communicated && step.communication.buckets.length === 3,
  );
  await dopt.close();
});

Deno.test("with overlap, a bucket's update lands while a later bucket is still communicating; without, after all", async () => {
  for (const overlap of [true, false]) {
    await using pg = await world();
    const a = tf.variable(tf.zeros([4]), true, `overlap-${overlap}/a`);
    const b = tf.variable(tf.zeros([4]), true, `overlap-${overlap}/b`);
    let seenDuringLast: number | undefined;
    const slowLast: CommHook = {
      ...allReduceHook(),
      async run(group, bucket): Promise<HookReport> {
        const report = await allReduceHook().run(group, bucket);
        if (bucket.index === 1) {
          await new Promise((r) => setTimeout(r, 50)); // the last bucket still "on the wire"
          seenDuringLast = b.dataSync()[0]; // b is in bucket 0 (the last variable goes first)
        }
        return report;
      },
    };
    await using dopt = new DistributedOptimizer(pg, tf.train.sgd(1), {
      hook: slowLast,
      overlap,
      bucketMb: 0.00001,
      firstBucketMb: 0.00001,
    });
    await dopt.build([a, b]);
    assert.deepEqual(dopt.buckets.map((x) => x.params), [[1], [0]]);
    dopt.applyGradients({ [a.name]: tf.ones([4]), [b.name]: tf.ones([4]) });
    await dopt.synchronize();
    assert.equal(seenDuringLast, overlap ? -1 : 0, `overlap ${overlap}`);
    assert.deepEqual(weights([a, b]), new Array(8).fill(-1));
  }
});

Deno.test("a step must be awaited before the next; a failed step fails the next call with its error", async () => {
  await using pg = await world();
  const w = tf.variable(tf.zeros([2]), true, "await/w");
  await using dopt = new DistributedOptimizer(pg, tf.train.sgd(0.1));
  dopt.applyGradients({ [w.name]: tf.ones([2]) });
  assert.throws(
    () => dopt.applyGradients({ [w.name]: tf.ones([2]) }),
    /Cannot apply gradients: the previous step's update is still being applied; await optimizer\.synchronize\(\)/,
  );
  await dopt.synchronize();
  assert.equal(await dopt.synchronize(), undefined); // nothing in flight
  const failing: CommHook = {
    ...allReduceHook(),
    run: () => Promise.reject(new DistError("the wire broke")),
  };
  await using broken = new DistributedOptimizer(pg, tf.train.sgd(0.1), { hook: failing });
  broken.applyGradients({ [w.name]: tf.ones([2]) });
  await assert.rejects(broken.synchronize(), /the wire broke/);
  assert.throws(() => broken.applyGradients({ [w.name]: tf.ones([2]) }), /the wire broke/);
});

Deno.test("bad optimizers, options and gradients are refused naming what was expected", async () => {
  await using pg = await world();
  assert.throws(() => new DistributedOptimizer(pg, {} as tf.Optimizer), /expected a tf\.Optimizer/);
  await using dopt = new DistributedOptimizer(pg, tf.train.sgd(0.1));
  assert.throws(
    () => new DistributedOptimizer(pg, dopt),
    /of a DistributedOptimizer: wrap the optimizer once/,
  );
  assert.throws(
    () => new DistributedOptimizer(pg, tf.train.sgd(0.1), { backwardPassesPerStep: 0 }),
    /Invalid backwardPassesPerStep: expected an integer >= 1, found 0/,
  );
  assert.throws(() => new DistributedOptimizer(pg, tf.train.sgd(0.1), { bucketMb: -1 }), /Invalid bucketMb/);
  assert.throws(
    () => new DistributedOptimizer(pg, tf.train.sgd(0.1), { unusedGradients: "drop" as "zero" }),
    /Invalid unusedGradients: expected "zero" or "skip", found drop/,
  );
  await assert.rejects(dopt.setWeights([]), /before its layout exists: call build\(model\) first/);
  const w = tf.variable(tf.zeros([2]), true, "bad/w");
  const other = tf.variable(tf.zeros([3]), true, "bad/other");
  await dopt.build([w]);
  assert.throws(
    () => dopt.applyGradients({ [other.name]: tf.ones([3]) }),
    /Cannot apply a gradient for bad\/other: it is not among the 1 variables this optimizer was laid out for \(bad\/w\)/,
  );
  assert.throws(
    () => dopt.applyGradients({ [w.name]: tf.ones([3]) }),
    /Cannot apply the gradient of bad\/w: expected 2 elements \(shape \[2\]\), found 3/,
  );
  assert.throws(
    () => dopt.applyGradients({ [w.name]: tf.ones([2], "int32") }),
    /expected a float32 tf\.Tensor/,
  );
  await dopt.build([other]); // a second build does nothing
  assert.deepEqual(dopt.variableNames, ["bad/w"]);
  await using fresh = new DistributedOptimizer(pg, tf.train.sgd(0.1));
  await assert.rejects(
    fresh.build([tf.variable(tf.zeros([2]), false)]),
    /must be a trainable float32 tf\.Variable/,
  );
  await dopt.close();
  assert.throws(() => dopt.applyGradients({ [w.name]: tf.ones([2]) }), /this DistributedOptimizer is closed/);
});

Deno.test("getWeights()/setWeights(): the state of one optimizer over every variable, restored into a new one", async () => {
  await using pg = await world();
  const shapes = [[3, 2], [2], [2, 1], [1]];
  const vars = shapes.map((s, i) => tf.variable(tf.fill(s, 0.25 * (i + 1)), true, `state/v${i}`));
  const grad = (s: number) =>
    Object.fromEntries(vars.map((v, i) => [v.name, tf.fill(shapes[i], (s + i) / 8)]));
  await using dopt = new DistributedOptimizer(pg, tf.train.rmsprop(0.01, 0.9, 0.5, 1e-7, true), {
    firstBucketMb: 0.00001,
    bucketMb: 0.00002,
  });
  for (let s = 0; s < 2; s++) {
    dopt.applyGradients(grad(s));
    await dopt.synchronize();
  }
  assert.ok(dopt.buckets.length > 1);
  const saved = await dopt.getWeights();
  // rms, momentum and mean gradients of each of 4 variables, after the count.
  assert.deepEqual(saved.map((w) => w.name), [
    "iter",
    ...["rms", "momentum", "mg"].flatMap((slot) => vars.map((v) => `${v.name}/${slot}`)),
  ]);
  const copies = saved.map((w) => ({ name: w.name, tensor: w.tensor.clone() }));
  const snapshot = vars.map((v) => v.clone());
  dopt.applyGradients(grad(2));
  await dopt.synchronize();
  const next = weights(vars);
  // A new optimizer over the same variables, from the saved state and weights, takes the same step.
  vars.forEach((v, i) => v.assign(snapshot[i]));
  await using resumed = new DistributedOptimizer(pg, tf.train.rmsprop(0.01, 0.9, 0.5, 1e-7, true), {
    firstBucketMb: 0.00001,
    bucketMb: 0.00002,
  });
  await resumed.build(vars);
  await resumed.setWeights(copies);
  assert.equal(resumed.iterations, 2);
  resumed.applyGradients(grad(2));
  await resumed.synchronize();
  assert.deepEqual(weights(vars), next);
});

Deno.test("the learning rate is every copy's: setting it changes the next step", async () => {
  await using pg = await world();
  const a = tf.variable(tf.zeros([2]), true, "lr/a"), b = tf.variable(tf.zeros([2]), true, "lr/b");
  for (const make of [() => tf.train.sgd(0.5), () => tf.train.adam(0.5)]) {
    await using dopt = new DistributedOptimizer(pg, make(), { firstBucketMb: 0.000001, bucketMb: 0.000001 });
    assert.equal(dopt.learningRate, 0.5);
    dopt.learningRate = 0.25;
    assert.equal(dopt.getConfig().learningRate, 0.25);
    a.assign(tf.zeros([2]));
    b.assign(tf.zeros([2]));
    dopt.applyGradients({ [a.name]: tf.ones([2]), [b.name]: tf.ones([2]) });
    await dopt.synchronize();
    // SGD: -lr × 1; Adam's first step: -lr × m̂/(√v̂ + ε) = -lr.
    for (const v of weights([a, b])) assert.ok(Math.abs(v + 0.25) < 1e-5, `${dopt.getClassName()}: ${v}`);
  }
  assert.throws(() => {
    new DistributedOptimizer(pg, tf.train.sgd(0.1)).learningRate = Number.NaN;
  }, /Invalid learning rate/);
});

/** An optimizer tfjs cannot copy (its fromConfig refuses), which keeps the last gradient it was given. */
class Keeping extends tf.Optimizer {
  static override fromConfig<T extends tf.serialization.Serializable>(): T {
    throw new Error("Keeping optimizers are not made from a config");
  }
  kept: tf.Tensor | undefined;
  override applyGradients(grads: tf.NamedTensorMap | { name: string; tensor: tf.Tensor }[]): void {
    const list = Array.isArray(grads)
      ? grads
      : Object.entries(grads).map(([name, tensor]) => ({ name, tensor }));
    for (const { name, tensor } of list) {
      tf.engine().registeredVariables[name].assign(tf.sub(tf.engine().registeredVariables[name], tensor));
      this.kept?.dispose();
      this.kept = tf.keep(tensor.clone());
    }
    this.incrementIterations();
  }
  override getConfig(): tf.serialization.ConfigDict {
    return {};
  }
}

Deno.test("an optimizer that cannot be copied is used itself, once every bucket is in; one that keeps its gradients is caught", async () => {
  await using pg = await world();
  const w = tf.variable(tf.zeros([2]), true, "keeping/w");
  const keeping = new Keeping();
  await using dopt = new DistributedOptimizer(pg, keeping);
  assert.equal(dopt.overlapping, false);
  dopt.applyGradients({ [w.name]: tf.ones([2]) });
  // The gradient it kept is a view of the bucket, which the next step overwrites: refused, by name.
  await assert.rejects(
    dopt.synchronize(),
    /optimizer kept the gradient tensor of keeping\/w after applyGradients\(\); DistributedOptimizer reuses that memory/,
  );
});

Deno.test("broadcastVariables of variables and of an optimizer's state on a world of one", async () => {
  await using pg = await world();
  const v = tf.variable(tf.tensor1d([1, 2, 3]), true, "bcast/v");
  const i = tf.variable(tf.tensor1d([4, 5], "int32"), false, "bcast/i");
  await broadcastVariables(pg, [v, i]);
  assert.deepEqual([...v.dataSync()], [1, 2, 3]);
  assert.deepEqual([...i.dataSync()], [4, 5]);
  const adam = tf.train.adam(0.1);
  adam.applyGradients([{ name: v.name, tensor: tf.ones([3]) }] as never);
  await broadcastVariables(pg, adam);
  assert.equal(adam.iterations, 1);
  await assert.rejects(
    broadcastVariables(pg, [v], { root: 1 }),
    /Invalid root: expected a rank in 0\.\.0, found 1/,
  );
  await assert.rejects(
    broadcastVariables(pg, {} as never),
    /expected a tf\.layers model, a list of variables or an optimizer/,
  );
});

Deno.test("the wasm backend: the same training as the plain optimizer's (the averages copied into wasm memory)", async () => {
  await import("npm:@tensorflow/tfjs-backend-wasm@4.22.0");
  assert.ok(await tf.setBackend("wasm"));
  try {
    await using pg = await world();
    const results: number[][] = [];
    for (const distributed of [false, true]) {
      const w = tf.variable(tf.tensor2d([[1, -1], [0.5, 2]]), true, `wasm-${distributed}/w`);
      const x = tf.tensor2d([[1, 2], [3, 4], [5, 6]]);
      const loss = () => x.matMul(w).square().mean() as tf.Scalar;
      const opt = distributed ? new DistributedOptimizer(pg, tf.train.adam(0.1)) : tf.train.adam(0.1);
      for (let s = 0; s < 3; s++) {
        opt.minimize(loss, false, [w]);
        if (opt instanceof DistributedOptimizer) await opt.synchronize();
      }
      results.push([...w.dataSync()]);
      if (opt instanceof DistributedOptimizer) await opt.close();
    }
    assert.equal(tf.getBackend(), "wasm");
    assert.deepEqual(results[1], results[0]);
  } finally {
    await tf.setBackend("cpu");
  }
});

Deno.test("shard(): disjoint parts of equal size, the same for a seed, strided so ranks' batches make one", () => {
  const size = 4, n = 103;
  const parts = Array.from({ length: size }, (_, rank) => [...shard(n, { rank, size }, { seed: 9 })]);
  assert.ok(parts.every((p) => p.length === 25));
  assert.equal(new Set(parts.flat()).size, 100);
  assert.deepEqual(
    parts,
    Array.from({ length: size }, (_, rank) => [...shard(n, { rank, size }, { seed: 9 })]),
  );
  assert.notDeepEqual(parts[0], [...shard(n, { rank: 0, size }, { seed: 10 })]);
  // Unshuffled: rank r has r, r + size, ...; batch k of every rank together is samples [k·b·size, (k+1)·b·size).
  const plain = Array.from({ length: size }, (_, rank) => [...shard(16, { rank, size })]);
  assert.deepEqual(plain[1], [1, 5, 9, 13]);
  assert.deepEqual(plain.flatMap((p) => p.slice(0, 2)).sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7]);
  // Padding instead of dropping: ceil(n / size) each, the short parts taking samples again from the start.
  const padded = Array.from(
    { length: 3 },
    (_, rank) => [...shard(7, { rank, size: 3 }, { dropRemainder: false })],
  );
  assert.deepEqual(padded, [[0, 3, 6], [1, 4, 0], [2, 5, 1]]);
  assert.throws(() => shard(3, { rank: 0, size: 4 }), /fewer samples than ranks/);
  assert.throws(() => shard(10, { rank: 4, size: 4 }), /expected a rank in 0\.\.size-1/);
});

Deno.test("shardDataset(): every size-th element from the rank's, complete rounds only, the others disposed", async () => {
  const before = tf.memory().numTensors;
  const parts = await Promise.all(
    [0, 1, 2].map((rank) =>
      shardDataset(tf.data.array([0, 1, 2, 3, 4, 5, 6, 7]).map((v) => tf.scalar(v as number)), {
        rank,
        size: 3,
      })
        .toArray()
    ),
  );
  assert.deepEqual(parts.map((p) => p.map((t) => t.dataSync()[0])), [[0, 3], [1, 4], [2, 5]]);
  tf.dispose(parts.flat());
  assert.equal(tf.memory().numTensors, before);
});
