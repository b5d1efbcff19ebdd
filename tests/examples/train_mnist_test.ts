/**
 * The README's demo (`deno task demo`), one epoch: 4 ranks train with DistributedDataParallel, learn (test
 * accuracy above 85% after one epoch) and end with bit-identical weights; with ShardedDataParallel
 * (`--zero 1|2|3`, and ZeRO++'s options) they reach DDP's accuracy; an unknown hook is refused.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url);

async function demo(
  args: string[],
  launcher: string[] = [],
): Promise<{ code: number; out: string; err: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "cli/launch.ts",
      ...launcher,
      "--nproc-per-node",
      "4",
      "examples/train_mnist.ts",
      ...args,
    ],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  return {
    code: out.code,
    out: new TextDecoder().decode(out.stdout),
    err: new TextDecoder().decode(out.stderr),
  };
}

Deno.test("the demo trains on 4 ranks with DistributedDataParallel and ends with identical weights", async () => {
  const { code, out, err } = await demo(["--epochs", "1"]);
  assert.equal(code, 0, out + err);
  assert.match(out, /hook allreduce, buckets \[3,2\] 5\.0 KiB, \[1,0\] 392\.5 KiB/);
  const accuracy = Number(/test accuracy ([\d.]+)%/.exec(out)?.[1]);
  assert.ok(accuracy > 85, `accuracy ${accuracy}% after one epoch\n${out}`);
  assert.match(out, /weights after training: identical on all 4 ranks/);
});

Deno.test("the demo under ZeRO stages 2 and 3 (and ZeRO++) reaches DDP's accuracy, weights identical", async () => {
  const accuracy = (out: string): number => Number(/test accuracy ([\d.]+)%/.exec(out)?.[1]);
  const ddp = await demo(["--epochs", "1"]);
  for (const zero of [["--zero", "2"], ["--zero", "3"], ["--zero", "3", "--qwz", "--qgz", "--hpz"]]) {
    const { code, out, err } = await demo(["--epochs", "1", ...zero]);
    assert.equal(code, 0, out + err);
    assert.match(out, new RegExp(`ZeRO stage ${zero[1]}.*layers \\[0,1\\] shard 25120/100480`));
    assert.match(out, /weights after training: identical on all 4 ranks/);
    // Stages 2 and 3 change where the arithmetic runs, not what it is: within rounding of DDP (the
    // lossy int8 options within a point).
    const bound = zero.length > 2 ? 1 : 0.5;
    assert.ok(
      Math.abs(accuracy(out) - accuracy(ddp.out)) <= bound,
      `${zero.join(" ")}: ${accuracy(out)}%, DDP ${accuracy(ddp.out)}%`,
    );
  }
  const bad = await demo(["--zero", "4"]);
  assert.notEqual(bad.code, 0);
  assert.match(bad.err, /Unknown --zero: expected 1, 2 or 3 \(or 0 for DDP\), found 4/);
});

Deno.test("the demo with --fault-tolerant trains through a rank killed at a random step", async () => {
  const accuracy = (out: string): number => Number([...out.matchAll(/test accuracy ([\d.]+)%/g)].at(-1)?.[1]);
  const clean = await demo(["--epochs", "2"]);
  for (let trial = 0; trial < 2; trial++) {
    const step = 10 + Math.floor(Math.random() * 100); // of 124 (2 epochs of 62 steps)
    const { code, out, err } = await demo(
      ["--epochs", "2", "--fault-tolerant", "--kill-rank", "2", "--kill-step", String(step)],
      ["--fault-tolerant"],
    );
    assert.equal(code, 0, out + err);
    assert.match(err, /rank 2 was killed by SIGKILL; the other ranks go on \(--fault-tolerant\)/);
    assert.match(out, /weights after training: identical on all 3 ranks/);
    assert.match(out, /trained through a lost rank: 4 → 3 ranks/);
    // The survivors lose a quarter of the data from the kill on (and score on their 3 test shards).
    const gap = Math.abs(accuracy(out) - accuracy(clean.out));
    assert.ok(gap <= 1.5, `killed at step ${step}: ${accuracy(out)}%, clean ${accuracy(clean.out)}%`);
  }
});

Deno.test("the demo refuses an unknown hook, naming the ones there are", async () => {
  const { code, err } = await demo(["--hook", "zip"]);
  assert.notEqual(code, 0);
  assert.match(
    err,
    /Unknown --hook: expected one of allreduce, fp16, bf16, int8, 1bit, 1bit-noef, topk, topk-noef, powersgd, powersgd-noef, found zip/,
  );
});
