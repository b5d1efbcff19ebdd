/**
 * The rendezvous address from MPICH's PMI (`backend/_pmi.ts`): under real `mpiexec` jobs (3 ranks, on one
 * proxy and on two, Hydra's "hosts"), `_fixtures/pmi_rank.ts` finds the store through the launcher and
 * every rank checks in at it; then the error paths, in this process, against the sockets a launcher would
 * pass (a socket pair this test holds and never answers, or closes) and descriptors that are no such
 * socket; and the cpu backend end to end under `mpiexec` with no MASTER_ADDR (collectives, the MNIST demo).
 *
 * @module
 */
import assert from "node:assert/strict";
import { pmiStoreAddress, pmiUnavailableReason } from "../../backend/_pmi.ts";
import { defaultHostname } from "../../backend/env.ts";
import { DistError, TimeoutError } from "../../core/errors.ts";
import { close, pollReadable, readSome, socketPair, writeAll } from "../../ffi/libc/libc.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import type { RankResult } from "./_fixtures/collectives.ts";
import { checkResults, COLLECTIVES_FIXTURE } from "../_util/collective_results.ts";
import type { PmiRankResult } from "./_fixtures/pmi_rank.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/pmi_rank.ts", import.meta.url).pathname;
const COLLECTIVES = COLLECTIVES_FIXTURE;
const DENO = Deno.execPath();

const gate = {
  missing: hasCommand("mpiexec") ? undefined : "mpiexec not found (apt-get install mpich libmpich-dev)",
  ciCanSatisfy: true,
};

/** The environment of a job: ours, without any launcher's rank or rendezvous variables. */
function rankEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|DCOMM_STORE_HOSTED)$/
        .test(name) || /^(PMI_|PMIX_|OMPI_|MPI_LOCAL|SLURM_)/.test(name)
    ) delete env[name];
  }
  return { ...env, NO_COLOR: "1", ...extra };
}

interface Job {
  code: number;
  stdout: string;
  stderr: string;
  /** Every `RESULT {json}` line, sorted by rank. */
  results: { rank: number }[];
}

/** Runs `mpiexec <args>` (at most 120 s) and takes each rank's `RESULT` line. */
async function mpiexec(args: string[], env: Record<string, string> = {}): Promise<Job> {
  const out = await new Deno.Command("mpiexec", {
    args,
    cwd: ROOT,
    env: rankEnv(env),
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  const results = [...stdout.matchAll(/^RESULT (.*)$/gm)].map((m) => JSON.parse(m[1]) as { rank: number })
    .sort((a, b) => a.rank - b.rank);
  return { code: out.code, stdout, stderr, results };
}

/** The fixture's `mode` on 3 ranks (`hosts`: Hydra's host list, e.g. two proxies on this machine). */
async function pmiJob(
  mode: string,
  hosts?: string,
  env: Record<string, string> = {},
): Promise<PmiRankResult[]> {
  const job = await mpiexec([
    ...(hosts ? ["-hosts", hosts] : []),
    "-n",
    "3",
    DENO,
    "run",
    "-A",
    FIXTURE,
    mode,
  ], env);
  const what = `mpiexec -n 3 pmi_rank.ts ${mode}:\nstdout:\n${job.stdout.slice(-3000)}\nstderr:\n${
    job.stderr.slice(-3000)
  }`;
  assert.equal(job.code, 0, `expected exit code 0, found ${job.code}: ${what}`);
  assert.deepEqual(job.results.map((r) => r.rank), [0, 1, 2], `expected a RESULT line per rank: ${what}`);
  return job.results as PmiRankResult[];
}

/** Every rank got the same one address per rendezvous, and met every rank at it. */
function assertOneStore(results: PmiRankResult[], rendezvous: number): void {
  for (const r of results) {
    assert.equal(r.error, undefined, `rank ${r.rank}: ${r.error?.message}`);
    assert.equal(r.addresses.length, rendezvous, `rank ${r.rank}: ${JSON.stringify(r)}`);
    assert.deepEqual(r.addresses, results[0].addresses, `rank ${r.rank} got another address than rank 0`);
    for (const a of r.addresses) {
      assert.match(a.secret ?? "", /^[0-9a-f]{64}$/, "rank 0's secret travels with the address");
    }
    assert.deepEqual(
      r.seen,
      Array(rendezvous).fill([0, 1, 2]),
      `rank ${r.rank} met ${JSON.stringify(r.seen)}`,
    );
  }
}

gatedTest("pmiStoreAddress() gives every rank of mpiexec -n 3 one store on 127.0.0.1", gate, async () => {
  const results = await pmiJob("address");
  assertOneStore(results, 1);
  assert.equal(results[0].addresses[0].hostname, "127.0.0.1");
  assert.ok(results[0].addresses[0].port > 0);
});

gatedTest(
  "pmiStoreAddress() publishes a non-loopback address when the ranks are on two of Hydra's hosts",
  gate,
  async () => {
    // Two names of this machine: Hydra starts a proxy for each (rank 0 alone on the first), and the
    // key-value space travels between them as between machines.
    const hostname = Deno.hostname();
    const results = await pmiJob("address", `${hostname}:1,localhost:2`);
    assertOneStore(results, 1);
    assert.equal(results[0].addresses[0].hostname, defaultHostname("0.0.0.0"));
  },
);

gatedTest("pmiStoreAddress() twice in one job gives two stores under two keys", gate, async () => {
  const results = await pmiJob("twice");
  assertOneStore(results, 2);
  assert.notDeepEqual(results[0].addresses[0], results[0].addresses[1]);
});

gatedTest(
  'pmiStoreAddress() leaves the PMI socket usable for init({ backend: "mpi" }) later in the process',
  gate,
  async () => {
    const results = await pmiJob("then-mpi");
    assertOneStore(results, 1);
    for (const r of results) assert.deepEqual([r.mpiSize, r.mpiSum], [3, 6], `rank ${r.rank}`);
  },
);

gatedTest(
  "pmiStoreAddress() works while MPI is initialised, and refuses after MPI_Finalize closed the socket",
  gate,
  async () => {
    const results = await pmiJob("mpi-first");
    for (const r of results) {
      assert.deepEqual([r.mpiSize, r.mpiSum], [3, 6], `rank ${r.rank}`);
      assert.deepEqual(r.addresses, results[0].addresses);
      assert.deepEqual(r.seen, [[0, 1, 2]]);
      assert.equal(r.error?.name, "DistError");
      assert.match(
        r.error?.message ?? "",
        /PMI_FD=\d+ should still name the launcher's socket .*MPI_Finalize/,
      );
    }
  },
);

gatedTest("pmiStoreAddress() tells every rank why rank 0 could not serve the store", gate, async () => {
  const results = await pmiJob("serve-fails");
  assert.equal(results[0].error?.message, "Cannot listen on port 1: in use");
  for (const r of results.slice(1)) {
    assert.equal(r.error?.name, "DistError");
    assert.equal(
      r.error?.message,
      "Cannot rendezvous: rank 0 could not start the store: Cannot listen on port 1: in use",
    );
  }
});

gatedTest(
  "pmiStoreAddress() times out at the barrier when a rank never joins, and the job still ends cleanly",
  gate,
  async () => {
    const dir = Deno.makeTempDirSync({ prefix: "dcomm-pmi-" });
    try {
      const results = await pmiJob("straggler", undefined, { PMI_TEST_DIR: dir });
      for (const r of results.slice(0, 2)) {
        assert.equal(r.error?.name, "TimeoutError", `rank ${r.rank}: ${JSON.stringify(r.error)}`);
        assert.match(
          r.error?.message ?? "",
          /expected "cmd=barrier_out" in answer to "cmd=barrier_in", found no answer within 3000 ms; every rank/,
        );
      }
      assert.equal(results[2].error, undefined);
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
);

// --- error paths in this process, against sockets and descriptors that are not a working launcher -------

const neverCalled = (): Promise<number> => Promise.reject(new Error("serve must not be called"));

Deno.test("pmiStoreAddress() returns undefined and sends nothing without PMI_FD", async () => {
  assert.equal(await pmiStoreAddress({}, neverCalled), undefined);
  assert.equal(await pmiStoreAddress({ PMI_RANK: "0", PMI_SIZE: "2" }, neverCalled), undefined);
  assert.equal(
    await pmiStoreAddress({ OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_SIZE: "2" }, neverCalled),
    undefined,
  );
});

Deno.test("pmiStoreAddress() refuses a PMI_FD that is not a descriptor number", async () => {
  await assert.rejects(
    () => pmiStoreAddress({ PMI_FD: "six", PMI_RANK: "0", PMI_SIZE: "2" }, neverCalled),
    (e: Error) =>
      e instanceof RangeError &&
      /Invalid PMI_FD: expected a non-negative integer, found "six"/.test(e.message),
  );
});

Deno.test("pmiStoreAddress() refuses a PMI_FD that is not open", async () => {
  await assert.rejects(
    () => pmiStoreAddress({ PMI_FD: String(1 << 20), PMI_RANK: "1", PMI_SIZE: "2" }, neverCalled),
    (e: Error) =>
      e instanceof DistError &&
      /PMI_FD=1048576 should name the socket mpiexec passed to this process, found fd 1048576 is not open/
        .test(e.message),
  );
});

Deno.test("pmiStoreAddress() refuses a PMI_FD naming a file of this process, and writes nothing to it", async () => {
  const path = Deno.makeTempFileSync({ prefix: "dcomm-pmi-" });
  try {
    using file = Deno.openSync(path, { write: true });
    const fd = [...Deno.readDirSync("/proc/self/fd")].map((e) => Number(e.name))
      .find((n) => {
        try {
          return Deno.readLinkSync(`/proc/self/fd/${n}`) === path;
        } catch {
          return false;
        }
      });
    assert.ok(fd !== undefined, `expected ${path} among this process's descriptors`);
    await assert.rejects(
      () => pmiStoreAddress({ PMI_FD: String(fd), PMI_RANK: "0", PMI_SIZE: "2" }, neverCalled),
      (e: Error) =>
        e instanceof DistError &&
        e.message.includes(`found fd ${fd} is ${path}, which this process opened itself`) &&
        /run the deno binary itself under mpiexec/.test(e.message),
    );
    file.syncSync();
    assert.equal(Deno.readTextFileSync(path), "", "expected nothing written to the file");
  } finally {
    Deno.removeSync(path);
  }
});

/** The line a launcher would read from its end of the socket (at most 10 s). */
async function readLine(fd: number): Promise<string> {
  const buffer = new Uint8Array(4096);
  let text = "";
  const end = Date.now() + 10_000;
  while (!text.includes("\n")) {
    assert.ok(Date.now() < end, `expected a line within 10 s, found "${text}"`);
    if (!await pollReadable(fd, 1000)) continue;
    const n = readSome(fd, buffer);
    assert.ok(n > 0, "expected a line, found the end of the stream");
    text += new TextDecoder().decode(buffer.subarray(0, n));
  }
  return text;
}

// The descriptor this process gives as PMI_FD stays open until the process ends (the module finalises its
// connections at exit); the test closes its own end, which the module then sees as the launcher gone.
Deno.test("pmiStoreAddress() sends PMI-1's init and fails in time when the launcher never answers", async () => {
  const [ours, launcher] = socketPair();
  try {
    const env = { PMI_FD: String(ours), PMI_RANK: "1", PMI_SIZE: "2" };
    const pending = pmiStoreAddress(env, neverCalled, { timeoutMs: 300 });
    assert.equal(await readLine(launcher), "cmd=init pmi_version=1 pmi_subversion=1\n");
    await assert.rejects(
      () => pending,
      (e: Error) =>
        e instanceof TimeoutError &&
        e.message ===
          `Cannot rendezvous through MPICH's PMI (PMI_FD=${ours}): expected "cmd=response_to_init" ` +
            `in answer to "cmd=init", found no answer within 300 ms`,
    );
    // The connection is out of step now: a second try says so at once, without writing.
    await assert.rejects(
      () => pmiStoreAddress(env, neverCalled, { timeoutMs: 300 }),
      (e: Error) => e instanceof DistError && /again: an earlier exchange failed/.test(e.message),
    );
  } finally {
    close(launcher);
  }
});

Deno.test("pmiStoreAddress() fails naming the closed socket when the launcher goes away", async () => {
  const [ours, launcher] = socketPair();
  const pending = pmiStoreAddress({ PMI_FD: String(ours), PMI_RANK: "1", PMI_SIZE: "2" }, neverCalled, {
    timeoutMs: 60_000,
  });
  await readLine(launcher);
  close(launcher);
  await assert.rejects(
    () => pending,
    (e: Error) =>
      e instanceof DistError && !(e instanceof TimeoutError) &&
      e.message.includes(
        `expected "cmd=response_to_init" in answer to "cmd=init", found the socket closed by the launcher`,
      ),
  );
});

Deno.test("pmiStoreAddress() refuses an answer that is not PMI-1's", async () => {
  const [ours, launcher] = socketPair();
  try {
    const pending = pmiStoreAddress({ PMI_FD: String(ours), PMI_RANK: "1", PMI_SIZE: "2" }, neverCalled, {
      timeoutMs: 60_000,
    });
    await readLine(launcher);
    writeAll(
      launcher,
      new TextEncoder().encode("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n"),
    );
    await assert.rejects(
      () => pending,
      (e: Error) =>
        e instanceof DistError &&
        e.message.includes(
          `expected PMI version 1 with rc=0, found "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"`,
        ),
    );
  } finally {
    close(launcher);
  }
});

Deno.test("pmiStoreAddress() refuses to run on a worker thread, which never sees the process exit", async () => {
  const url = new URL("../../backend/_pmi.ts", import.meta.url).href;
  const code = `import { pmiStoreAddress } from ${JSON.stringify(url)};
    pmiStoreAddress({ PMI_FD: "6", PMI_RANK: "0", PMI_SIZE: "2" }, () => Promise.resolve(1))
      .then(() => postMessage("no error"), (e) => postMessage(e.name + ": " + e.message));`;
  const worker = new Worker(`data:text/javascript,${encodeURIComponent(code)}`, { type: "module" });
  try {
    const message = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("expected the worker's answer within 10 s")), 10_000);
      worker.onmessage = (e) => {
        clearTimeout(timer);
        resolve(String(e.data));
      };
    });
    assert.match(
      message,
      /^DistError: Cannot find the rendezvous through MPICH's PMI \(PMI_FD=6\) from a worker thread/,
    );
  } finally {
    worker.terminate();
  }
});

Deno.test("pmiUnavailableReason() names the launcher seen when there is no PMI socket", () => {
  assert.equal(pmiUnavailableReason({}), undefined);
  assert.equal(pmiUnavailableReason({ PMI_FD: "6", PMI_RANK: "0", PMI_SIZE: "2" }), undefined);
  assert.match(
    pmiUnavailableReason({ OMPI_COMM_WORLD_RANK: "1", OMPI_COMM_WORLD_SIZE: "4", PMIX_RANK: "1" }) ?? "",
    /^Open MPI's mpirun started this process \(OMPI_COMM_WORLD_SIZE=4\), and dcomm reads .* not from Open MPI's PMIx$/,
  );
  assert.match(
    pmiUnavailableReason({ PMIX_RANK: "0" }) ?? "",
    /^a PMIx launcher started this process \(PMIX_RANK/,
  );
  assert.match(
    pmiUnavailableReason({ PMI_RANK: "0", PMI_SIZE: "2", PMI_PORT: "vm:1234" }) ?? "",
    /^an MPI launcher set PMI_RANK=0 but passed no PMI_FD \(it has PMI_PORT=vm:1234\)/,
  );
});

// --- the cpu backend under mpiexec with nothing set: needs pmiStoreAddress in Rendezvous.join ----------

gatedTest(
  "init() with the cpu backend runs every collective under mpiexec -n 3 without MASTER_ADDR",
  gate,
  async () => {
    const job = await mpiexec(["-n", "3", DENO, "run", "-A", COLLECTIVES, ""]);
    const text = `stdout:\n${job.stdout.slice(-2000)}\nstderr:\n${job.stderr.slice(-3000)}`;
    assert.equal(job.code, 0, `expected exit code 0, found ${job.code}:\n${text}`);
    const results = job.results as RankResult[];
    assert.deepEqual(results.map((r) => r.rank), [0, 1, 2], text);
    checkResults(results, 3);
  },
);

gatedTest("the MNIST demo trains under mpiexec -n 3 without MASTER_ADDR", gate, async () => {
  const job = await mpiexec(["-n", "3", DENO, "run", "-A", "examples/train_mnist.ts", "--epochs", "1"]);
  const text = `stdout:\n${job.stdout.slice(-2000)}\nstderr:\n${job.stderr.slice(-3000)}`;
  assert.equal(job.code, 0, `expected exit code 0, found ${job.code}:\n${text}`);
  const accuracy = Number(/test accuracy ([\d.]+)%/.exec(job.stdout)?.[1]);
  assert.ok(accuracy > 85, `accuracy ${accuracy}% after one epoch\n${text}`);
  assert.match(job.stdout, /weights after training: identical on all 3 ranks/, text);
});
