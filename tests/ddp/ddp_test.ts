/**
 * DistributedDataParallel on real ranks (threads over the in-process transport) and on a world of one:
 * bucket layout, exact averages whatever order the gradients come in, given gradient arrays, gradient
 * accumulation, unused parameters, float16 on the wire, mixed dtypes, overlap with the backward pass, and
 * ranks whose layouts disagree.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { init } from "../../backend/init.ts";
import { DistributedDataParallel } from "../../ddp/mod.ts";

const FIXTURE = new URL("./_fixtures/ddp_rank.ts", import.meta.url);
const run = (worldSize: number, scenario: string): Promise<Record<string, unknown>[]> =>
  spawnThreads(FIXTURE, { worldSize, args: { scenario }, timeoutMs: 30_000 }) as Promise<
    Record<string, unknown>[]
  >;

Deno.test("buckets hold parameters in reverse order, the first one small, none over the cap but a single large one", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  // 4-byte elements: 1 MiB = 262144 elements.
  const lengths = [300_000, 120_000, 100_000, 50_000, 200_000, 10];
  const params = lengths.map((n) => new Float32Array(n));
  await using ddp = await DistributedDataParallel.create(pg, params, { bucketMb: 1, firstBucketMb: 0.5 });
  assert.deepEqual(ddp.buckets.map((b) => b.params), [[5, 4], [3, 2, 1], [0]]);
  // 200 010 elements reach the first cap (131 072); 270 000 the second (262 144); the last stands alone.
  assert.deepEqual(ddp.buckets.map((b) => b.count), [200_010, 270_000, 300_000]);
  assert.deepEqual(ddp.buckets.map((b) => b.bytes), [800_040, 1_080_000, 1_200_000]);
  // The gradients are views into the buckets, in the bucket's order.
  ddp.grads[4][0] = 7;
  ddp.grads[5].fill(1);
  ddp.gradReady(5);
  ddp.gradReady(4);
  for (const i of [3, 2, 1, 0]) ddp.gradReady(i);
  const step = await ddp.synchronize();
  assert.equal(step.buckets.length, 3);
  assert.equal(ddp.grads[4][0], 7);
  assert.ok(step.buckets.every((b) => b.hook.wireDtype === "float32"));
});

Deno.test("bad parameters, gradients and sizes are refused naming what was expected", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  await assert.rejects(() => DistributedDataParallel.create(pg, []), /non-empty array of parameters/);
  await assert.rejects(
    () => DistributedDataParallel.create(pg, [new Uint16Array(4)]),
    /parameter 0: .*Uint16Array needs an explicit dtype/,
  );
  await assert.rejects(
    () => DistributedDataParallel.create(pg, [new Float32Array(4)], { grads: [new Float32Array(3)] }),
    /gradient 0 must be a Float32Array of 4 elements like its parameter, found a Float32Array of 3 elements/,
  );
  await assert.rejects(
    () => DistributedDataParallel.create(pg, [new Float32Array(4)], { bucketMb: 0 }),
    /Invalid bucketMb: expected a number of MiB > 0, found 0/,
  );
  await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(4)]);
  assert.throws(() => ddp.gradReady(1), /Cannot mark gradient 1 ready: expected an index in 0\.\.0/);
  ddp.gradReady(0);
  assert.throws(() => ddp.gradReady(0), /already is, this step/);
  await ddp.synchronize();
  await ddp.close();
  assert.throws(() => ddp.gradReady(0), /closed/);
});

for (const ranks of [2, 3, 4]) {
  Deno.test(`${ranks} ranks: parameters start as rank 0's, and every step's gradients are the exact average, in any order`, async () => {
    const results = await run(ranks, "average");
    for (const r of results) {
      assert.equal(r.broadcastOk, true);
      assert.deepEqual(r.wrong, []);
    }
    // Every rank laid out the same buckets and ran them all.
    const layout = JSON.stringify(results[0].buckets);
    for (const r of results) assert.equal(JSON.stringify(r.buckets), layout);
    assert.deepEqual((results[0].buckets as { params: number[] }[]).map((b) => b.params), [[4, 3], [2], [
      1,
      0,
    ]]);
  });
}

Deno.test("gradient arrays of the caller's own are copied in at gradReady and the averages back at synchronize", async () => {
  for (const r of await run(2, "given-grads")) assert.deepEqual(r, { same: true, wrong: 0 });
});

Deno.test("noSync() steps send nothing and leave each rank's own sum; the next step averages the accumulated sums", async () => {
  for (const r of await run(2, "no-sync")) {
    assert.deepEqual(r.quiet, [undefined, undefined]);
    assert.equal(r.local, r.localExpected);
    assert.equal(r.value, r.expected);
    assert.equal(r.communicated, true);
  }
});

Deno.test("a parameter without gradReady() fails synchronize naming it, or counts as zero with findUnusedParameters", async () => {
  for (const r of await run(2, "unused")) {
    assert.match(
      r.error as string,
      /^DistError: Cannot synchronize: parameter 1 had no gradReady\(\) this step; .*findUnusedParameters: true .*\[DDP_UNUSED\]$/,
    );
    assert.deepEqual(r.unused, [1]);
    assert.equal(r.zero, true);
    assert.equal(r.one, 1);
  }
});

Deno.test("float16 gradients are averaged in float16: 2 bytes per element on the wire", async () => {
  for (const r of await run(2, "half")) {
    assert.deepEqual(r.wire, ["float16"]);
    assert.deepEqual(r.bytes, [(r.counts as number[])[0] * 2]);
    assert.equal(r.wrong, 0);
  }
});

Deno.test("parameters of several dtypes go to buckets of one dtype each", async () => {
  for (const [rank, r] of (await run(2, "mixed")).entries()) {
    assert.deepEqual(r.buckets, [{ dtype: "float32", params: [3, 1] }, { dtype: "float64", params: [2, 0] }]);
    // Average of rank + i over ranks 0 and 1: i + 0.5.
    assert.deepEqual(r.values, [0.5, 1.5, 2.5, 3.5], `rank ${rank}`);
  }
});

Deno.test("the first bucket's all-reduce starts before the backward pass ends (by the communication thread's clock)", async () => {
  for (const r of await run(2, "overlap")) {
    const started = r.firstStarted as number;
    const end = r.backwardEnd as number;
    assert.ok(started < end, `first bucket started at ${started}, the backward pass ended at ${end}`);
  }
});

Deno.test("ranks whose buckets differ fail on every rank, one naming both calls", async () => {
  const results = await run(3, "mismatch");
  for (const r of results) {
    assert.notEqual(r.caught, "no error");
    assert.equal(r.dist, true, r.caught as string);
  }
  const detail = results.find((r) => r.mismatch);
  assert.ok(detail, results.map((r) => r.caught).join("\n"));
  assert.match(
    detail.caught as string,
    /Mismatched calls: rank \d called allReduce\(\d+ × float32.* but rank \d called allReduce\(\d+ × float32/,
  );
});

for (const ranks of [2, 3, 4]) {
  Deno.test(`${ranks} ranks: every hook through DDP, within its bound, error feedback carried, state restored from a checkpoint`, async () => {
    const results = await run(ranks, "hooks") as Record<string, {
      failures: string[];
      identity?: number;
      restored: boolean;
      codecs: (string | undefined)[];
      stateful: boolean;
    }>[];
    for (const r of results) {
      for (const [name, h] of Object.entries(r)) {
        assert.deepEqual(h.failures, [], `${name}: ${h.failures.join("; ")}`);
        assert.equal(h.restored, true, `${name}: the loaded state reproduces the next step`);
        if (["1bit", "topk", "powersgd"].includes(name)) {
          assert.ok(h.stateful, `${name} keeps state`);
          assert.ok((h.identity as number) < 1e-5, `${name}: Σ out + residuals off Σ avg by ${h.identity}`);
        }
        // float32 buckets are compressed with the hook's codec; the float16 bucket is not.
        const codec = { int8: "int8", "1bit": "sign", topk: "topk", powersgd: "powersgd" }[name];
        assert.ok(h.codecs.includes(codec), `${name}: ${h.codecs}`);
        assert.ok(h.codecs.includes(undefined), `${name}: the float16 bucket goes uncompressed`);
      }
    }
  });
}

Deno.test("ranks whose DDP hooks differ fail every rank, naming both calls", async () => {
  const results = await run(3, "hook-mismatch") as { caught: string; mismatch?: boolean }[];
  for (const r of results) assert.notEqual(r.caught, "no error");
  const detail = results.find((r) => r.mismatch);
  assert.ok(detail, results.map((r) => r.caught).join("\n"));
  assert.match(detail.caught, /codec sign/);
  assert.match(detail.caught, /codec int8/);
});

Deno.test("a hook's state from another hook, or for other buckets, is refused naming it", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  const { signCompressHook, topKHook } = await import("../../ddp/mod.ts");
  const sign = signCompressHook();
  await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(100)], { hook: sign });
  ddp.gradReady(0);
  await ddp.synchronize();
  assert.throws(
    () => topKHook().load(sign.state()),
    /Cannot load the topk hook's state: expected the state\(\) of a topk hook, found the state of "1bit"/,
  );
  const other = signCompressHook();
  other.load({
    hook: "1bit",
    buckets: [{ index: 0, residual: new Float32Array(7), serverResidual: new Float32Array(7) }],
  });
  await using ddp2 = await DistributedDataParallel.create(pg, [new Float32Array(100)], { hook: other });
  ddp2.gradReady(0);
  await assert.rejects(
    () => ddp2.synchronize(),
    /The 1bit hook's residual of bucket 0 has 7 elements, expected 100/,
  );
});

Deno.test("the hooks load no kernels on the training thread: ddp/ reaches no wasm/ module", async () => {
  // The codecs run in the communication thread's engine; what the training thread imports of ddp/ is the
  // process group's interface alone (deno info lists every module the import graph reaches).
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", new URL("../../ddp/mod.ts", import.meta.url).pathname],
    stdout: "piped",
  }).output();
  assert.equal(out.code, 0);
  const modules = (JSON.parse(new TextDecoder().decode(out.stdout)) as { modules: { specifier: string }[] })
    .modules
    .map((m) => m.specifier);
  assert.ok(modules.some((m) => m.endsWith("/ddp/hooks.ts")), modules.join("\n"));
  assert.deepEqual(modules.filter((m) => /\/(wasm|collectives)\//.test(m)), []);
});
