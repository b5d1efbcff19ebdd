/**
 * `examples/k8s/pytorchjob.yaml` against the launcher. There is no Kubernetes cluster here: the yaml is read
 * as text, just enough (regexes over its known shape, no yaml parser), to check that its command, flags and
 * variables are the ones the launcher reads; then its script and command run on two emulated pods (two
 * launchers on 127.0.0.1 with the variables Kubeflow's training operator sets in each pod).
 */
import assert from "node:assert/strict";
import { parseLaunchArgs } from "../../cli/launch.ts";
import { STORE_SECRET_ENV } from "../../store/secret.ts";
import { checkResults, collectiveResults, COLLECTIVES_FIXTURE } from "../_util/collective_results.ts";

const ROOT = new URL("../../", import.meta.url);
const YAML = Deno.readTextFileSync(new URL("examples/k8s/pytorchjob.yaml", ROOT));
const JOB = "dcomm-allreduce";

/** One replica type's block under `pytorchReplicaSpecs` (`Master`, `Worker`), as text. */
function replica(type: "Master" | "Worker"): string {
  const m = new RegExp(`^ {4}${type}:\\n((?: {5,}.*\\n|\\s*\\n)*)`, "m").exec(YAML);
  assert.ok(m, `expected a ${type} replica under pytorchReplicaSpecs`);
  return m[1];
}

/** The first capture of `re` in `text`, failing with what was looked for. */
function field(text: string, re: RegExp, what: string): string {
  const m = re.exec(text);
  assert.ok(m, `expected ${what} in:\n${text}`);
  return m[1];
}

/** The container's `args:`, a block sequence of quoted strings. */
function launcherArgs(block: string): string[] {
  const items = field(block, /^ +args:\n((?: +- .*\n)+)/m, "the launcher's args");
  return items.trimEnd().split("\n").map((line) => JSON.parse(line.replace(/^ +- /, "")));
}

/** A ConfigMap's `key: |` block scalar, dedented. */
function blockScalar(key: string): string {
  const m = new RegExp(`^( +)${key.replace(".", "\\.")}: \\|\\n((?:\\1 {2}.*\\n|\\s*\\n)*)`, "m").exec(YAML);
  assert.ok(m, `expected the ConfigMap to hold ${key}`);
  const indent = m[1].length + 2;
  return m[2].split("\n").map((l) => l.slice(indent)).join("\n").trimEnd() + "\n";
}

/** What Kubeflow's training operator sets in pod `index` (Master 0, Worker i is i + 1) of a 2-pod job. */
function kubeflowEnv(index: number, nproc: string, port: string): Record<string, string> {
  return {
    PET_NNODES: "2",
    PET_NPROC_PER_NODE: nproc,
    PET_NODE_RANK: String(index),
    PET_MASTER_ADDR: `${JOB}-master-0`,
    PET_MASTER_PORT: port,
    MASTER_ADDR: `${JOB}-master-0`,
    MASTER_PORT: port,
    WORLD_SIZE: String(2 * Number(nproc)),
    RANK: String(index),
  };
}

const nprocPerNode = field(YAML, /^ {2}nprocPerNode: "(\w+)"$/m, "spec.nprocPerNode");

Deno.test("pytorchjob.yaml (read as text, no cluster) runs the launcher with flags and PET_* it reads", () => {
  assert.match(
    YAML,
    /^apiVersion: kubeflow\.org\/v1\nkind: PyTorchJob\nmetadata:\n {2}name: dcomm-allreduce$/m,
  );
  const exports = JSON.parse(Deno.readTextFileSync(new URL("deno.json", ROOT))).exports;
  assert.equal(exports["./launch"], "./cli/launch.ts");
  const argsSeen = new Set<string>();
  for (const [index, type] of (["Master", "Worker"] as const).entries()) {
    const block = replica(type);
    assert.equal(field(block, /^ +replicas: (\d+)$/m, "replicas"), "1");
    assert.equal(field(block, /^ +- name: (\S+)/m, "the container's name"), "pytorch");
    assert.equal(field(block, /^ +image: (\S+)$/m, "the image"), "denoland/deno:2.9.6");
    const command = JSON.parse(field(block, /^ +command: (\[.*\])$/m, "the command"));
    assert.deepEqual(command, ["deno", "run", "-A", "jsr:@dcomm/dcomm/launch"]);
    const args = launcherArgs(block);
    argsSeen.add(JSON.stringify(args));
    const port = field(block, /- name: pytorchjob-port\n +containerPort: (\d+)$/m, "the pytorchjob-port");
    assert.match(
      block,
      new RegExp(
        `- name: ${STORE_SECRET_ENV}\\n +valueFrom:\\n +secretKeyRef:\\n +name: dcomm-store-secret\\n +key: secret\\n`,
      ),
    );
    const { options, fromEnv } = parseLaunchArgs(args, kubeflowEnv(index, nprocPerNode, port));
    assert.ok(options);
    assert.equal(options.nnodes, 2);
    assert.equal(options.nodeRank, index);
    assert.equal(options.masterAddr, `${JOB}-master-0`);
    assert.equal(options.masterPort, Number(port));
    assert.equal(String(options.nprocPerNode), nprocPerNode, "the flag and spec.nprocPerNode agree");
    assert.equal(options.runId, JOB);
    assert.deepEqual(Object.keys(fromEnv).sort(), [
      "PET_MASTER_ADDR",
      "PET_MASTER_PORT",
      "PET_NNODES",
      "PET_NODE_RANK",
    ]);
    // The script is the ConfigMap's train.ts, mounted where the args say, run from the folder of its deno.json.
    const appMount = field(block, /- name: app\n +mountPath: (\S+)$/m, "the app volume's mount");
    assert.equal(options.command[0], `${appMount}/train.ts`);
    assert.equal(field(block, /^ +workingDir: (\S+)$/m, "workingDir"), appMount);
    assert.match(block, /- name: app\n +configMap:\n +name: dcomm-allreduce\n/);
    assert.equal(
      options.logDir,
      field(block, /- name: logs\n +mountPath: (\S+)$/m, "the logs volume's mount"),
    );
  }
  assert.equal(argsSeen.size, 1, "expected the same launcher args in both pods");
  assert.match(blockScalar("train.ts"), /^import \{ init \} from "@dcomm\/dcomm";$/m);
  assert.deepEqual(JSON.parse(blockScalar("deno.json")).imports, {
    "@dcomm/dcomm": "jsr:@dcomm/dcomm@^0.1.0",
  });
});

// No cluster: two launchers on 127.0.0.1 play the two pods. The yaml's paths are mapped to a temporary
// folder, PET_MASTER_ADDR to 127.0.0.1 (the Master's service name resolves only in the cluster), the
// port to a free one, and its deno.json's jsr: import to this checkout.
Deno.test("pytorchjob.yaml's script and args run on two emulated pods (no cluster) as one world of 4", async () => {
  const tmp = Deno.makeTempDirSync({ prefix: "dcomm_k8s_" });
  try {
    Deno.mkdirSync(`${tmp}/app`);
    Deno.writeTextFileSync(`${tmp}/app/train.ts`, blockScalar("train.ts"));
    const config = JSON.parse(blockScalar("deno.json"));
    config.imports["@dcomm/dcomm"] = new URL("mod.ts", ROOT).href;
    Deno.writeTextFileSync(`${tmp}/app/deno.json`, JSON.stringify(config));
    const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = String((probe.addr as Deno.NetAddr).port);
    probe.close();
    const pod = (index: number): Promise<Deno.CommandOutput> => {
      const args = launcherArgs(replica(index === 0 ? "Master" : "Worker"))
        .map((a) => a.replace(/^\/app\b/, `${tmp}/app`).replace(/^\/logs\b/, `${tmp}/logs${index}`));
      return new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", new URL("cli/launch.ts", ROOT).pathname, ...args],
        cwd: `${tmp}/app`,
        env: {
          ...kubeflowEnv(index, nprocPerNode, port),
          PET_MASTER_ADDR: "127.0.0.1",
          MASTER_ADDR: "127.0.0.1",
          [STORE_SECRET_ENV]: "the-secret-of-this-job",
          DCOMM_HOST_ID: `pod-${index}`,
          NO_COLOR: "1",
        },
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(90_000),
      }).output();
    };
    const outs = await Promise.all([pod(0), pod(1)]);
    const lines: string[] = [];
    for (const [index, o] of outs.entries()) {
      const text = new TextDecoder().decode(o.stdout) + new TextDecoder().decode(o.stderr);
      assert.equal(o.code, 0, `pod ${index}:\n${text.slice(-3000)}`);
      lines.push(...[...text.matchAll(/^\[rank\d\]: (rank \d of .*)$/gm)].map((m) => m[1]));
      for (let local = 0; local < 2; local++) {
        const log = Deno.readTextFileSync(`${tmp}/logs${index}/${JOB}/attempt_0/${local}/stdout.log`);
        assert.equal(log, `rank ${index * 2 + local} of 4 (attempt 0): mean 2.5\n`);
      }
    }
    assert.deepEqual(lines.sort(), [0, 1, 2, 3].map((r) => `rank ${r} of 4 (attempt 0): mean 2.5`));
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
});

Deno.test("with only PyTorchJob's PET_* variables (no flags, no cluster) the launcher runs the demo and every collective", async () => {
  const port = (() => {
    const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const p = l.addr.port;
    l.close();
    return p;
  })();
  const env = {
    NO_COLOR: "1",
    [STORE_SECRET_ENV]: "k8s-test-secret",
    PET_NNODES: "2",
    PET_NPROC_PER_NODE: "2",
    PET_MASTER_ADDR: "127.0.0.1",
    PET_MASTER_PORT: String(port),
  };
  const pods = (script: string[]): Promise<string[]> =>
    Promise.all([0, 1].map(async (node) => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "cli/launch.ts", ...script],
        cwd: ROOT,
        env: { ...env, PET_NODE_RANK: String(node) },
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(120_000),
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, `pod ${node}:\n${text.slice(-3000)}`);
      return text;
    }));
  const demo = await pods(["examples/train_mnist.ts", "--epochs", "1"]);
  assert.match(demo[0], /weights after training: identical on all 4 ranks/);
  const sweep = await pods([COLLECTIVES_FIXTURE]);
  checkResults(collectiveResults(sweep.join("\n")), 4);
});
