/**
 * The README's demo (`deno task demo`), one epoch: 4 ranks train with DistributedDataParallel, learn (test
 * accuracy above 85% after one epoch) and end with bit-identical weights; an unknown hook is refused.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url);

async function demo(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "cli/launch.ts", "--nproc-per-node", "4", "examples/train_mnist.ts", ...args],
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

Deno.test("the demo refuses an unknown hook, naming the ones there are", async () => {
  const { code, err } = await demo(["--hook", "zip"]);
  assert.notEqual(code, 0);
  assert.match(
    err,
    /Unknown --hook: expected one of allreduce, fp16, bf16, int8, 1bit, 1bit-noef, topk, topk-noef, powersgd, powersgd-noef, found zip/,
  );
});
