/**
 * The `nccl` backend's error paths on a GPU: pointers that are not device memory are refused before
 * NCCL sees them (a bad pointer must not become a sticky illegal-address error), NCCL's own errors carry
 * its reason (a communicator NCCL keeps the error on is aborted), a collective that does not complete (held
 * behind a {@linkcode StreamGate}) is aborted by the watchdog or an abort signal, an aborted communicator
 * refuses later calls, and an init whose other ranks never come times out.
 */
import assert from "node:assert/strict";
import { DistError, NcclError, TimeoutError } from "../../core/errors.ts";
import type { DeviceTensor } from "../../backend/process_group.ts";
import { createNcclGroup } from "../../backend/nccl/create.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { gatedTest } from "../_util/skip.ts";
import { NCCL_GPU, oneRank } from "./_gpu.ts";
import { StreamGate } from "./_stream_gate.ts";

gatedTest("a pointer that is not device memory is refused before NCCL sees it", NCCL_GPU, async () => {
  await using pg = await oneRank();
  const host = new Float32Array(16);
  const fake: DeviceTensor = {
    dtype: "float32",
    length: 16,
    byteLength: 64,
    device: 0,
    pointer: Deno.UnsafePointer.of(host),
  };
  assert.throws(
    () => pg.allReduce(fake),
    /is not device memory \(cudaPointerGetAttributes says unregistered host memory\)/,
  );
  const bogus: DeviceTensor = { ...fake, pointer: Deno.UnsafePointer.create(0x1000n) };
  assert.throws(() => pg.allReduce(bogus), TypeError);
  assert.throws(
    () => pg.allReduce({ ...fake, device: 7 }),
    /on device 7 but this rank's communicator uses device 0/,
  );
  const disposed = DeviceBuffer.alloc(4);
  disposed[Symbol.dispose]();
  assert.throws(() => pg.allReduce(disposed), /Cannot all-reduce: Cannot use a disposed DeviceBuffer/);
  // The process's CUDA context is still healthy.
  using ok = DeviceBuffer.from(new Float32Array([1, 2]));
  await pg.allReduce(ok);
  assert.deepEqual([...(ok.toArray() as Float32Array)], [1, 2]);
});

gatedTest("argument errors throw at once, naming what was expected and found", NCCL_GPU, async () => {
  await using pg = await oneRank();
  using a = DeviceBuffer.alloc(8);
  using b = DeviceBuffer.alloc(8, { dtype: "int32" });
  assert.throws(() => pg.allGather(a, b), /input is int32 but output is float32/);
  using small = DeviceBuffer.alloc(3);
  assert.throws(() => pg.allGather(small, a), /output must hold 1 × 8 = 8 elements, found 3/);
  assert.throws(() => pg.broadcast(a, { root: 1 }), /root must be a rank in 0\.\.0, found 1/);
  assert.throws(() => pg.send(a, 0), /peer 0 is this rank/);
  assert.throws(() => pg.allReduce(a, { op: "mean" as never }), /Unknown reduce op/);
  assert.throws(() => pg.allReduce(new Uint16Array(4)), /A Uint16Array needs an explicit dtype/);
  assert.throws(() => pg.allReduce(a, { timeoutMs: 0 }), /expected timeoutMs to be a number > 0, found 0/);
});

gatedTest(
  "an error NCCL returns fails the Work with NCCL's own reason; a communicator NCCL keeps it on is aborted",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    using buf = DeviceBuffer.alloc(4);
    // 99 is no reduction operator.
    const work = pg.run(
      "bad-op",
      ({ comm, stream, symbols }) => symbols.ncclAllReduce(buf.pointer, buf.pointer, 4n, 7, 99, comm, stream),
    );
    await assert.rejects(
      () => work.wait(),
      (e: unknown) => e instanceof NcclError && e.status === 4 && /ncclInvalidArgument \(4\)/.test(e.message),
    );
    assert.ok(work.error instanceof NcclError);
    if (pg.abortReason === undefined) {
      await pg.allReduce(buf); // NCCL left the communicator usable
    } else {
      // NCCL kept the error on the (non-blocking) communicator (2.28 does): later calls name it.
      assert.equal(pg.abortReason, work.error);
      await assert.rejects(
        () => pg.allReduce(buf).wait(),
        (e: unknown) => e instanceof DistError && /was aborted \(.*ncclInvalidArgument/.test(e.message),
      );
    }
  },
);

gatedTest(
  "a collective that never completes is aborted by the watchdog; the group then refuses calls",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank({ timeoutMs: 60_000 });
    using buf = DeviceBuffer.alloc(1024);
    await using gate = new StreamGate();
    // The stream waits on the gate, so the all-reduce queued after it does not run until it opens.
    const hung = pg.run(
      "held-all-reduce",
      ({ comm, stream, symbols }) => {
        gate.hold(stream);
        return symbols.ncclAllReduce(buf.pointer, buf.pointer, 256n, 7, 0, comm, stream);
      },
      { timeoutMs: 1500 },
    );
    const opened = gate.openAfter(4000); // after the watchdog fired: the abort waits for the stream
    const started = performance.now();
    await assert.rejects(
      () => hung.wait(),
      (e: unknown) =>
        e instanceof TimeoutError &&
        /did not finish within 1500 ms; the communicator was aborted \(ncclCommAbort\)/.test(e.message),
    );
    const waited = performance.now() - started;
    assert.ok(waited >= 1400 && waited < 20_000, `the watchdog fired after ${waited} ms`);
    assert.ok(pg.abortReason instanceof TimeoutError);
    const later = pg.allReduce(buf);
    await assert.rejects(
      () => later.wait(),
      (e: unknown) => e instanceof DistError && /was aborted/.test(e.message),
    );
    await opened;
  },
);

gatedTest("an abort signal aborts a running collective and its communicator", NCCL_GPU, async () => {
  await using pg = await oneRank();
  using buf = DeviceBuffer.alloc(16);
  await using gate = new StreamGate();
  const controller = new AbortController();
  const hung = pg.run(
    "held-all-reduce",
    ({ comm, stream, symbols }) => {
      gate.hold(stream);
      return symbols.ncclAllReduce(buf.pointer, buf.pointer, 4n, 7, 0, comm, stream);
    },
    { signal: controller.signal },
  );
  const opened = gate.openAfter(3000);
  setTimeout(() => controller.abort("the test gave up"), 300);
  await assert.rejects(() => hung.wait(), /Aborted the held-all-reduce .*the test gave up/);
  assert.ok(pg.abortReason !== undefined);
  await opened;
});

gatedTest("init times out, aborted, when the other ranks never join", NCCL_GPU, async () => {
  await using store = new MemoryStore();
  const started = performance.now();
  await assert.rejects(
    () => createNcclGroup({ rank: 0, size: 2, store, device: 0, timeoutMs: 2000, prefix: "lonely" }),
    (e: unknown) =>
      e instanceof TimeoutError && /NCCL init of rank 0 of 2 did not finish within 2000 ms/.test(e.message),
  );
  const waited = performance.now() - started;
  assert.ok(waited >= 1900 && waited < 30_000, `gave up after ${waited} ms`);
});
