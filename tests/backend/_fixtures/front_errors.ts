/**
 * One rank's answers to the same bad calls, on the backend named by the first argument (`cpu`, `mpi`,
 * `nccl`): prints `RESULT {json}` with each call's error as `Name: message`. The cpu and mpi groups are
 * worlds of one made by `init`; the nccl group is a world of one over the real libnccl whose communicator
 * is never created (no GPU is needed: every call here is refused before it reaches NCCL).
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import { ANY_SOURCE, type ProcessGroup } from "../../../backend/process_group.ts";
import { nccl } from "../../../ffi/nccl/nccl.ts";
import { NcclRank } from "../../../backend/nccl/_rank.ts";
import { NcclProcessGroup } from "../../../backend/nccl/nccl_group.ts";
import { applyTuning } from "../../../backend/nccl/tuning.ts";

function answer(f: () => unknown): Promise<string> {
  let result: unknown;
  try {
    result = f();
  } catch (e) {
    return Promise.resolve(`${(e as Error).name}: ${(e as Error).message}`);
  }
  return Promise.resolve(result).then(
    () => "no error",
    (e) => `${(e as Error).name}: ${(e as Error).message}`,
  );
}

async function group(backend: string): Promise<ProcessGroup> {
  if (backend === "cpu") return await init({ rank: 0, worldSize: 1, env: {} });
  if (backend === "mpi") return await init({ backend: "mpi" });
  if (backend === "nccl") {
    const ctx = new NcclRank(0, nccl(), applyTuning());
    return new NcclProcessGroup({
      rank: ctx,
      id: 0,
      ranks: [0],
      globalRank: 0,
      comm: null,
      timeoutMs: 60_000,
    });
  }
  throw new Error(`unknown backend ${backend}`);
}

const pg = await group(Deno.args[0]);
const f = new Float32Array(8);
const detachedBuffer = new ArrayBuffer(16);
const detached = new Float32Array(detachedBuffer);
structuredClone(detachedBuffer, { transfer: [detachedBuffer] });
const aborted = new AbortController();
aborted.abort("stop");
const errors: Record<string, string> = {
  root: await answer(() => pg.broadcast(f, { root: 1 })),
  negativeRoot: await answer(() => pg.reduce(f, { root: -1 })),
  fractionalRoot: await answer(() => pg.broadcast(f, { root: 0.5 })),
  gatherLength: await answer(() => pg.allGather(new Float32Array(7), f)),
  scatterLength: await answer(() => pg.reduceScatter(new Float32Array(3), f)),
  allToAllLength: await answer(() => pg.allToAll(new Float32Array(7), f)),
  rootGatherLength: await answer(() => pg.gather(new Float32Array(7), f)),
  rootScatterLength: await answer(() => pg.scatter(new Float32Array(3), f)),
  gatherNoOutput: await answer(() => pg.gather(null, f)),
  scatterNoInput: await answer(() => pg.scatter(f, null)),
  gatherRoot: await answer(() => pg.gather(f, f, { root: 2 })),
  countsList: await answer(() => pg.allGather(f, f, { counts: [8, 1] })),
  countsNegative: await answer(() => pg.reduceScatter(f, f, { counts: [-1] })),
  countsOwn: await answer(() => pg.allGather(f, new Float32Array(3), { counts: [8] })),
  countsSum: await answer(() => pg.scatter(new Float32Array(3), f, { counts: [3] })),
  sendCountsOnly: await answer(() => pg.allToAll(f, f, { sendCounts: [8] })),
  selfCounts: await answer(() => pg.allToAll(new Float32Array(7), f, { sendCounts: [8], recvCounts: [7] })),
  dtypes: await answer(() => pg.allGather(new Int32Array(8), f)),
  dtypeOption: await answer(() => pg.allReduce(f, { dtype: "float64" })),
  op: await answer(() => pg.allReduce(f, { op: "median" as never })),
  uint16: await answer(() => pg.allReduce(new Uint16Array(4))),
  clamped: await answer(() => pg.allReduce(new Uint8ClampedArray(4) as never)),
  notTensor: await answer(() => pg.allReduce([1, 2] as never)),
  peerSelf: await answer(() => pg.send(f, 0)),
  peerRange: await answer(() => pg.recv(f, 99)),
  rootString: await answer(() => pg.broadcast(f, { root: "0" as never })),
  anySource: await answer(() => pg.recv(f, ANY_SOURCE)),
  anySourceBatch: await answer(() => pg.batchIsendIrecv([{ op: "recv", tensor: f, peer: ANY_SOURCE }])),
  timeout: await answer(() => pg.barrier({ timeoutMs: 0 })),
  timeoutType: await answer(() => pg.allReduce(f, { timeoutMs: "5" as never })),
  servers: await answer(() => pg.allReduce(f, { algorithm: "auto", servers: 0 })),
  signal: await answer(() => pg.allReduce(f, { signal: {} as never })),
  options: await answer(() => pg.allReduce(f, null as never)),
  detached: await answer(() => pg.allReduce(detached)),
  resizable: await answer(() => pg.allReduce(new Float32Array(new ArrayBuffer(16, { maxByteLength: 32 })))),
  aborted: await answer(() => pg.allReduce(f, { signal: aborted.signal })),
  algorithm: await answer(() => pg.allReduce(f, { algorithm: "butterfly" })),
  commDtypeBad: await answer(() => pg.allReduce(f, { commDtype: "int8" })),
  commDtype: await answer(() => pg.allReduce(new Float32Array(4), { commDtype: "float16" })),
  compressionBad: await answer(() => pg.allReduce(f, { compression: { codec: "topk", k: 0 } })),
  compression: await answer(() => pg.allReduce(new Float32Array(4), { compression: { codec: "int8" } })),
  // Ops that do not apply to the dtype, and premulSum's factor.
  bitwiseFloat: await answer(() => pg.allReduce(f, { op: "band" })),
  bitwiseReduce: await answer(() => pg.reduce(new Float64Array(2), { op: "bor" })),
  premulInteger: await answer(() => pg.allReduce(new Int32Array(2), { op: "premulSum", factor: 2 })),
  premulNoFactor: await answer(() => pg.allReduce(f, { op: "premulSum" })),
  premulFactorType: await answer(() => pg.reduceScatter(f, f, { op: "premulSum", factor: "2" as never })),
  premulNaN: await answer(() => pg.allReduce(f, { op: "premulSum", factor: NaN })),
  premulInfinite: await answer(() => pg.reduce(f, { op: "premulSum", factor: -Infinity })),
  premulOverflow: await answer(() => pg.allReduce(new Float16Array(2), { op: "premulSum", factor: 1e5 })),
  factorWithSum: await answer(() => pg.allReduce(f, { factor: 0.5 })),
  boolAvg: await answer(() => pg.allReduce(new Uint8Array(2), { dtype: "bool", op: "avg" })),
  boolPremul: await answer(() =>
    pg.allReduce(new Uint8Array(2), { dtype: "bool", op: "premulSum", factor: 1 })
  ),
  boolInt8: await answer(() => pg.allReduce(new Int8Array(2), { dtype: "bool" })),
  // A valid call the nccl backend cannot run (NCCL has no bitwise ops): refused there, run elsewhere.
  bitwise: await answer(() => pg.allReduce(new Int32Array(2), { op: "bxor" })),
};
// Last, since it ends the group: cpu revokes (and the next call says so), mpi and nccl refuse.
errors.shrink = pg.backend === "cpu" ? "(tests/backend/shrink_test.ts)" : await answer(() => pg.shrink());
errors.revokeBad = await answer(() => pg.revoke(7 as never));
errors.revoke = await answer(() => pg.revoke("the test's"));
errors.afterRevoke = await answer(() => pg.barrier());
await pg.close();
const afterClose: Record<string, string> = {
  allReduce: await answer(() => pg.allReduce(f)),
  broadcast: await answer(() => pg.broadcast(f)),
  barrier: await answer(() => pg.barrier()),
  newGroup: await answer(() => pg.newGroup([0])),
};
console.log(`RESULT ${JSON.stringify({ errors, afterClose })}`);
