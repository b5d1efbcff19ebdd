/**
 * Every collective of the `nccl` backend on a one-rank communicator (one GPU cannot host two NCCL ranks),
 * on device buffers and on staged host arrays, for every dtype and op, checked element by element
 * against the TypeScript reference computed from each rank's input. The multi-rank logic of the same
 * collectives is covered by the CPU backends' tests.
 */
import assert from "node:assert/strict";
import type { TypedArray } from "../../core/dtype.ts";
import { isBitwise, reduceOpsFor } from "../../core/dtype.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { Stream } from "../../gpu/stream.ts";
import { init } from "../../backend/init.ts";
import { gatedTest } from "../_util/skip.ts";
import { getValue, mismatches, NCCL_GPU, oneRank, rankInput, referenceReduce, TEST_DTYPES } from "./_gpu.ts";

const N = 4099; // odd, so no size is a multiple of anything NCCL likes

function identity(array: TypedArray, dtype: (typeof TEST_DTYPES)[number]): number[] {
  return Array.from({ length: array.length }, (_, i) => getValue(array, dtype, i));
}

gatedTest("allReduce() of every dtype and op on device buffers matches the reference", NCCL_GPU, async () => {
  await using pg = await oneRank();
  assert.equal(pg.backend, "nccl");
  assert.equal(pg.size, 1);
  for (const dtype of TEST_DTYPES) {
    // Every op NCCL has (premulSum, which takes a factor, has a test of its own).
    for (const op of reduceOpsFor(dtype).filter((o) => !isBitwise(o) && o !== "premulSum")) {
      const input = rankInput(dtype, N, 0);
      using buf = DeviceBuffer.from(input, { dtype });
      const report = await pg.allReduce(buf, { op }).wait();
      const expected = referenceReduce([input], dtype, op);
      assert.deepEqual(mismatches(buf.toArray(), dtype, expected), [], `${dtype} ${op}`);
      assert.equal(report?.transport, "nccl");
      assert.equal(report?.dtype, dtype, "reduced in its own dtype");
      assert.equal(report?.staged, false);
      assert.ok((report?.gpuTimeMs ?? -1) >= 0);
    }
  }
});

gatedTest(
  "allReduce() with a scale runs ncclRedOpCreatePreMulSum in the tensor's dtype",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    for (const dtype of ["float32", "float64", "float16", "bfloat16"] as const) {
      const input = rankInput(dtype, N, 0);
      using buf = DeviceBuffer.from(input, { dtype });
      await pg.allReduce(buf, { scale: 0.5 });
      assert.deepEqual(
        mismatches(buf.toArray(), dtype, referenceReduce([input], dtype, "sum", 0.5)),
        [],
        dtype,
      );
    }
    await assert.rejects(async () => {
      using buf = DeviceBuffer.alloc(4);
      await pg.allReduce(buf, { op: "max", scale: 2 });
    }, /scale works with op "sum" only/);
  },
);

gatedTest(
  'op "premulSum" with a factor is NCCL\'s PreMulSum, on allReduce, reduce and reduceScatter',
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    for (const dtype of ["float32", "float64", "float16", "bfloat16"] as const) {
      for (const factor of [0.5, -0.25]) {
        const input = rankInput(dtype, N, 0);
        const expected = referenceReduce([input], dtype, "sum", factor);
        {
          using buf = DeviceBuffer.from(input, { dtype });
          await pg.allReduce(buf, { op: "premulSum", factor });
          assert.deepEqual(mismatches(buf.toArray(), dtype, expected), [], `allReduce ${dtype} ${factor}`);
          using again = DeviceBuffer.from(input, { dtype });
          await pg.reduce(again, { op: "premulSum", factor, root: 0 });
          assert.deepEqual(mismatches(again.toArray(), dtype, expected), [], `reduce ${dtype} ${factor}`);
          using out = DeviceBuffer.alloc(N, { dtype });
          await pg.reduceScatter(out, again.view(0, N), { op: "premulSum", factor: 1 });
          assert.deepEqual(mismatches(out.toArray(), dtype, expected), [], `reduceScatter ${dtype}`);
        }
        // A host array, staged.
        const host = rankInput(dtype, N, 0);
        await pg.allReduce(host, { op: "premulSum", factor, dtype });
        assert.deepEqual(mismatches(host, dtype, expected), [], `staged ${dtype} ${factor}`);
      }
    }
    assert.throws(() => pg.allReduce(new Float32Array(4), { op: "premulSum" }), TypeError);
    assert.throws(
      () => pg.allReduce(new Float32Array(4), { op: "premulSum", factor: 2, scale: 2 }),
      /scale works with op "sum" only, found op "premulSum"/,
    );
  },
);

gatedTest("bool tensors reduce as ncclUint8 by max and min; bitwise ops are refused", NCCL_GPU, async () => {
  await using pg = await oneRank();
  const flags = new Uint8Array(N).map((_, i) => (i * 7) % 3 === 0 ? 1 : 0);
  for (const op of ["sum", "prod", "min", "max", "band", "bor"] as const) {
    using buf = DeviceBuffer.from(flags, { dtype: "bool" });
    await pg.allReduce(buf, { op });
    assert.deepEqual(buf.toArray(), flags, op); // one rank: the flags themselves
    const host = flags.slice();
    await pg.allReduce(host, { op, dtype: "bool" });
    assert.deepEqual(host, flags, `staged ${op}`);
  }
  assert.throws(() => pg.allReduce(flags.slice(), { op: "bxor", dtype: "bool" }), UnsupportedError);
  assert.throws(() => pg.allReduce(new Int32Array(4), { op: "band" }), UnsupportedError);
  assert.throws(() => pg.allReduce(flags.slice(), { op: "avg", dtype: "bool" }), TypeError);
});

gatedTest("allReduce() of a host TypedArray is staged and copied back", NCCL_GPU, async () => {
  await using pg = await oneRank();
  for (const dtype of ["float32", "int64", "float16"] as const) {
    const input = rankInput(dtype, N, 0);
    const expected = referenceReduce([input], dtype, "sum");
    const report = await pg.allReduce(input).wait();
    assert.equal(report?.staged, true);
    assert.deepEqual(mismatches(input, dtype, expected), [], dtype);
  }
  const bf16 = rankInput("bfloat16", N, 0) as Uint16Array;
  await pg.allReduce(bf16, { dtype: "bfloat16", op: "avg" });
  assert.deepEqual(
    mismatches(bf16, "bfloat16", referenceReduce([rankInput("bfloat16", N, 0)], "bfloat16", "avg")),
    [],
  );
});

gatedTest(
  "broadcast(), reduce(), allGather(), reduceScatter() and allToAll() match the reference",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    for (const dtype of TEST_DTYPES) {
      const input = rankInput(dtype, N, 0);
      const copy = identity(input, dtype);
      {
        using buf = DeviceBuffer.from(input, { dtype });
        await pg.broadcast(buf, { root: 0 });
        assert.deepEqual(mismatches(buf.toArray(), dtype, copy), [], `broadcast ${dtype}`);
        await pg.reduce(buf, { root: 0, op: "max" });
        assert.deepEqual(
          mismatches(buf.toArray(), dtype, referenceReduce([input], dtype, "max")),
          [],
          `reduce ${dtype}`,
        );
      }
      for (const collective of ["allGather", "reduceScatter", "allToAll"] as const) {
        using inp = DeviceBuffer.from(input, { dtype });
        using out = DeviceBuffer.alloc(N, { dtype });
        out.zero();
        if (collective === "allGather") await pg.allGather(out, inp);
        else if (collective === "reduceScatter") await pg.reduceScatter(out, inp, { op: "sum" });
        else await pg.allToAll(out, inp);
        // One rank: block 0 of the output is the whole input (reduced over one rank).
        assert.deepEqual(mismatches(out.toArray(), dtype, copy), [], `${collective} ${dtype}`);
      }
    }
  },
);

gatedTest(
  "gather() and scatter() match the reference on device buffers and staged host arrays",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    for (const dtype of TEST_DTYPES) {
      const input = rankInput(dtype, N, 0);
      const copy = identity(input, dtype);
      using inp = DeviceBuffer.from(input, { dtype });
      using out = DeviceBuffer.alloc(N, { dtype });
      out.zero();
      await pg.gather(out, inp, { root: 0 });
      assert.deepEqual(mismatches(out.toArray(), dtype, copy), [], `gather ${dtype}`);
      out.zero();
      await pg.scatter(out, inp, { root: 0 });
      assert.deepEqual(mismatches(out.toArray(), dtype, copy), [], `scatter ${dtype}`);
    }
    const host = new Float32Array(N).map((_, i) => i);
    const gathered = new Float32Array(N);
    await pg.gather(gathered, host);
    assert.deepEqual([...gathered], [...host]);
    const scattered = new Float32Array(N);
    await pg.scatter(scattered, host);
    assert.deepEqual([...scattered], [...host]);
  },
);

gatedTest("the v-forms (counts, sendCounts/recvCounts) run as grouped NCCL calls", NCCL_GPU, async () => {
  await using pg = await oneRank();
  for (const dtype of ["float32", "int32", "float16"] as const) {
    const input = rankInput(dtype, N, 0);
    const copy = identity(input, dtype);
    using inp = DeviceBuffer.from(input, { dtype });
    using out = DeviceBuffer.alloc(N, { dtype });
    const counts = [N];
    for (
      const run of [
        () => pg.allGather(out, inp, { counts }),
        () => pg.gather(out, inp, { counts }),
        () => pg.scatter(out, inp, { counts }),
        () => pg.reduceScatter(out, inp, { counts }),
        () => pg.allToAll(out, inp, { sendCounts: counts, recvCounts: counts }),
      ]
    ) {
      out.zero();
      await run();
      assert.deepEqual(mismatches(out.toArray(), dtype, copy), [], `${run} ${dtype}`);
    }
  }
});

gatedTest("collectives on views and on host arrays of every kind", NCCL_GPU, async () => {
  await using pg = await oneRank();
  using buf = DeviceBuffer.from(new Float32Array(100).map((_, i) => i));
  await pg.allReduce(buf.view(10, 20), { op: "prod" });
  const out = new Float32Array(100);
  const input = new Float32Array(100).map((_, i) => i * 2);
  await pg.allGather(out, input);
  assert.deepEqual([...out], [...input]);
  const rs = new Int32Array(10);
  await pg.reduceScatter(rs, new Int32Array(10).fill(3));
  assert.deepEqual([...rs], new Array(10).fill(3));
  await pg.barrier();
});

gatedTest("the Work report carries NCCL's version, the device and the tuning", NCCL_GPU, async () => {
  await using pg = await oneRank({ tuning: { proto: "Simple", maxCTAs: 8 } });
  using buf = DeviceBuffer.alloc(1 << 20);
  const report = await pg.allReduce(buf).wait();
  assert.equal(report?.collective, "allReduce");
  assert.equal(report?.bytes, 4 << 20);
  assert.equal(report?.device, 0);
  assert.match(report?.ncclVersion ?? "", /^2\.\d+\.\d+$/);
  assert.equal(report?.tuning.env["NCCL_PROTO"], "Simple");
  assert.equal(report?.tuning.config["maxCTAs"], 8);
  assert.ok((report?.finishedAt ?? 0) >= (report?.startedAt ?? Infinity));
  console.log(report);
});

gatedTest(
  "work.waitOn() makes a compute stream wait on the device for the collective",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    using compute = Stream.create({ nonBlocking: true });
    using grad = DeviceBuffer.from(new Float32Array(1 << 22).fill(2));
    using copy = DeviceBuffer.alloc(1 << 22);
    copy.zero();
    const work = pg.allReduce(grad, { op: "avg" });
    work.waitOn(compute);
    copy.copyFrom(grad, { stream: compute });
    await compute.done({ timeoutMs: 30_000 });
    assert.equal((copy.view(123456, 1).toArray() as Float32Array)[0], 2);
    await work;
    work.waitOn(compute); // completed: a no-op
  },
);

gatedTest("run() queues a grouped self send/receive under the same watchdog", NCCL_GPU, async () => {
  await using pg = await oneRank();
  using a = DeviceBuffer.from(new Float32Array([1, 2, 3, 4]));
  using b = DeviceBuffer.alloc(4);
  await pg.run("self-exchange", ({ comm, stream, symbols }) => {
    symbols.ncclGroupStart();
    symbols.ncclSend(a.pointer, 4n, 7, 0, comm, stream);
    symbols.ncclRecv(b.pointer, 4n, 7, 0, comm, stream);
    return symbols.ncclGroupEnd();
  });
  assert.deepEqual([...(b.toArray() as Float32Array)], [1, 2, 3, 4]);
});

gatedTest(
  "newGroup() splits the communicator (ncclCommSplit) and the child runs collectives",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    const child = await pg.newGroup([0]);
    assert.equal(child.rank, 0);
    assert.equal(child.size, 1);
    using buf = DeviceBuffer.from(new Float64Array([1.5, 2.5]));
    await child.allReduce(buf, { op: "sum" });
    await pg.allReduce(buf, { op: "sum" }); // ordered after the child's call across the two streams
    assert.deepEqual([...(buf.toArray() as Float64Array)], [1.5, 2.5]);
    await child.close();
  },
);

gatedTest(
  "many collectives in flight settle in order without blocking the event loop",
  NCCL_GPU,
  async () => {
    await using pg = await oneRank();
    using buf = DeviceBuffer.alloc(1 << 24);
    buf.zero();
    const works = Array.from({ length: 200 }, () => pg.allReduce(buf));
    let turns = 0;
    let done = false;
    const all = Promise.all(works).then(() => (done = true));
    while (!done) {
      turns++;
      await new Promise((r) => setTimeout(r, 0));
    }
    await all;
    assert.ok(works.every((w) => w.completed && w.error === undefined));
    console.log(`200 all-reduces of 64 MiB settled; the event loop turned ${turns} times meanwhile`);
  },
);

gatedTest('init({ backend: "nccl" }) makes a one-rank world from the environment', NCCL_GPU, async () => {
  await using pg = await init({ backend: "nccl", rank: 0, worldSize: 1, env: {}, nccl: { device: 0 } });
  using buf = DeviceBuffer.from(new Int32Array([5, 6]));
  await pg.allReduce(buf);
  assert.deepEqual([...(buf.toArray() as Int32Array)], [5, 6]);
});
