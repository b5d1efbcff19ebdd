/**
 * One call front for every backend: the same bad calls, made on a cpu, an mpi and an nccl world of one
 * (each in its own process, `_fixtures/front_errors.ts`), get the same errors, word for word, except the
 * backend's own (which algorithms it runs). The nccl group runs over the real libnccl without a
 * communicator: every call here is refused before NCCL would see it, so no GPU is needed.
 *
 * @module
 */
import assert from "node:assert/strict";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { NCCL_MISSING } from "../_util/gpu.ts";

const FIXTURE = new URL("./_fixtures/front_errors.ts", import.meta.url).pathname;

interface Answers {
  errors: Record<string, string>;
  afterClose: Record<string, string>;
}

async function answers(backend: string): Promise<Answers> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (/^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|PMI_\w+|SLURM_\w+)$/.test(name)) {
      delete env[name];
    }
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", FIXTURE, backend],
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `${backend}: no RESULT line\n${stdout}\n${new TextDecoder().decode(out.stderr)}`);
  assert.equal(out.code, 0, backend);
  return JSON.parse(line.slice(7));
}

/** Each answer is an error of the expected class, not "no error". */
function checkShapes(a: Answers, backend: string): void {
  const expected: Record<string, string> = {
    root: "RangeError",
    negativeRoot: "RangeError",
    fractionalRoot: "RangeError",
    gatherLength: "RangeError",
    scatterLength: "RangeError",
    allToAllLength: "RangeError",
    rootGatherLength: "RangeError",
    rootScatterLength: "RangeError",
    gatherNoOutput: "TypeError",
    scatterNoInput: "TypeError",
    gatherRoot: "RangeError",
    countsList: "RangeError",
    countsNegative: "RangeError",
    countsOwn: "RangeError",
    countsSum: "RangeError",
    sendCountsOnly: "TypeError",
    selfCounts: "RangeError",
    dtypes: "TypeError",
    dtypeOption: "TypeError",
    op: "TypeError",
    uint16: "TypeError",
    clamped: "TypeError",
    notTensor: "TypeError",
    peerSelf: "RangeError",
    peerRange: "RangeError",
    rootString: "TypeError",
    timeout: "RangeError",
    timeoutType: "RangeError",
    servers: "RangeError",
    signal: "TypeError",
    options: "TypeError",
    detached: "TypeError",
    resizable: "TypeError",
    aborted: "DistError",
    bitwiseFloat: "TypeError",
    bitwiseReduce: "TypeError",
    premulInteger: "TypeError",
    premulNoFactor: "TypeError",
    premulFactorType: "TypeError",
    premulNaN: "RangeError",
    premulInfinite: "RangeError",
    premulOverflow: "RangeError",
    factorWithSum: "TypeError",
    boolAvg: "TypeError",
    boolPremul: "TypeError",
    boolInt8: "TypeError",
  };
  for (const [name, kind] of Object.entries(expected)) {
    assert.match(a.errors[name], new RegExp(`^${kind}: `), `${backend} ${name}: ${a.errors[name]}`);
  }
  assert.match(a.errors.signal, /expected signal to be an AbortSignal, found an object/);
  assert.equal(
    a.errors.rootString,
    'TypeError: Cannot broadcast: root must be a rank in 0..0 (a number), found the string "0"',
  );
  assert.match(a.errors.detached, /detached/);
  assert.match(
    a.errors.countsList,
    /^RangeError: Cannot all-gather: expected counts to be 1 integer >= 0 \(one per rank\), found \[8, 1\]/,
  );
  assert.match(
    a.errors.countsOwn,
    /^RangeError: Cannot all-gather: input must hold counts\[0\] = 8 elements, found 3/,
  );
  assert.match(
    a.errors.countsSum,
    /^RangeError: Cannot scatter: the root's input must hold the sum of counts = 3/,
  );
  assert.match(
    a.errors.rootGatherLength,
    /^RangeError: Cannot gather: the root's output must hold 1 × 8 = 8/,
  );
  assert.match(
    a.errors.scatterNoInput,
    /^TypeError: Cannot scatter: the root \(rank 0\) needs an input, found null/,
  );
  assert.match(a.errors.aborted, /Aborted before it started: stop/);
  // What was expected and what was found, for the ops and premulSum's factor.
  const opErrors: Record<string, RegExp> = {
    bitwiseFloat:
      /^TypeError: Cannot all-reduce: op "band" takes integer or bool tensors \(int8, uint8, int32, uint32, int64, uint64, bool\), found float32$/,
    bitwiseReduce: /^TypeError: Cannot reduce: op "bor" takes integer or bool tensors .*, found float64$/,
    premulInteger:
      /^TypeError: Cannot all-reduce: op "premulSum" takes float tensors \(float16, bfloat16, float32, float64\), found int32$/,
    premulNoFactor:
      /^TypeError: Cannot all-reduce: op "premulSum" needs a factor: expected factor to be a finite number, found none$/,
    premulFactorType:
      /^TypeError: Cannot reduce-scatter: .*expected factor to be a finite number, found string "2"$/,
    premulNaN: /^RangeError: Cannot all-reduce: op "premulSum" needs a finite factor: .*found NaN$/,
    premulInfinite: /^RangeError: Cannot reduce: .*found -Infinity$/,
    premulOverflow: /^RangeError: Cannot all-reduce: .*expected a finite float16, found 100000/,
    factorWithSum: /^TypeError: Cannot all-reduce: factor goes with op "premulSum" only, found op "sum"/,
    boolAvg:
      /^TypeError: Cannot all-reduce: op "avg" does not apply to bool tensors: expected one of sum, prod, min, max, band, bor, bxor .*found avg$/,
    boolPremul: /^TypeError: Cannot all-reduce: op "premulSum" takes float tensors .*found bool$/,
    boolInt8: /^TypeError: .*Int8Array holds int8, found dtype bool/,
  };
  for (const [name, pattern] of Object.entries(opErrors)) {
    assert.match(a.errors[name], pattern, `${backend} ${name}`);
  }
  for (const [name, message] of Object.entries(a.afterClose)) {
    assert.match(message, /^DistError: Cannot [a-z -]+: the process group is closed$/, `${backend} ${name}`);
  }
}

const ULFM =
  "MPI has no revoke or shrink without ULFM (MPIX_Comm_revoke, MPIX_Comm_shrink), which MPICH 4.0 does not have";
const NCCL_FT = "ncclCommRevoke (NCCL 2.28.7) and ncclCommShrink (2.27) are not bound yet";
const mpiGate = { missing: hasCommand("mpiexec") ? undefined : "MPI not installed (apt-get install mpich)" };
const ncclGate = { missing: NCCL_MISSING };

gatedTest("the cpu, mpi and nccl groups refuse the same bad calls with the same errors", {
  missing: mpiGate.missing ?? ncclGate.missing,
}, async () => {
  const cpu = await answers("cpu");
  const mpi = await answers("mpi");
  const nccl = await answers("nccl");
  for (const [backend, a] of [["cpu", cpu], ["mpi", mpi], ["nccl", nccl]] as const) checkShapes(a, backend);
  // Word for word, but for the algorithms each backend runs.
  const { algorithm: a1, commDtype: c1, compression: z1, bitwise: b1, ...cpuAll } = cpu.errors;
  const { algorithm: a2, commDtype: c2, compression: z2, bitwise: b2, ...mpiAll } = mpi.errors;
  const { algorithm: a3, commDtype: c3, compression: z3, bitwise: b3, ...ncclAll } = nccl.errors;
  // A receive from any rank: cpu and mpi have one (a world of one has no other rank); NCCL has none.
  const { anySource: s1, anySourceBatch: sb1, revoke: r1, afterRevoke: ar1, shrink: h1, ...cpuRest } = cpuAll;
  const { anySource: s2, anySourceBatch: sb2, revoke: r2, afterRevoke: ar2, shrink: h2, ...mpiRest } = mpiAll;
  const { anySource: s3, anySourceBatch: sb3, revoke: r3, afterRevoke: ar3, shrink: h3, ...ncclRest } =
    ncclAll;
  // Revoking: the cpu backend does (the next call fails with the RevokedError); MPICH and the nccl backend
  // refuse, saying why, and the group goes on.
  assert.deepEqual([r1, ar1], ["no error", "RevokedError: Group 0 revoked by rank 0: the test's"]);
  assert.deepEqual([r2, ar2], [
    "UnsupportedError: Cannot revoke a group of the mpi backend: " + ULFM,
    "no error",
  ]);
  assert.equal(
    r3,
    "UnsupportedError: Cannot revoke a group of the nccl backend: " + NCCL_FT,
  );
  assert.doesNotMatch(ar3, /Revoked/); // (a barrier without a GPU fails as it did before)
  assert.equal(h1, "(tests/backend/shrink_test.ts)");
  assert.equal(h2, "UnsupportedError: Cannot shrink a group of the mpi backend: " + ULFM);
  assert.equal(h3, "UnsupportedError: Cannot shrink a group of the nccl backend: " + NCCL_FT);
  assert.equal(cpu.errors.revokeBad, "TypeError: Cannot revoke: expected a reason string, found number");
  assert.equal(s1, "RangeError: Cannot recv from ANY_SOURCE: the group has no rank but this one");
  assert.equal(
    sb1,
    "RangeError: Cannot batchIsendIrecv (ops[0], a recv) from ANY_SOURCE: the group has no rank but this one",
  );
  assert.equal(
    s3,
    "UnsupportedError: Cannot recv from ANY_SOURCE: the nccl backend has no receive from any rank; name the peer",
  );
  assert.match(
    sb3,
    /^UnsupportedError: Cannot batchIsendIrecv \(ops\[0\], a recv\) from ANY_SOURCE: the nccl/,
  );
  assert.deepEqual([s2, sb2], [s1, sb1]);
  // The bitwise ops run on cpu and mpi; NCCL has none, and the nccl backend says so at the front.
  assert.equal(b1, "no error");
  assert.equal(b2, "no error");
  assert.match(
    b3,
    /^UnsupportedError: Cannot all-reduce int32 with op "bxor": the nccl backend cannot reduce with it; use the cpu or mpi backend/,
  );
  // So is compression, run on its communication thread; a bad one is refused alike by all three.
  assert.equal(z1, "no error");
  for (const [z, backend] of [[z2, "mpi"], [z3, "nccl"]]) {
    assert.match(
      z,
      new RegExp(
        `^UnsupportedError: Cannot all-reduce with compression: the ${backend} backend has no communication`,
      ),
    );
  }
  assert.match(
    cpu.errors.compressionBad,
    /^RangeError: Cannot all-reduce with compression: k must be an integer/,
  );
  // A narrower wire dtype is the cpu backend's alone.
  assert.equal(c1, "no error");
  assert.match(
    c2,
    /^UnsupportedError: Cannot all-reduce with commDtype: the mpi backend reduces in the tensor's own dtype/,
  );
  assert.match(
    c3,
    /^UnsupportedError: Cannot all-reduce with commDtype: the nccl backend reduces in the tensor's own dtype/,
  );
  assert.match(
    cpu.errors.commDtypeBad,
    /^TypeError: Cannot all-reduce: commDtype must be one of float16, bfloat16/,
  );
  assert.deepEqual(mpiRest, cpuRest);
  assert.deepEqual(ncclRest, cpuRest);
  assert.deepEqual(mpi.afterClose, cpu.afterClose);
  assert.deepEqual(nccl.afterClose, cpu.afterClose);
  assert.match(a1, /^TypeError: Unknown allReduce algorithm: expected "auto" or one of "segment", "ring"/);
  assert.match(
    a2,
    /^UnsupportedError: Cannot all-reduce with algorithm "butterfly": the mpi backend runs MPI's own/,
  );
  assert.match(
    a3,
    /^UnsupportedError: Cannot all-reduce with algorithm "butterfly": the nccl backend runs NCCL's own/,
  );
});
