import assert from "node:assert/strict";
import { launch, LaunchUsageError, parseLaunchArgs, stripAnsi, summarize } from "../../cli/launch.ts";
import { cudaStatus } from "../../gpu/device.ts";
import { freePort } from "../_util/net.ts";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const CHILD = new URL("./_fixtures/launch_child.ts", import.meta.url).pathname;
const ALLREDUCE = new URL("./_fixtures/launch_allreduce.ts", import.meta.url).pathname;
const FLOOD = new URL("./_fixtures/launch_flood.ts", import.meta.url).pathname;
const ORPHAN = new URL("./_fixtures/launch_orphan.ts", import.meta.url).pathname;

/** Runs the launcher's CLI to its end (at most 60 s: a hung launcher fails the test instead of hanging it). */
async function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; out: string; err: string }> {
  const o = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  return { code: o.code, out: new TextDecoder().decode(o.stdout), err: new TextDecoder().decode(o.stderr) };
}

/** The ENV lines the fixture's ranks printed, parsed, in rank order. */
function envs(out: string): Record<string, string>[] {
  return [...out.matchAll(/^\[rank(\d+)\]: ENV (.*)$/gm)].map((m) => JSON.parse(m[2]))
    .sort((a, b) => Number(a.RANK) - Number(b.RANK));
}

/** A port nothing listens on now. */

/** A usage error: exit code 2, the message, one usage line, and no stack trace. */
function assertUsageError(r: { code: number; out: string; err: string }, message: RegExp): void {
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, message);
  assert.match(r.err, /^Usage: deno run -A jsr:@dcomm\/dcomm\/launch \[options\] script\.ts/m);
  assert.doesNotMatch(r.err, /TypeError|^\s+at /m, `expected no stack trace, found:\n${r.err}`);
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
  flags: string[] = [],
  mode = "trap",
): Promise<{ code: number; out: string; err: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, ...flags, "--nproc-per-node", String(ranks), CHILD, mode],
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

Deno.test("launch --max-restarts does not restart ranks that a signal stopped: it exits 128 + n", async () => {
  const { code, err } = await stopWith("SIGTERM", 2, ["--max-restarts", "2"], "wait");
  assert.equal(code, 143, err);
  assert.doesNotMatch(err, /restarting/);
  assert.match(err, /^Stopped by SIGTERM: the launcher forwarded it to its 2 ranks/m);
  assert.match(err, /rank 0: (signal SIGTERM|exit 143)/);
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

Deno.test("launch --standalone runs one node on 127.0.0.1 with a free port and a random run id", async () => {
  const { code, out, err } = await run(["--standalone", "--nproc-per-node", "2", CHILD, "ok"]);
  assert.equal(code, 0, err);
  const e = envs(out);
  assert.equal(e.length, 2);
  assert.equal(e[0].MASTER_ADDR, "127.0.0.1");
  assert.ok(Number(e[0].MASTER_PORT) > 0);
  assert.match(e[0].DCOMM_RUN_ID, /^[0-9a-f-]{36}$/);
  assert.equal(e[1].DCOMM_RUN_ID, e[0].DCOMM_RUN_ID);
  assert.equal(e[0].DCOMM_RESTART_COUNT, "0");
});

Deno.test("launch --standalone refuses several nodes, another address and an endpoint (exit 2)", async () => {
  for (
    const [flags, clash] of [
      [["--nnodes", "2"], "--nnodes 2"],
      [["--master-addr", "10.0.0.1"], "--master-addr 10.0.0.1"],
      [["--master-port", "29500"], "--master-port 29500"],
      [["--rdzv-endpoint", "10.0.0.1:29400"], "--rdzv-endpoint 10.0.0.1:29400"],
    ]
  ) {
    const r = await run(["--standalone", ...flags, "--nproc-per-node", "1", CHILD], {
      DCOMM_STORE_SECRET: "s",
    });
    assert.equal(r.code, 2, r.err);
    assert.ok(r.err.includes(`Cannot combine --standalone with ${clash}: --standalone runs one node`), r.err);
  }
});

Deno.test("launch --rdzv-endpoint host:port is the store's address, given to every rank", async () => {
  const port = freePort();
  const { code, out, err } = await run([
    "--rdzv_endpoint",
    `127.0.0.1:${port}`,
    "--rdzv-backend=c10d",
    "--rdzv-id",
    "job-7",
    "--nproc-per-node",
    "2",
    CHILD,
  ]);
  assert.equal(code, 0, err);
  for (const e of envs(out)) {
    assert.equal(e.MASTER_ADDR, "127.0.0.1");
    assert.equal(e.MASTER_PORT, String(port));
    assert.equal(e.DCOMM_RUN_ID, "job-7");
  }
});

Deno.test("launch --rdzv-endpoint without a port uses 29400, as torchrun's c10d rendezvous", async () => {
  try {
    Deno.listen({ hostname: "127.0.0.1", port: 29400 }).close();
  } catch {
    console.log("skipped: port 29400 is in use on this machine, and this test needs it free");
    return;
  }
  const { code, out, err } = await run(["--rdzv-endpoint", "127.0.0.1", "--nproc-per-node", "1", CHILD]);
  assert.equal(code, 0, err);
  assert.equal(envs(out)[0].MASTER_PORT, "29400");
});

Deno.test("launch --rdzv-endpoint naming another host or port than --master-addr/--master-port exits 2 naming both", async () => {
  const host = await run(["--rdzv-endpoint", "node0:29400", "--master-addr", "node1", CHILD]);
  assert.equal(host.code, 2);
  assert.match(
    host.err,
    /Cannot combine --rdzv-endpoint node0:29400 with --master-addr node1: .*\(node0 and node1\)/,
  );
  const port = await run(["--rdzv-endpoint", "127.0.0.1:1234", "--master-port", "999", CHILD]);
  assert.equal(port.code, 2);
  assert.match(
    port.err,
    /Cannot combine --rdzv-endpoint 127\.0\.0\.1:1234 with --master-port 999: .*\(1234 and 999\)/,
  );
  const bad = await run(["--rdzv-endpoint", "node0:http", CHILD]);
  assert.equal(bad.code, 2);
  assert.match(
    bad.err,
    /Invalid --rdzv-endpoint: expected host\[:port\] \(or \[IPv6\]:port\), found "node0:http"/,
  );
});

Deno.test("launch rejects an unknown flag or a missing value with one usage line and exit 2, no stack trace", async () => {
  assertUsageError(
    await run(["--standalone", "--bogus", CHILD]),
    /^launch: Unknown flag --bogus; --help lists/m,
  );
  assertUsageError(
    await run(["--run-path", CHILD]),
    /^launch: Unknown flag --run-path: it is torchrun's, and dcomm's launcher does not support it/m,
  );
  assertUsageError(
    await run(["--nproc-per-node"]),
    /^launch: Flag --nproc-per-node expects a value, found nothing$/m,
  );
  assertUsageError(
    await run(["--nproc-per-node", "--standalone", CHILD]),
    /^launch: Flag --nproc-per-node expects a value, found the flag --standalone$/m,
  );
  assertUsageError(
    await run(["--standalone=yes", CHILD]),
    /^launch: Flag --standalone takes no value, found "yes"$/m,
  );
  assertUsageError(await run(["--standalone"]), /^launch: Expected a script after the flags, found none$/m);
  assertUsageError(
    await run(["--rdzv-backend", "etcd", CHILD]),
    /^launch: Unsupported --rdzv-backend etcd: expected c10d or static/m,
  );
  assertUsageError(
    await run(["--nnodes", "1:4", CHILD]),
    /^launch: Elastic --nnodes 1:4 is not supported: .*expected N or N:N \(MIN == MAX\), found MIN 1 and MAX 4$/m,
  );
  assertUsageError(
    await run(["--nproc-per-node", "many", CHILD]),
    /^launch: Invalid --nproc-per-node: expected a positive integer or auto, cpu or gpu, found "many"$/m,
  );
  assertUsageError(
    await run(["--monitor-interval", "0", CHILD]),
    /^launch: Invalid --monitor-interval: expected a number of seconds > 0, found "0"$/m,
  );
  assertUsageError(
    await run(["--max-restarts", "-1", CHILD]),
    /^launch: Invalid --max-restarts: expected a non-negative integer, found "-1"$/m,
  );
  assertUsageError(
    await run(["-r", "4", CHILD]),
    /^launch: Invalid -r: expected 0 \(none\), 1 \(stdout\), 2 \(stderr\) or 3 \(both\)/m,
  );
  const help = await run(["--help"]);
  assert.equal(help.code, 0);
  for (
    const flag of [
      "--nproc-per-node",
      "--nnodes",
      "--node-rank",
      "--master-addr",
      "--master-port",
      "--standalone",
      "--rdzv-endpoint",
      "--rdzv-backend",
      "--rdzv-id",
      "--max-restarts",
      "--monitor-interval",
      "--log-dir",
      "--redirects",
      "--tee",
      "--deno-args",
      "--no-deno",
      "--no-python",
    ]
  ) assert.ok(help.out.includes(flag), `expected --help to list ${flag}`);
});

Deno.test("launch --nnodes N:N, --monitor-interval and --no-python are accepted", async () => {
  const { code, out, err } = await run([
    "--nnodes=1:1",
    "--monitor-interval",
    "0.5",
    "--no-python",
    "--nproc-per-node",
    "2",
    Deno.execPath(),
    "run",
    "-A",
    CHILD,
  ]);
  assert.equal(code, 0, err);
  assert.equal(envs(out).length, 2);
});

Deno.test("launch --nproc-per-node cpu, auto and gpu count this machine's CPUs and GPUs", async () => {
  const cpus = navigator.hardwareConcurrency;
  const cpu = await run(["--nproc-per-node", "cpu", CHILD]);
  assert.equal(cpu.code, 0, cpu.err);
  assert.equal(envs(cpu.out).length, cpus);
  const cuda = cudaStatus();
  const auto = await run(["--nproc-per-node", "auto", CHILD]);
  assert.equal(auto.code, 0, auto.err);
  assert.equal(envs(auto.out).length, cuda.available ? cuda.deviceCount : cpus);
  const gpu = await run(["--nproc-per-node", "gpu", CHILD]);
  if (cuda.available) {
    assert.equal(gpu.code, 0, gpu.err);
    assert.equal(envs(gpu.out)[0].WORLD_SIZE, String(cuda.deviceCount));
  } else {
    assert.equal(gpu.code, 2);
    assert.match(
      gpu.err,
      /Cannot use --nproc-per-node gpu: expected CUDA to see at least one GPU, found none \(/,
    );
  }
});

Deno.test("launch --max-restarts restarts every rank after a failure and exits 0 when an attempt succeeds", async () => {
  const logDir = Deno.makeTempDirSync();
  try {
    const { code, out, err } = await run([
      "--max-restarts",
      "2",
      "--log-dir",
      logDir,
      "--rdzv-id",
      "restart-run",
      "--tee",
      "3",
      "--nproc-per-node",
      "2",
      CHILD,
      "restart",
    ]);
    assert.equal(code, 0, err);
    assert.match(out, /^\[rank1\]: rank 1 fails on attempt 0$/m);
    assert.match(
      err,
      /^\[launcher\]: attempt 0 failed \(rank 1 exited with code 3\); restarting all 2 ranks of this node as attempt 1/m,
    );
    for (let r = 0; r < 2; r++) {
      assert.match(out, new RegExp(`^\\[rank${r}\\]: rank ${r} ok on attempt 1$`, "m"));
    }
    // The store stayed up: both attempts' ranks got the same port.
    const ports = new Set(envs(out).map((e) => e.MASTER_PORT));
    assert.equal(ports.size, 1, `expected one store port across attempts, found ${[...ports]}`);
    assert.deepEqual(envs(out).map((e) => e.TORCHELASTIC_RESTART_COUNT).sort(), ["0", "0", "1", "1"]);
    assert.match(err, /^All 2 ranks exited with code 0 on attempt 1$/m);
    assert.match(
      err,
      /^Attempts: 2 ran \(1 restart\); 1 failed:\n {2}attempt 0: rank 1 exited with code 3\n {2}attempt 1: all 2 ranks exited with code 0$/m,
    );
    const run0 = `${logDir}/restart-run`;
    assert.match(Deno.readTextFileSync(`${run0}/attempt_0/1/stdout.log`), /^rank 1 fails on attempt 0$/m);
    assert.match(Deno.readTextFileSync(`${run0}/attempt_1/1/stdout.log`), /^rank 1 ok on attempt 1$/m);
    assert.ok(!Deno.readTextFileSync(`${run0}/attempt_1/1/stdout.log`).includes("fails"));
  } finally {
    Deno.removeSync(logDir, { recursive: true });
  }
});

Deno.test("launch --max-restarts 0 does not restart: the failing rank's code, no restart line", async () => {
  const { code, out, err } = await run(["--max-restarts", "0", "--nproc-per-node", "2", CHILD, "restart"]);
  assert.equal(code, 3, err);
  assert.doesNotMatch(err, /restarting/);
  assert.doesNotMatch(out, /ok on attempt 1/);
  assert.match(err, /Rank 1 exited with code 3; the launcher stopped the other ranks\./);
  assert.doesNotMatch(err, /^Attempts:/m);
});

Deno.test("launch --max-restarts N stops after N + 1 failed attempts and says which failed", async () => {
  const pidDir = Deno.makeTempDirSync();
  try {
    const { code, err } = await run(["--max-restarts", "1", "--nproc-per-node", "2", CHILD, "fail"], {
      PID_DIR: pidDir,
    });
    assert.equal(code, 3, err);
    assert.equal((err.match(/restarting all 2 ranks/g) ?? []).length, 1);
    assert.match(
      err,
      /^Attempts: 2 ran \(1 restart\); 2 failed:\n {2}attempt 0: rank 1 exited with code 3\n {2}attempt 1: rank 1 exited with code 3$/m,
    );
  } finally {
    Deno.removeSync(pidDir, { recursive: true });
  }
});

Deno.test("launch --log-dir with --redirects and --tee writes torchrun's layout; redirected lines stay off the console", async () => {
  const logDir = Deno.makeTempDirSync();
  try {
    // Local rank 0: stdout redirected (file only), stderr teed (file and console). Local rank 1: stdout
    // redirected, stderr neither (console only).
    const { code, out, err } = await run([
      "--log_dir",
      logDir,
      "--rdzv-id",
      "logs-run",
      "-r",
      "1",
      "-t",
      "0:2",
      "--nproc-per-node",
      "2",
      CHILD,
      "ok",
    ]);
    assert.equal(code, 0, err);
    assert.doesNotMatch(out, /ENV/, "expected redirected stdout off the console");
    assert.match(err, /^\[rank0\]: to stderr from 0$/m);
    assert.match(err, /^\[rank1\]: to stderr from 1$/m);
    assert.ok(err.includes(`[launcher]: logs of run logs-run in ${logDir}/logs-run`), err);
    const dir = `${logDir}/logs-run/attempt_0`;
    for (let l = 0; l < 2; l++) {
      const stdout = Deno.readTextFileSync(`${dir}/${l}/stdout.log`);
      assert.match(stdout, new RegExp(`^ENV \\{"RANK":"${l}"`, "m"));
      assert.doesNotMatch(stdout, /\[rank/, "expected the rank's own lines, without the console's prefix");
    }
    assert.equal(Deno.readTextFileSync(`${dir}/0/stderr.log`), "to stderr from 0\n");
    assert.throws(() => Deno.statSync(`${dir}/1/stderr.log`), Deno.errors.NotFound);
  } finally {
    Deno.removeSync(logDir, { recursive: true });
  }
});

Deno.test("launch --redirects without --log-dir writes to a new temporary folder and says where", async () => {
  const { code, out, err } = await run([
    "--redirects",
    "3",
    "--rdzv-id",
    "tmp-run",
    "--nproc-per-node",
    "1",
    CHILD,
  ]);
  assert.equal(code, 0, err);
  assert.equal(out, "");
  const m = /^\[launcher\]: logs of run tmp-run in (\S+)$/m.exec(err);
  assert.ok(m, err);
  try {
    assert.match(Deno.readTextFileSync(`${m[1]}/attempt_0/0/stdout.log`), /^ENV /);
    assert.equal(Deno.readTextFileSync(`${m[1]}/attempt_0/0/stderr.log`), "to stderr from 0\n");
  } finally {
    Deno.removeSync(m[1].replace(/\/tmp-run$/, ""), { recursive: true });
  }
});

Deno.test("launch reads its flags from PET_* variables, as torchrun does", async () => {
  const port = freePort();
  const { code, out, err } = await run([CHILD], {
    PET_NPROC_PER_NODE: "3",
    PET_RDZV_ID: "pet-run",
    PET_MASTER_PORT: String(port),
    PET_MAX_RESTARTS: "1",
    PET_STANDALONE: "0",
  });
  assert.equal(code, 0, err);
  const e = envs(out);
  assert.equal(e.length, 3);
  for (const x of e) {
    assert.equal(x.WORLD_SIZE, "3");
    assert.equal(x.DCOMM_RUN_ID, "pet-run");
    assert.equal(x.MASTER_PORT, String(port));
  }
  const bad = await run([CHILD], { PET_NNODES: "1:2" });
  assertUsageError(bad, /^launch: Elastic PET_NNODES 1:2 is not supported/m);
  const clash = await run(["--standalone", CHILD], { PET_NNODES: "2", DCOMM_STORE_SECRET: "s" });
  assert.equal(clash.code, 2);
  assert.match(clash.err, /Cannot combine --standalone with --nnodes 2/);
  assert.match(clash.err, /^launch: values from the environment: PET_NNODES=2$/m);
});

Deno.test("launch flags win over PET_* variables, and an address flag over every PET_* of the address", async () => {
  const port = freePort();
  const { code, out, err } = await run([
    "--nproc-per-node",
    "2",
    "--rdzv-endpoint",
    `127.0.0.1:${port}`,
    CHILD,
  ], {
    PET_NPROC_PER_NODE: "3",
    PET_MASTER_ADDR: "10.9.9.9",
    PET_MASTER_PORT: "1",
  });
  assert.equal(code, 0, err);
  const e = envs(out);
  assert.equal(e.length, 2);
  assert.equal(e[0].MASTER_ADDR, "127.0.0.1");
  assert.equal(e[0].MASTER_PORT, String(port));
});

Deno.test("parseLaunchArgs() reads both spellings, =values, torchrun's short flags and PET_* fallbacks", () => {
  const a = parseLaunchArgs(
    [
      "--nproc_per_node=4",
      "--max_restarts",
      "2",
      "-r",
      "0:3,1:2",
      "-t3",
      "--node-rank",
      "1",
      "--nnodes",
      "2:2",
      "--no_python",
      "--deno-args",
      "--allow-net --allow-env",
      "--",
      "--script-looking-like-a-flag",
      "--epochs",
      "3",
    ],
    { PET_NODE_RANK: "0", PET_LOG_DIR: "/logs", PET_MASTER_ADDR: "job-master-0" },
  );
  assert.equal(a.help, false);
  assert.deepEqual(a.options, {
    nprocPerNode: 4,
    nnodes: 2,
    nodeRank: 1,
    masterAddr: "job-master-0",
    masterPort: undefined,
    standalone: false,
    rdzvEndpoint: undefined,
    runId: undefined,
    storeProtocol: undefined,
    maxRestarts: 2,
    faultTolerant: false,
    logDir: "/logs",
    redirects: { 0: 3, 1: 2 },
    tee: 3,
    denoArgs: ["--allow-net", "--allow-env"],
    noDeno: true,
    command: ["--script-looking-like-a-flag", "--epochs", "3"],
  });
  assert.deepEqual(a.fromEnv, { PET_LOG_DIR: "/logs", PET_MASTER_ADDR: "job-master-0" });
  assert.equal(parseLaunchArgs(["-h"]).help, true);
  assert.equal(parseLaunchArgs(["s.ts"], { PET_NO_DENO: "1" }).options?.noDeno, true);
  assert.equal(parseLaunchArgs(["s.ts"], {}).options?.nprocPerNode, 1, "torchrun's default");
  assert.throws(() => parseLaunchArgs(["s.ts"], { PET_STANDALONE: "yes" }), {
    name: "LaunchUsageError",
    message: 'Invalid PET_STANDALONE: expected 0 or 1, found "yes"',
  });
  assert.throws(() => parseLaunchArgs(["--tee", "0:5", "s.ts"], {}), LaunchUsageError);
});

Deno.test("launch() refuses a --redirects naming a local rank this node does not run", async () => {
  await assert.rejects(
    launch({ nprocPerNode: 2, redirects: { 0: 3, 2: 1 }, command: [CHILD] }),
    {
      name: "RangeError",
      message: "Invalid --redirects: it names local rank 2, but this node runs local ranks 0..1",
    },
  );
});

// There is no Kubernetes cluster here: two launcher processes on 127.0.0.1 play a PyTorchJob's two pods,
// with the variables Kubeflow's training operator sets in each (PET_* for torchrun, and the pod's own
// RANK/WORLD_SIZE/MASTER_*, which each rank's environment replaces).
Deno.test("launch on two emulated PyTorchJob pods (PET_* env, no cluster) forms one world of 4 ranks", async () => {
  const port = freePort();
  const pod = (nodeRank: number): Promise<Deno.CommandOutput> =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", LAUNCH, ALLREDUCE],
      env: {
        PET_NNODES: "2",
        PET_NPROC_PER_NODE: "2",
        PET_NODE_RANK: String(nodeRank),
        PET_MASTER_ADDR: "127.0.0.1",
        PET_MASTER_PORT: String(port),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        WORLD_SIZE: "4",
        RANK: String(nodeRank),
        DCOMM_STORE_SECRET: "one-secret-for-the-job",
        DCOMM_HOST_ID: `pod-${nodeRank}`,
      },
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(90_000),
    }).output();
  // The worker pod often starts first: its ranks wait for node 0's store.
  const worker = pod(1);
  await new Promise((r) => setTimeout(r, 200));
  const outs = await Promise.all([pod(0), worker]);
  const results: { rank: number; worldSize: number; localRank: number; sum: number; count: number }[] = [];
  for (const [node, o] of outs.entries()) {
    const text = new TextDecoder().decode(o.stdout) + new TextDecoder().decode(o.stderr);
    assert.equal(o.code, 0, `node ${node}:\n${text.slice(-3000)}`);
    for (const m of text.matchAll(/^\[rank(\d+)\]: RESULT (.*)$/gm)) {
      const r = JSON.parse(m[2]);
      assert.equal(Number(m[1]), r.rank);
      assert.equal(Math.floor(r.rank / 2), node, `rank ${r.rank} ran on node ${node}`);
      results.push(r);
    }
  }
  results.sort((a, b) => a.rank - b.rank);
  assert.deepEqual(results.map((r) => [r.rank, r.localRank, r.worldSize, r.sum, r.count]), [
    [0, 0, 4, 6, 4],
    [1, 1, 4, 6, 4],
    [2, 0, 4, 6, 4],
    [3, 1, 4, 6, 4],
  ]);
});

/** Runs the launcher's CLI on one rank of the flood fixture; counts what came out on stdout. */
async function flood(mode: "bar" | "progress", mib: number): Promise<{
  code: number;
  ms: number;
  hashes: number;
  lines: number;
  longest: number;
  err: string;
}> {
  const t0 = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "1", FLOOD, mode, String(mib)],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).spawn();
  let hashes = 0;
  let lines = 0;
  let longest = 0;
  let current = 0;
  const counted = (async () => {
    for await (const chunk of child.stdout) {
      for (const byte of chunk) {
        if (byte === 0x23) hashes++;
        if (byte === 0x0a) {
          lines++;
          longest = Math.max(longest, current);
          current = 0;
        } else current++;
      }
    }
  })();
  const [status, err] = await Promise.all([child.status, new Response(child.stderr).text(), counted]);
  return { code: status.code, ms: performance.now() - t0, hashes, lines, longest, err };
}

Deno.test("launch passes 32 MiB written without a newline through in linear time, in pieces of at most 64 KiB", async () => {
  const mib = 32;
  const r = await flood("bar", mib);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.hashes, mib << 20, "every byte the rank wrote came out");
  // Before: one line held whole, rebuilt at every chunk (quadratic: 6 s here for 32 MiB, 61 s for 64 MB).
  assert.ok(r.ms < 20_000, `expected the launcher to finish within 20 s, took ${Math.round(r.ms)} ms`);
  assert.ok(r.lines >= (mib << 20) / (64 << 10), `expected pieces of at most 64 KiB, found ${r.lines} lines`);
  assert.ok(r.longest <= (64 << 10) + "[rank0]: ".length, `the longest line has ${r.longest} bytes`);
  const wrote = /\[rank0\]: WROTE (\d+) (\d+)$/m.exec(r.err);
  assert.ok(wrote, r.err);
  assert.equal(Number(wrote[1]), mib << 20);
});

Deno.test("launch prints each \\r-redraw of a progress bar as a line of its own, prefixed", async () => {
  const r = await flood("progress", 4);
  assert.equal(r.code, 0, r.err);
  // 4 MiB of "#" with a "\r" as every 100th byte of each 64 KiB chunk: 655 redraws of 99 "#" per chunk.
  const redraws = 64 * 655;
  assert.equal(r.hashes, (4 << 20) - redraws);
  assert.equal(r.lines, redraws + 1, "each redraw, and the tail after the last");
  assert.ok(r.longest <= 2 * 100 + "[rank0]: ".length, `the longest line has ${r.longest} bytes`);
});

Deno.test("launch() splits lines at \\n, \\r\\n and \\r, drops empty redraws, and flushes long partial lines", async () => {
  const script = [
    "const w = (s) => Deno.stdout.writeSync(new TextEncoder().encode(s));",
    'w("one\\r\\ntwo\\n\\nthree\\r\\rfour\\r");',
    "await new Promise((r) => setTimeout(r, 50));",
    'w("\\nfive");',
    "await new Promise((r) => setTimeout(r, 50));",
    'w("x".repeat(150000));',
  ].join("\n");
  const lines: string[] = [];
  const result = await launch({
    nprocPerNode: 1,
    noDeno: true,
    command: [Deno.execPath(), "eval", script],
    write: (line, stream) => stream === "stdout" && lines.push(line),
  });
  assert.equal(result.code, 0);
  const text = lines.map((l) => l.replace(/^\[rank0\]: /, ""));
  // An empty line ("\n\n") is kept, an empty redraw ("\r\r") dropped; "four\r" and "\nfive" are one break.
  assert.deepEqual(text.slice(0, 5), ["one", "two", "", "three", "four"]);
  assert.equal(text.slice(5).join(""), "five" + "x".repeat(150000));
  assert.deepEqual(text.slice(5).map((l) => l.length), [65536, 65536, 150004 - 2 * 65536]);
});

Deno.test('launch --deno-args "-A" (as --help writes it), --deno-args=-A and several flags run the ranks with them', async () => {
  const help = await run(["--help"]);
  assert.match(help.out, /--deno-args "ARGS"/);
  for (
    const flags of [
      ["--deno-args", "-A"],
      ["--deno-args=-A"],
      ["--deno-args", "-A --quiet"],
      ["--deno_args", "--allow-all"],
      ["--deno-args", "-A", "--nproc-per-node", "2"],
    ]
  ) {
    const r = await run([
      ...(flags.includes("--nproc-per-node") ? [] : ["--nproc-per-node", "2"]),
      ...flags,
      CHILD,
      "ok",
    ]);
    assert.equal(r.code, 0, `${flags.join(" ")}:\n${r.err}`);
    assert.equal(envs(r.out).length, 2, `${flags.join(" ")}:\n${r.out}`);
  }
  const parsed = parseLaunchArgs(["--deno-args", "-A --v8-flags=--max-old-space-size=100", "train.ts"], {});
  assert.deepEqual(parsed.options?.denoArgs, ["-A", "--v8-flags=--max-old-space-size=100"]);
  assert.deepEqual(parseLaunchArgs(["--deno-args=-A", "train.ts"], {}).options?.denoArgs, ["-A"]);
  assert.deepEqual(parseLaunchArgs(["--deno-args", "-A", "train.ts"], {}).options?.command, ["train.ts"]);
});

/** Whether `pid` still runs: /proc has it and it is not a zombie. */
function running(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]);
  } catch {
    return false;
  }
}

/** Waits until none of `pids` runs, at most `ms`; returns those still running. */
async function gone(pids: number[], ms: number): Promise<number[]> {
  const until = Date.now() + ms;
  while (pids.some(running) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  return pids.filter(running);
}

/** Waits until `dir` holds files named 0..n-1, at most `ms`; returns their pids. */
async function pidsIn(dir: string, n: number, ms: number, output: () => string): Promise<number[]> {
  const until = Date.now() + ms;
  for (;;) {
    const names = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => /^\d+$/.test(n));
    if (names.length === n) return names.map((name) => Number(Deno.readTextFileSync(`${dir}/${name}`)));
    if (Date.now() > until) throw new Error(`expected ${n} pid files within ${ms} ms:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

Deno.test("ranks of a SIGKILLed launcher notice and exit within a few seconds", async () => {
  const pidDir = Deno.makeTempDirSync();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "2", ORPHAN, "sleep"],
    env: { PID_DIR: pidDir },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const decoder = new TextDecoder();
  const read = (s: ReadableStream<Uint8Array>): Promise<void> =>
    (async () => {
      for await (const c of s) text += decoder.decode(c, { stream: true });
    })();
  const reading = Promise.all([read(child.stdout), read(child.stderr)]);
  let pids: number[] = [];
  try {
    pids = await pidsIn(pidDir, 2, 30_000, () => text);
    child.kill("SIGKILL");
    await child.status;
    const t0 = Date.now();
    const left = await gone(pids, 10_000);
    assert.deepEqual(
      left,
      [],
      `ranks ${left.join(", ")} still run ${Date.now() - t0} ms after the launcher died`,
    );
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    for (const pid of pids) {
      try {
        if (running(pid)) Deno.kill(pid, "SIGKILL"); // no orphan left behind by a failing test
      } catch { /* gone */ }
    }
    await reading.catch(() => {});
    Deno.removeSync(pidDir, { recursive: true });
  }
});

Deno.test("a rank whose launcher (not its parent: a wrapper between) dies says so on stderr and exits", async () => {
  // The "launcher" is a sleep this test starts; the rank is this test's child, so only /proc can tell.
  const launcher = new Deno.Command("sleep", { args: ["60"], stdout: "null", stderr: "null" }).spawn();
  const pidDir = Deno.makeTempDirSync();
  const rank = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ORPHAN, "sleep"],
    env: {
      RANK: "0",
      WORLD_SIZE: "1",
      PID_DIR: pidDir,
      DCOMM_LAUNCHER_PID: String(launcher.pid),
      NO_COLOR: "1",
    },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = rank.output();
  try {
    await pidsIn(pidDir, 1, 30_000, () => "");
    const t0 = Date.now();
    launcher.kill("SIGKILL");
    const waited = await Promise.race([
      output,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000)),
    ]);
    assert.ok(waited, "the rank still runs 10 s after its launcher died");
    const err = new TextDecoder().decode(waited.stderr);
    assert.ok(Date.now() - t0 < 10_000);
    assert.match(
      err,
      new RegExp(`dcomm: rank 0 \\(pid ${rank.pid}\\) stops: its launcher \\(pid ${launcher.pid}\\) is gone`),
    );
    assert.equal(
      waited.signal,
      "SIGTERM",
      `expected the rank to end by its own SIGTERM, found code ${waited.code}`,
    );
  } finally {
    try {
      rank.kill("SIGKILL");
    } catch { /* gone */ }
    try {
      launcher.kill("SIGKILL");
    } catch { /* gone */ }
    await output.catch(() => {});
    await launcher.status;
    Deno.removeSync(pidDir, { recursive: true });
  }
});

Deno.test("the launcher watch neither reads a rank's stdin nor keeps it alive", async () => {
  // The watched "launcher" is this test (the rank's parent): alive throughout.
  const env = { RANK: "0", WORLD_SIZE: "1", DCOMM_LAUNCHER_PID: String(Deno.pid), NO_COLOR: "1" };
  const rank = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ORPHAN, "stdin"],
    env,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).spawn();
  const writer = rank.stdin.getWriter();
  // Longer than one watch period: the bytes sit in the pipe while the watch runs.
  await new Promise((r) => setTimeout(r, 1500));
  await writer.write(new Uint8Array(100_000).fill(7));
  await writer.close();
  const o = await rank.output();
  assert.equal(o.code, 0, new TextDecoder().decode(o.stderr));
  assert.match(new TextDecoder().decode(o.stdout), /^STDIN 100000$/m);
  const t0 = performance.now();
  const done = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ORPHAN, "exit"],
    env,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  assert.equal(done.code, 0, new TextDecoder().decode(done.stderr));
  assert.ok(performance.now() - t0 < 20_000);
});
