/**
 * The tfjs demo (`deno task demo:tfjs`, `examples/train_tfjs.ts`), shortened: 2 ranks under dcomm's launcher
 * fit the CNN with the callbacks, learn, and end with bit-identical weights; the same under the real
 * torchrun (torch's elastic agent serving the store); an unknown hook is refused.
 */
import assert from "node:assert/strict";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { whyNoTorch } from "../_util/torch.ts";

const ROOT = new URL("../../", import.meta.url);

async function demo(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "cli/launch.ts", "--nproc-per-node", "2", "examples/train_tfjs.ts", ...args],
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

Deno.test("the tfjs demo trains on 2 ranks with model.fit and the callbacks and ends with identical weights", async () => {
  const { code, out, err } = await demo([
    "--epochs",
    "1",
    "--train",
    "960",
    "--lr",
    "0.005",
    "--warmup-epochs",
    "0.5",
  ]);
  assert.equal(code, 0, out + err);
  assert.match(out, /2 CPU ranks, tf\.layers CNN \(27618 parameters\), 960 training digits/);
  const accuracy = Number(/test accuracy ([\d.]+)%/.exec(out)?.[1]);
  assert.ok(accuracy > 50, `test accuracy ${accuracy}% after one epoch\n${out}`);
  // Warmed up to lr × 2 halfway through the epoch.
  assert.match(out, /lr 0\.0100 /);
  assert.match(
    out,
    /buckets: \[7,6,5,4\] 102\.8 KiB, \[3,2,1,0\] 5\.1 KiB; updates applied bucket by bucket: true/,
  );
  assert.match(out, /weights after training: identical on all 2 ranks/);
});

Deno.test("the tfjs demo refuses an unknown hook, naming the ones there are", async () => {
  const { code, err } = await demo(["--hook", "zip"]);
  assert.notEqual(code, 0);
  assert.match(
    err,
    /Unknown --hook: expected one of allreduce, fp16, bf16, int8, 1bit, topk, powersgd, found zip/,
  );
});

const torchrunMissing = whyNoTorch() ??
  (hasCommand("torchrun") ? undefined : "torchrun not on PATH (pip install torch)");

gatedTest(
  "the tfjs demo trains on 2 ranks under the real torchrun",
  { missing: torchrunMissing },
  async () => {
    const env = Deno.env.toObject();
    for (const name of Object.keys(env)) {
      if (/^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT)$/.test(name)) {
        delete env[name];
      }
      if (/^(DCOMM_|TORCHELASTIC_|PET_|SLURM_|PMI_)/.test(name)) delete env[name];
    }
    const out = await new Deno.Command("torchrun", {
      args: [
        ...["--standalone", "--nproc-per-node", "2", "--no-python", Deno.execPath(), "run", "-A"],
        ...[
          "examples/train_tfjs.ts",
          "--epochs",
          "1",
          "--train",
          "960",
          "--lr",
          "0.005",
          "--warmup-epochs",
          "0.5",
        ],
      ],
      cwd: ROOT,
      env: { ...env, NO_COLOR: "1" },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text.slice(-3000));
    assert.match(text, /2 CPU ranks, tf\.layers CNN \(27618 parameters\), 960 training digits/);
    const accuracy = Number(/test accuracy ([\d.]+)%/.exec(text)?.[1]);
    assert.ok(accuracy > 50, `test accuracy ${accuracy}% after one epoch\n${text}`);
    assert.match(text, /weights after training: identical on all 2 ranks/);
  },
);
