import assert from "node:assert/strict";
import { UnsupportedError } from "../../../core/errors.ts";
import { CudaError } from "../../../core/errors.ts";
import { init } from "../../../backend/init.ts";
import { type DeviceTensor, isDeviceTensor } from "../../../backend/process_group.ts";
import { createNcclGroup, ncclBackendMissing } from "../../../backend/nccl/create.ts";
import { ncclDataType, ncclOpFor, ncclRedOp, ncclRuns, scalarBytes } from "../../../backend/nccl/_mapping.ts";
import { premulFactor } from "../../../core/dtype.ts";
import { NcclWork } from "../../../backend/nccl/nccl_work.ts";
import { NcclDataType, NcclRedOp } from "../../../ffi/nccl/constants.ts";
import type { DeviceBuffer } from "../../../gpu/device_buffer.ts";
import { MemoryStore } from "../../../store/memory_store.ts";
import { gatedTest } from "../../_util/skip.ts";
import { GPU_PRESENT, NCCL_MISSING } from "../../_util/gpu.ts";

const noGpu = { missing: NCCL_MISSING ?? GPU_PRESENT, ciCanSatisfy: NCCL_MISSING !== undefined };

Deno.test("ncclDataType() and ncclRedOp() map every dtype and op to NCCL's enums", () => {
  assert.equal(ncclDataType("float16"), NcclDataType.Float16);
  assert.equal(ncclDataType("bfloat16"), 9);
  assert.equal(ncclDataType("float32"), 7);
  assert.equal(ncclDataType("int64"), 4);
  assert.equal(ncclDataType("uint8"), 1);
  assert.equal(ncclRedOp("sum"), NcclRedOp.Sum);
  assert.equal(ncclRedOp("avg"), 4);
  assert.equal(ncclRedOp("max"), 2);
  assert.equal(ncclRedOp("min"), 3);
  // torch's NCCL backend: a bool is a uint8, sum and prod its max and min.
  assert.equal(ncclDataType("bool"), NcclDataType.Uint8);
  assert.deepEqual(
    (["sum", "prod", "min", "max", "band", "bor"] as const).map((op) => ncclOpFor(op, "bool")),
    ["max", "min", "min", "max", "min", "max"],
  );
  assert.equal(ncclOpFor("sum", "int32"), "sum");
  assert.throws(() => ncclRedOp("bxor"), /NCCL has no built-in op for "bxor"/);
});

Deno.test("ncclRuns() refuses the bitwise ops NCCL lacks but a bool's band and bor", () => {
  for (const op of ["band", "bor", "bxor"] as const) assert.equal(ncclRuns(op, "int32"), false, op);
  assert.equal(ncclRuns("band", "bool"), true);
  assert.equal(ncclRuns("bor", "bool"), true);
  assert.equal(ncclRuns("bxor", "bool"), false);
  for (const op of ["sum", "prod", "min", "max", "avg", "premulSum"] as const) {
    assert.equal(ncclRuns(op, "float32"), true, op);
  }
});

gatedTest(
  "the nccl group refuses bitwise ops at the front, before it needs a communicator or a GPU",
  { missing: NCCL_MISSING },
  async () => {
    const { NcclRank } = await import("../../../backend/nccl/_rank.ts");
    const { NcclProcessGroup } = await import("../../../backend/nccl/nccl_group.ts");
    const { nccl } = await import("../../../ffi/nccl/nccl.ts");
    const { applyTuning } = await import("../../../backend/nccl/tuning.ts");
    const pg = new NcclProcessGroup({
      rank: new NcclRank(0, nccl(), applyTuning()),
      id: 0,
      ranks: [0],
      globalRank: 0,
      comm: null,
      timeoutMs: 60_000,
    });
    for (const op of ["band", "bor", "bxor"] as const) {
      assert.throws(
        () => pg.allReduce(new Uint32Array(4), { op }),
        (e: unknown) =>
          e instanceof UnsupportedError &&
          e.message ===
            `Cannot all-reduce uint32 with op "${op}": the nccl backend cannot reduce with it; use the cpu ` +
              `or mpi backend, which run every op`,
      );
    }
    assert.throws(() => pg.reduce(new Uint8Array(4), { dtype: "bool", op: "bxor" }), UnsupportedError);
    assert.throws(
      () => pg.reduceScatter(new Int8Array(1), new Int8Array(1), { op: "bor" }),
      UnsupportedError,
    );
    // Checked first, in every backend's words: the op does not apply to the dtype at all.
    assert.throws(() => pg.allReduce(new Float32Array(4), { op: "band" }), TypeError);
    await pg.close();
  },
);

Deno.test("scalarBytes() encodes a PreMulSum scalar in the collective's own dtype", () => {
  assert.equal(new Float32Array(scalarBytes("float32", 0.25).buffer)[0], 0.25);
  assert.equal(new Float64Array(scalarBytes("float64", 1 / 3).buffer)[0], 1 / 3);
  assert.equal(new Float16Array(scalarBytes("float16", 0.5).buffer)[0], 0.5);
  // bfloat16 0.5 is 0x3f00: the upper half of float32 0.5 (0x3f000000).
  assert.equal(new Uint16Array(scalarBytes("bfloat16", 0.5).buffer)[0], 0x3f00);
  assert.equal(new BigInt64Array(scalarBytes("int64", 3).buffer)[0], 3n);
  assert.equal(new Int32Array(scalarBytes("int32", -2).buffer)[0], -2);
  // premulSum's factor, as the cpu and mpi backends' kernels round it, is the scalar NCCL gets.
  for (const x of [0.1, 1 / 3, -2.7, 1e-5]) {
    assert.equal(new Float16Array(scalarBytes("float16", x).buffer)[0], premulFactor("float16", x));
    assert.equal(new Float32Array(scalarBytes("float32", x).buffer)[0], premulFactor("float32", x));
    const bf16 = new Uint16Array(scalarBytes("bfloat16", x).buffer)[0];
    assert.equal(new Float32Array(new Uint32Array([bf16 << 16]).buffer)[0], premulFactor("bfloat16", x));
  }
});

Deno.test("isDeviceTensor() tells device tensors from TypedArrays", () => {
  const fake: DeviceTensor = { dtype: "float32", length: 4, byteLength: 16, device: 0, pointer: null };
  assert.equal(isDeviceTensor(fake), true);
  assert.equal(isDeviceTensor(new Float32Array(4)), false);
  assert.equal(isDeviceTensor({ dtype: "float32", length: 4 }), false);
  assert.equal(isDeviceTensor(null), false);
});

Deno.test("a DeviceBuffer has the DeviceTensor shape", () => {
  // Type-level: DeviceBuffer is assignable to DeviceTensor (the interface imports no GPU code).
  const check = (b: DeviceBuffer): DeviceTensor => b;
  assert.equal(typeof check, "function");
});

Deno.test("NcclWork.waitOn() is a no-op once the event is released, and the report is typed", async () => {
  const report = {
    collective: "allReduce",
    algorithm: "nccl",
    transport: "nccl",
    bytes: 16,
    bytesSent: 0,
    timeMs: 0.01,
    startedAt: 0,
    finishedAt: 0,
    gpuTimeMs: 0.01,
    dtype: "float32" as const,
    count: 4,
    device: 0,
    ncclVersion: "2.30.7",
    staged: false,
    tuning: { env: {}, applied: {}, config: {}, notes: [] },
  };
  const work = new NcclWork(Promise.resolve(report), { event: null });
  work.waitOn(null); // no event: nothing to wait for, no CUDA call
  const got = await work.wait();
  assert.equal(got?.gpuTimeMs, 0.01);
  assert.equal(work.report?.ncclVersion, "2.30.7");
});

gatedTest("ncclBackendMissing() says the nccl backend needs a GPU, with CUDA's error", noGpu, () => {
  assert.match(
    ncclBackendMissing() ?? "",
    /^no usable GPU: cudaGetDeviceCount failed: cudaErrorInsufficientDriver \(35\)/,
  );
});

gatedTest(
  'init({ backend: "nccl" }) without a GPU throws UnsupportedError caused by CudaError 35',
  noGpu,
  async () => {
    await assert.rejects(
      () => init({ backend: "nccl", rank: 0, worldSize: 1, env: {} }),
      (e: unknown) =>
        e instanceof UnsupportedError &&
        e.message.startsWith("Cannot start the nccl backend: no usable GPU (cudaGetDeviceCount failed: ") &&
        e.cause instanceof CudaError && e.cause.status === 35,
    );
  },
);

Deno.test("createNcclGroup() checks rank, size and tuning before touching NCCL", async () => {
  await using store = new MemoryStore();
  await assert.rejects(
    () => createNcclGroup({ rank: 2, size: 2, store }),
    /Invalid rank: expected an integer in 0\.\.1, found 2/,
  );
  await assert.rejects(() => createNcclGroup({ rank: 0, size: 0, store }), /Invalid size/);
  await assert.rejects(
    () => createNcclGroup({ rank: 0, size: 1, store, tuning: { buffSize: -1 } }),
    /Invalid NCCL tuning buffSize/,
  );
});
