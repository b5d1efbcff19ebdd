import assert from "node:assert/strict";
import { stripAnsi, summarize } from "../../cli/launch.ts";

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
      if (entry.name.startsWith(".")) continue; // stopped before its pid file was complete
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

/** Starts the launcher with `ranks` trapping ranks, waits until all are ready, sends `signal`, and waits. */
async function stopWith(
  signal: "SIGTERM" | "SIGINT",
  ranks: number,
): Promise<{ code: number; out: string; err: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", String(ranks), CHILD, "trap"],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const decoder = new TextDecoder();
  let out = "";
  const ready = Promise.withResolvers<void>();
  const outDone = (async () => {
    for await (const chunk of child.stdout) {
      out += decoder.decode(chunk, { stream: true });
      if ((out.match(/^\[rank\d\]: rank \d ready$/gm) ?? []).length === ranks) ready.resolve();
    }
  })();
  const errDone = new Response(child.stderr).text();
  const deadline = (ms: number, what: string): { promise: Promise<never>; clear: () => void } => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const promise = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`expected ${what} within ${ms} ms, found:\n${out}`)), ms);
    });
    return { promise, clear: () => clearTimeout(timer) };
  };
  try {
    const start = deadline(30_000, `${ranks} ranks ready`);
    try {
      await Promise.race([ready.promise, start.promise]);
    } finally {
      start.clear();
    }
    child.kill(signal);
    const end = deadline(30_000, `the launcher to exit after ${signal}`);
    try {
      const [status, err] = await Promise.race([
        Promise.all([child.status, errDone, outDone]),
        end.promise,
      ]);
      return { code: status.code, out, err };
    } finally {
      end.clear();
    }
  } catch (e) {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    await child.status;
    throw e;
  }
}

Deno.test("launch forwards SIGTERM to every rank, says so, and exits 143", async () => {
  const { code, out, err } = await stopWith("SIGTERM", 3);
  assert.equal(code, 143, `expected exit code 143 (128 + SIGTERM), found ${code}:\n${err}`);
  for (let r = 0; r < 3; r++) assert.match(out, new RegExp(`^\\[rank${r}\\]: rank ${r} got SIGTERM$`, "m"));
  assert.match(err, /^Stopped by SIGTERM: the launcher forwarded it to its 3 ranks and exits with code 143/m);
  assert.doesNotMatch(err, /All 3 ranks exited with code 0/);
  assert.ok(!`${out}${err}`.includes("\x1b["), `expected no ANSI escapes in piped output, found:\n${err}`);
});

Deno.test("launch forwards SIGINT to every rank and exits 130", async () => {
  const { code, out, err } = await stopWith("SIGINT", 2);
  assert.equal(code, 130, `expected exit code 130 (128 + SIGINT), found ${code}:\n${err}`);
  for (let r = 0; r < 2; r++) assert.match(out, new RegExp(`^\\[rank${r}\\]: rank ${r} got SIGINT$`, "m"));
  assert.match(err, /^Stopped by SIGINT:/m);
});

Deno.test("launch writes no ANSI escapes into a pipe, not even from a rank's uncaught error", async () => {
  const { code, out, err } = await run(["--nproc-per-node", "2", CHILD, "throw"]);
  assert.equal(code, 1, err);
  assert.match(err, /^\[rank1\]: error: Uncaught (\(in promise\) )?Error: rank 1 threw$/m);
  assert.match(err, /^ {2}\| error: Uncaught (\(in promise\) )?Error: rank 1 threw$/m);
  assert.ok(!`${out}${err}`.includes("\x1b["), `expected no ANSI escapes in piped output, found:\n${err}`);
});

Deno.test("summarize() and stripAnsi() drop escape sequences unless asked to keep colours", () => {
  assert.equal(
    stripAnsi("\x1b[0m\x1b[1m\x1b[31merror\x1b[0m: x \x1b]8;;http://a\x07link\x1b]8;;\x07"),
    "error: x link",
  );
  const result = {
    code: 1,
    ranks: [{ rank: 0, code: 1, signal: null, stopped: false, tail: ["\x1b[31mboom\x1b[0m"] }],
  };
  assert.match(summarize(result), /^ {2}\| boom$/m);
  assert.ok(summarize(result, { color: true }).includes("\x1b[31mboom"));
});
