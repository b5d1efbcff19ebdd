import assert from "node:assert/strict";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const CHILD = new URL("./_fixtures/launch_child.ts", import.meta.url).pathname;

async function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  const o = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: o.code, out: new TextDecoder().decode(o.stdout), err: new TextDecoder().decode(o.stderr) };
}

Deno.test("launch starts N ranks with torchrun's environment and prefixes their lines", async () => {
  const { code, out, err } = await run(["--nproc-per-node", "3", CHILD, "ok", "--flag", "x"]);
  assert.equal(code, 0, err);
  const envs = [...out.matchAll(/^\[rank(\d)\]: ENV (.*)$/gm)].map((m) => ({
    prefix: m[1],
    ...JSON.parse(m[2]),
  }));
  assert.equal(envs.length, 3);
  for (const e of envs) {
    assert.equal(e.prefix, e.RANK);
    assert.equal(e.WORLD_SIZE, "3");
    assert.equal(e.LOCAL_RANK, e.RANK);
    assert.equal(e.LOCAL_WORLD_SIZE, "3");
    assert.equal(e.MASTER_ADDR, "127.0.0.1");
    assert.ok(Number(e.MASTER_PORT) > 0);
    assert.equal(e.secret, 64);
    assert.deepEqual(e.args, ["--flag", "x"]);
  }
  assert.match(err, /^\[rank2\]: to stderr from 2$/m);
});

Deno.test("launch stops the other ranks when one fails, prints its last lines, and exits with its code", async () => {
  const pidDir = Deno.makeTempDirSync();
  try {
    const t0 = Date.now();
    const { code, err } = await run(["--nproc-per-node", "3", CHILD, "fail"], { PID_DIR: pidDir });
    assert.equal(code, 3);
    assert.ok(Date.now() - t0 < 30_000);
    assert.match(err, /Rank 1 exited with code 3; the launcher stopped the other ranks\./);
    assert.match(err, /Last lines of rank 1:\n(.*\n)* {2}\| something broke/);
    assert.match(err, /rank 0: (signal SIGTERM|exit \d+) \(stopped\)/);
    // No orphans: every rank that wrote its pid is gone.
    for (const entry of Deno.readDirSync(pidDir)) {
      const pid = Deno.readTextFileSync(`${pidDir}/${entry.name}`);
      assert.throws(() => Deno.statSync(`/proc/${pid}`), `rank ${entry.name} (pid ${pid}) is still running`);
    }
  } finally {
    Deno.removeSync(pidDir, { recursive: true });
  }
});

Deno.test("launch rejects bad flags with a message naming them", async () => {
  const bad = await run(["--nproc-per-node", "0", CHILD]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /Invalid --nproc-per-node: expected an integer >= 1, found 0/);
  const node = await run(["--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", CHILD]);
  assert.equal(node.code, 2);
  assert.match(node.err, /--node-rank|shared secret/);
  const usage = await run([]);
  assert.equal(usage.code, 2);
  assert.match(usage.out, /Usage: deno run -A jsr:@dcomm\/dcomm\/launch/);
});
