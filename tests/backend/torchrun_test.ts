/**
 * dcomm under the real torchrun (torch 2.13's elastic agent), with nothing set by hand: the ranks join
 * the store torchrun's agent serves (`TORCHELASTIC_USE_AGENT_STORE=True`) as torch-protocol clients, under
 * a prefix per attempt; `--standalone`; `--max-restarts` (a rank that fails on attempt 0 is restarted
 * with the others and attempt 1 completes); the failing rank's error in torchrun's summary (through
 * `TORCHELASTIC_ERROR_FILE`); the demo's weights the same as under dcomm's launcher; and two nodes with
 * `--rdzv-backend c10d --rdzv-endpoint` on the emulated hosts of `bench/cluster.ts` (root only).
 *
 * @module
 */
import assert from "node:assert/strict";
import { clusterUnavailable, createCluster } from "../../bench/cluster.ts";
import { checkResults, collectiveResults, COLLECTIVES_FIXTURE } from "../_util/collective_results.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { whyNoTorch } from "../_util/torch.ts";

const RANK_FIXTURE = new URL("./_fixtures/torchrun_rank.ts", import.meta.url).pathname;
const ROOT = new URL("../../", import.meta.url).pathname;
const DENO = Deno.execPath();

const missing = whyNoTorch() ??
  (hasCommand("torchrun") ? undefined : "torchrun not on PATH (pip install torch)");
const gate = { missing };

/** torchrun's environment: ours without any launcher's rank variables (this may run under one). */
function cleanEnv(): Record<string, string> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (/^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT)$/.test(name)) {
      delete env[name];
    }
    if (/^(DCOMM_STORE|DCOMM_RUN_ID|DCOMM_RESTART|TORCHELASTIC_|PET_|SLURM_|PMI_)/.test(name)) {
      delete env[name];
    }
  }
  return { ...env, NO_COLOR: "1" };
}

interface Run {
  code: number;
  out: string;
}

async function run(cmd: string, args: string[], timeoutMs = 180_000): Promise<Run> {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: ROOT,
    env: cleanEnv(),
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  return { code: out.code, out: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr) };
}

function torchrun(flags: string[], script: string[]): Promise<Run> {
  return run("torchrun", [...flags, "--no-python", DENO, "run", "-A", ...script]);
}

interface RankResult {
  rank: number;
  size: number;
  attempt: number;
  sum: number;
}

function rankResults(out: string): RankResult[] {
  return [...out.matchAll(/RESULT (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as RankResult).sort((a, b) =>
    a.rank - b.rank
  );
}

gatedTest("torchrun --nproc-per-node 2 runs every collective with nothing set by hand", gate, async () => {
  const { code, out } = await torchrun(["--nproc-per-node", "2"], [COLLECTIVES_FIXTURE]);
  assert.equal(code, 0, out.slice(-3000));
  checkResults(collectiveResults(out), 2);
});

gatedTest("torchrun --standalone --nproc-per-node 3 forms one world", gate, async () => {
  const { code, out } = await torchrun(["--standalone", "--nproc-per-node", "3"], [RANK_FIXTURE]);
  assert.equal(code, 0, out.slice(-3000));
  assert.deepEqual(rankResults(out), [0, 1, 2].map((rank) => ({ rank, size: 3, attempt: 0, sum: 6 })));
});

gatedTest(
  "torchrun --max-restarts 1: a rank that fails on attempt 0 is restarted and attempt 1 completes",
  gate,
  async () => {
    const { code, out } = await torchrun(["--nproc-per-node", "2", "--max-restarts", "1"], [
      RANK_FIXTURE,
      "crash-once",
    ]);
    assert.equal(code, 0, out.slice(-3000));
    assert.match(out, /deliberate failure of rank 1 on attempt 0/);
    assert.deepEqual(rankResults(out), [0, 1].map((rank) => ({ rank, size: 2, attempt: 1, sum: 3 })));
  },
);

gatedTest(
  "a failing rank's error reaches torchrun's summary through TORCHELASTIC_ERROR_FILE",
  gate,
  async () => {
    const { code, out } = await torchrun(["--nproc-per-node", "2"], [RANK_FIXTURE, "fail"]);
    assert.notEqual(code, 0);
    const root = out.slice(out.indexOf("Root Cause"));
    assert.match(root, /rank\s+: 1 \(local_rank: 1\)/, out.slice(-3000));
    assert.match(root, /error_file: \/\S+\/attempt_0\/1\/error\.json/);
    assert.doesNotMatch(root, /error_file: <N\/A>/);
    assert.match(root, /traceback : Error: deliberate failure of rank 1 on attempt 0/);
  },
);

gatedTest(
  "examples/train_mnist.ts under torchrun ends with the weights it has under dcomm's launcher",
  gate,
  async () => {
    const script = ["examples/train_mnist.ts", "--epochs", "1"];
    const checksum = (r: Run): string => {
      assert.equal(r.code, 0, r.out.slice(-3000));
      const m = /weights after training: identical on all 2 ranks \(checksum ([0-9a-f]+)\)/.exec(r.out);
      assert.ok(m, r.out.slice(-3000));
      return m[1];
    };
    const underTorchrun = checksum(await torchrun(["--nproc-per-node", "2"], script));
    const underDcomm = checksum(
      await run(DENO, ["run", "-A", "cli/launch.ts", "--nproc-per-node", "2", ...script]),
    );
    assert.equal(underTorchrun, underDcomm);
  },
);

const clusterMissing = missing ?? await clusterUnavailable();

gatedTest(
  "torchrun --nnodes 2 --rdzv-backend c10d on two emulated hosts runs every collective",
  { missing: clusterMissing },
  async () => {
    const cluster = await createCluster({ hosts: 2, rate: "10gbit", delay: "50us" });
    try {
      // The namespaces share this machine's hostname, so each agent is told its own address
      // (--local-addr) and which one hosts the rendezvous store (is_host), which torchrun would otherwise
      // find by comparing the endpoint with its hostname.
      const runs = await Promise.all(cluster.namespaces.map((ns, node) =>
        run("ip", [
          "netns",
          "exec",
          ns,
          "torchrun",
          "--nnodes",
          "2",
          "--node-rank",
          String(node),
          "--nproc-per-node",
          "2",
          "--rdzv-backend",
          "c10d",
          "--rdzv-endpoint",
          `${cluster.addresses[0]}:29400`,
          "--rdzv-id",
          "dcomm-test",
          "--rdzv-conf",
          `is_host=${node === 0}`,
          "--local-addr",
          cluster.addresses[node],
          "--no-python",
          DENO,
          "run",
          "-A",
          COLLECTIVES_FIXTURE,
        ])
      ));
      for (const r of runs) assert.equal(r.code, 0, r.out.slice(-3000));
      checkResults(collectiveResults(runs.map((r) => r.out).join("\n")), 4);
    } finally {
      await cluster.destroy();
    }
  },
);

gatedTest(
  "dcomm's launcher --store-protocol torch serves torch's store: torch.distributed and dcomm ranks join it",
  gate,
  async () => {
    const launch = ["run", "-A", "cli/launch.ts", "--store-protocol", "torch", "--nproc-per-node", "2"];
    // torch's own init_process_group (env://, gloo) finds the launcher's store as it finds torchrun's agent's.
    const python = await run(DENO, [
      ...launch,
      "--no-python",
      "python3",
      "tests/backend/_fixtures/torch_gloo_rank.py",
    ]);
    assert.equal(python.code, 0, python.out.slice(-3000));
    assert.deepEqual(
      [...python.out.matchAll(/RESULT (\{.*\})$/gm)].map((m) => JSON.parse(m[1])).sort((a, b) =>
        a.rank - b.rank
      ),
      [{ rank: 0, size: 2, sum: 3 }, { rank: 1, size: 2, sum: 3 }],
    );
    const deno = await run(DENO, [...launch, RANK_FIXTURE]);
    assert.equal(deno.code, 0, deno.out.slice(-3000));
    assert.deepEqual(rankResults(deno.out), [0, 1].map((rank) => ({ rank, size: 2, attempt: 0, sum: 3 })));
  },
);
