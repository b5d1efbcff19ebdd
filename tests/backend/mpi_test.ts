/**
 * The mpi backend under real MPI jobs: each test runs `mpiexec -n N deno run -A _fixtures/mpi_rank.ts
 * <suite>` (1 to 4 ranks) and checks every rank's `RESULT` line: the rank checked its own results
 * against the seeded reference (integers exactly; floats within 2·n·eps·Σ|x|, see `_reference.ts`), and
 * all-reduce results must have the same bits on every rank. The last test runs the same seeded calls on
 * the cpu backend (processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) and compares the two backends.
 *
 * @module
 */
import assert from "node:assert/strict";
import { init } from "../../backend/init.ts";
import type { DType } from "../../core/dtype.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { type FdInfo, inspectFd, pmiSocketProblem } from "../../backend/_pmi_socket.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import type { MpiRankResult } from "./_fixtures/mpi_rank.ts";

const FIXTURE = new URL("./_fixtures/mpi_rank.ts", import.meta.url).pathname;
const DENO = Deno.execPath();

function whyNoMpi(): string | undefined {
  if (!hasCommand("mpiexec")) return "mpiexec not found (apt-get install mpich libmpich-dev)";
  return undefined;
}

const gate = { missing: whyNoMpi(), ciCanSatisfy: true };

/** The environment of a rank: ours, without any launcher's rank variables (this may run under one). */
function rankEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|DCOMM_STORE_HOSTED)$/
        .test(name) || /^(PMI_|PMIX_|OMPI_|MPI_LOCAL)/.test(name)
    ) delete env[name];
  }
  return { ...env, ...extra };
}

interface Run {
  results: MpiRankResult[];
  stderr: string;
}

function parse(stdout: string, stderr: string, expected: number, what: string): Run {
  const results = stdout.split("\n").filter((l) => l.startsWith("RESULT ")).map((l) =>
    JSON.parse(l.slice(7)) as MpiRankResult
  ).sort((a, b) => a.rank - b.rank);
  assert.equal(
    results.length,
    expected,
    `${what}: expected ${expected} RESULT lines, found ${results.length}\nstdout:\n${stdout.slice(-3000)}\n` +
      `stderr:\n${stderr.slice(-3000)}`,
  );
  const failures = results.flatMap((r) => r.failures);
  assert.deepEqual(
    failures,
    [],
    `${what}: ${failures.length} failures:\n${failures.slice(0, 20).join("\n")}`,
  );
  return { results, stderr };
}

/** Runs the fixture's `suite` under `mpiexec -n ranks`. */
async function mpiexec(ranks: number, suite: string, timeoutMs = 60_000): Promise<Run> {
  const out = await new Deno.Command("mpiexec", {
    args: ["-n", String(ranks), DENO, "run", "-A", FIXTURE, suite],
    env: rankEnv(),
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  const what = `mpiexec -n ${ranks} mpi_rank.ts ${suite}`;
  const run = parse(stdout, stderr, ranks, what);
  assert.equal(
    out.code,
    0,
    `${what} exited with ${out.code}${out.signal ? ` (signal ${out.signal})` : ""}:\nstdout:\n${
      stdout.slice(-2000)
    }\nstderr:\n${stderr.slice(-3000)}`,
  );
  return run;
}

/** Runs the fixture's `suite` as `ranks` cpu-backend processes rendezvousing on a free port. */
async function cpuRanks(ranks: number, suite: string, timeoutMs = 60_000): Promise<Run> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const signal = AbortSignal.timeout(timeoutMs);
  const outs = await Promise.all(Array.from({ length: ranks }, (_, rank) =>
    new Deno.Command(DENO, {
      args: ["run", "-A", FIXTURE, suite, "--backend", "cpu"],
      env: rankEnv({
        RANK: String(rank),
        WORLD_SIZE: String(ranks),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
      }),
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
      signal,
    }).output()));
  const stdout = outs.map((o) => new TextDecoder().decode(o.stdout)).join("\n");
  const stderr = outs.map((o) => new TextDecoder().decode(o.stderr)).join("\n");
  const run = parse(stdout, stderr, ranks, `${ranks} cpu ranks, mpi_rank.ts ${suite}`);
  outs.forEach((o, r) =>
    assert.equal(o.code, 0, `cpu rank ${r} exited with ${o.code}:\n${stderr.slice(-3000)}`)
  );
  return run;
}

/** Every rank must hold the same bits after each all-reduce. */
function assertSameHashes(results: readonly MpiRankResult[]): void {
  const [first, ...rest] = results;
  assert(Object.keys(first.hashes).length > 0, "expected all-reduce hashes");
  for (const other of rest) {
    for (const [name, hash] of Object.entries(first.hashes)) {
      assert.equal(other.hashes[name], hash, `${name}: rank ${other.rank} differs from rank ${first.rank}`);
    }
  }
}

for (const ranks of [1, 2, 3, 4]) {
  gatedTest(`MpiProcessGroup runs every collective, dtype and op on ${ranks} ranks`, gate, async () => {
    const { results } = await mpiexec(ranks, "collectives");
    assert(
      results.every((r) => r.ran > 600),
      `expected > 600 cases per rank, found ${results.map((r) => r.ran)}`,
    );
    assertSameHashes(results);
  });
}

for (const ranks of [3, 4]) {
  gatedTest(`MpiProcessGroup.newGroup() makes sub-groups of ${ranks} ranks`, gate, async () => {
    const { results } = await mpiexec(ranks, "groups");
    assert(results.every((r) => r.ran === 6));
  });
}

gatedTest(
  "MpiProcessGroup.send()/recv() pass every dtype around a ring of 3 and report length mismatches",
  gate,
  async () => {
    const { results } = await mpiexec(3, "p2p");
    assert(results.every((r) => r.ran >= 31));
  },
);

gatedTest(
  "MpiProcessGroup runs un-awaited collectives while the rank computes and keeps the event loop turning",
  gate,
  async () => {
    const { results } = await mpiexec(2, "overlap");
    assert(results.every((r) => r.ran === 5));
    const rank0 = results[0].notes;
    assert(Number(rank0.lateTicks) > 0, `expected timer ticks while waiting, found ${rank0.lateTicks}`);
  },
);

gatedTest(
  "MpiProcessGroup throws TypeError/RangeError/UnsupportedError on bad arguments before anything is sent",
  gate,
  async () => {
    const { results } = await mpiexec(2, "args");
    assert(results.every((r) => r.ran === 23), `cases: ${results.map((r) => r.ran)}`);
  },
);

gatedTest(
  "MpiProcessGroup cancels a timed-out recv but stops after a timed-out collective",
  gate,
  async () => {
    const { results } = await mpiexec(2, "timeout");
    assert(results.every((r) => r.ran === 3));
    const waited = Number(results[0].notes.recvTimeoutMs);
    assert(waited >= 290 && waited < 10_000, `expected the recv to time out after ~300 ms, found ${waited}`);
  },
);

gatedTest('init({ backend: "mpi" }) without a launcher is a world of one', gate, async () => {
  const out = await new Deno.Command(DENO, {
    args: ["run", "-A", FIXTURE, "args"],
    env: rankEnv(),
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const { results } = parse(
    new TextDecoder().decode(out.stdout),
    new TextDecoder().decode(out.stderr),
    1,
    "singleton",
  );
  assert.equal(results[0].size, 1);
  assert.equal(out.code, 0);
});

/** Unit roundoff of each float dtype. */
const EPS: Partial<Record<DType, number>> = {
  float16: 2 ** -11,
  bfloat16: 2 ** -8,
  float32: 2 ** -24,
  float64: 2 ** -53,
};

gatedTest(
  "The same seeded inputs give the same results on the cpu and mpi backends (3 ranks)",
  gate,
  async () => {
    const [mpi, cpu] = [await mpiexec(3, "compare"), await cpuRanks(3, "compare")];
    const ranks = 3;
    let compared = 0;
    for (let r = 0; r < ranks; r++) {
      const a = mpi.results[r].results;
      const b = cpu.results[r].results;
      assert.deepEqual(
        Object.keys(a).sort(),
        Object.keys(b).sort(),
        `rank ${r}: the backends ran different cases`,
      );
      for (const [name, x] of Object.entries(a)) {
        const y = b[name];
        if (x.hash !== undefined) {
          // Integers: exactly the same bits.
          assert.equal(x.hash, y.hash, `rank ${r} ${name}: mpi and cpu differ`);
        } else {
          // Floats: the backends reduce in different orders (and round 16-bit floats at different steps),
          // so they agree within 8·n·eps relative to the values (the inputs are within ±1.5).
          const eps = EPS[x.dtype] ?? 0;
          const xs = x.values ?? [], ys = y.values ?? [];
          assert.equal(xs.length, ys.length, `rank ${r} ${name}: lengths differ`);
          for (let i = 0; i < xs.length; i++) {
            const tol = 8 * ranks * eps * Math.max(1, Math.abs(xs[i]), Math.abs(ys[i]));
            assert(
              Math.abs(xs[i] - ys[i]) <= tol,
              `rank ${r} ${name} element ${i}: mpi ${xs[i]} vs cpu ${ys[i]} (tolerance ${tol})`,
            );
          }
        }
        compared++;
      }
    }
    assert(compared > 250, `expected > 250 results compared, found ${compared}`);
  },
);

Deno.test('init({ backend: "mpi" }) refuses the cpu backend\'s rendezvous and transport options', async () => {
  // Thrown before MPI is opened or initialised: this test process never calls MPI_Init.
  await assert.rejects(() => init({ backend: "mpi", transport: "tcp" }), UnsupportedError);
  await assert.rejects(() => init({ backend: "mpi", initMethod: "tcp://127.0.0.1:1" }), UnsupportedError);
});

// npx runs deno from a node process that does not pass the PMI socket on: deno's own files and sockets
// then sit at the number PMI_FD names, and MPICH died inside MPI_Init ("PMI_Get_appnum returned -1").
gatedTest(
  'init({ backend: "mpi" }) under mpiexec -n 3 npx deno refuses before MPI_Init and says what to run',
  { missing: whyNoMpi() ?? (hasCommand("npx") ? undefined : "npx not found"), ciCanSatisfy: true },
  async () => {
    const out = await new Deno.Command("mpiexec", {
      args: ["-n", "3", "npx", "-y", `deno@${Deno.version.deno}`, "run", "-A", FIXTURE, "args"],
      env: rankEnv({ NO_COLOR: "1" }),
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.notEqual(out.code, 0, `expected the job to fail, found exit code 0:\n${stderr.slice(-3000)}`);
    assert.doesNotMatch(stderr, /Fatal error in internal_Init_thread|MPIR_pmi_init/, stderr.slice(-3000));
    const refusals = stderr.match(/DistError: Cannot initialise MPI: PMI_FD=\d+ should name the socket/g) ??
      [];
    assert.ok(refusals.length >= 1, `expected the PMI_FD refusal, found:\n${stderr.slice(-3000)}`);
    assert.ok(
      stderr.includes(
        `mpiexec -n 3 "$(npx -y deno@${Deno.version.deno} eval 'console.log(Deno.execPath())')" run -A `,
      ),
      `expected the command to run instead, found:\n${stderr.slice(-3000)}`,
    );
  },
);

Deno.test("pmiSocketProblem() accepts only an inherited blocking socket at PMI_FD", () => {
  const at = (info: FdInfo | null | undefined) => (fd: number): FdInfo | null | undefined => {
    assert.equal(fd, 8);
    return info;
  };
  const env = { PMI_FD: "8", PMI_SIZE: "3" };
  // What mpiexec passes to deno run directly: a socket, blocking, not close-on-exec.
  assert.equal(pmiSocketProblem(env, at({ target: "socket:[1]", flags: 0o2 })), undefined);
  assert.equal(pmiSocketProblem({}, at(null)), undefined);
  assert.equal(pmiSocketProblem(env, at(undefined)), undefined, "unknowable (no /proc): no verdict");
  const cases: [FdInfo | null, RegExp][] = [
    [null, /found fd 8 is not open in this process/],
    [
      { target: "socket:[2]", flags: 0o2004002 },
      /found fd 8 is socket:\[2\], which this process opened itself/,
    ],
    [{ target: "/root/.cache/deno/x", flags: 0o2500002 }, /found fd 8 is \/root\/\.cache\/deno\/x, which/],
    [{ target: "/tmp/f", flags: 0o2 }, /found fd 8 is \/tmp\/f, not a socket/],
    [{ target: "socket:[3]", flags: 0o4002 }, /found fd 8 is a non-blocking socket/],
  ];
  for (const [info, found] of cases) {
    const problem = pmiSocketProblem(env, at(info)) ?? "";
    assert.match(problem, /^Cannot initialise MPI: PMI_FD=8 should name the socket mpiexec passed/);
    assert.match(problem, found);
    assert.match(problem, /Run the deno binary itself under mpiexec: mpiexec -n 3 "\$\(npx -y deno@/);
  }
});

Deno.test("inspectFd() reads this process's descriptors: deno's own are close-on-exec", () => {
  if (Deno.build.os !== "linux") return;
  assert.equal(inspectFd(1 << 20), null);
  const own = [...Deno.readDirSync("/proc/self/fd")].map((e) => Number(e.name)).filter((fd) => fd > 2)
    .map((fd) => inspectFd(fd)).filter((i): i is FdInfo => !!i);
  assert.ok(own.length > 0, "expected descriptors above 2");
  assert.ok(
    own.some((i) => i.flags & 0o2000000),
    `expected a close-on-exec one, found ${JSON.stringify(own)}`,
  );
  // A PMI_FD naming one of them is refused (this process never calls MPI_Init here).
  const fd = [...Deno.readDirSync("/proc/self/fd")].map((e) => Number(e.name))
    .find((n) => n > 2 && ((inspectFd(n)?.flags ?? 0) & 0o2000000));
  assert.match(pmiSocketProblem({ PMI_FD: String(fd) }) ?? "", /which this process opened itself/);
});
