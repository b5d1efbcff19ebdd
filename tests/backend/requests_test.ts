import assert from "node:assert/strict";
import {
  decodeRequest,
  encodeRequest,
  InOrder,
  REQUEST_SLOTS,
  requestBuffer,
  RequestReader,
  RequestWriter,
} from "../../backend/cpu/_requests.ts";
import type { OpRequest } from "../../backend/cpu/_protocol.ts";
import { moduleWorker } from "../_util/worker.ts";

const ALGORITHMS = ["ring", "tree", "direct"];

function call(id: number, buffers: SharedArrayBuffer[]): OpRequest {
  return {
    id,
    group: 3,
    collective: "reduceScatter",
    dtype: "bfloat16",
    op: "max",
    root: 2,
    algorithm: "tree",
    servers: 2,
    count: 1000 + id,
    input: { buffer: buffers[0], byteOffset: 64, byteLength: 2000 },
    output: { buffer: buffers[1], byteOffset: 0, byteLength: 500 },
    timeoutMs: 1234.5,
  };
}

Deno.test("encodeRequest()/decodeRequest() carry every field of a call, buffers by number", () => {
  const buffers = [new SharedArrayBuffer(4096), new SharedArrayBuffer(1024)];
  const slot = new Float64Array(16);
  const op = call(7, buffers);
  assert.equal(encodeRequest(op, ALGORITHMS, (b) => buffers.indexOf(b), slot), true);
  assert.deepEqual(decodeRequest(slot, ALGORITHMS, (id) => buffers[id]), op);
  // "auto", no servers, no output.
  const plain: OpRequest = {
    id: 8,
    group: 0,
    collective: "allReduce",
    dtype: "float32",
    op: "avg",
    root: 0,
    algorithm: "auto",
    count: 3,
    input: { buffer: buffers[0], byteOffset: 0, byteLength: 12 },
    output: undefined,
    timeoutMs: 300_000,
  };
  assert.equal(encodeRequest(plain, ALGORITHMS, (b) => buffers.indexOf(b), slot), true);
  assert.deepEqual(decodeRequest(slot, ALGORITHMS, (id) => buffers[id]), plain);
  // An all-reduce that travels narrower carries its commDtype beside the dtype.
  for (const commDtype of ["float16", "bfloat16"] as const) {
    const narrow: OpRequest = { ...plain, commDtype };
    assert.equal(encodeRequest(narrow, ALGORITHMS, (b) => buffers.indexOf(b), slot), true);
    assert.deepEqual(decodeRequest(slot, ALGORITHMS, (id) => buffers[id]), narrow);
  }
  // The ops and the dtype appended last keep their codes through the ring (bool is code 10, bxor 7).
  for (
    const [dtype, op] of [["bool", "sum"], ["uint64", "bxor"], ["int8", "band"], ["bool", "bor"]] as const
  ) {
    const appended: OpRequest = { ...plain, dtype, op };
    assert.equal(encodeRequest(appended, ALGORITHMS, (b) => buffers.indexOf(b), slot), true);
    assert.deepEqual(decodeRequest(slot, ALGORITHMS, (id) => buffers[id]), appended);
  }
  // A name that has no number cannot go by the ring.
  assert.equal(encodeRequest({ ...plain, algorithm: "mine" }, ALGORITHMS, () => 0, slot), false);
});

Deno.test("RequestWriter refuses a call when the Worker is a whole ring behind, and when encoding declines", () => {
  const writer = new RequestWriter(requestBuffer());
  for (let i = 0; i < REQUEST_SLOTS; i++) assert.equal(writer.write((s) => (s[0] = i, true)), true);
  assert.equal(writer.write(() => true), false, "full");
  const other = new RequestWriter(requestBuffer());
  assert.equal(other.write(() => false), false, "declined");
});

Deno.test("InOrder runs actions by sequence number, whatever order they arrive in", () => {
  const order = new InOrder();
  const ran: number[] = [];
  for (const seq of [3, 1, 5, 2, 4, 7]) order.arrive(seq, () => ran.push(seq));
  assert.deepEqual(ran, [1, 2, 3, 4, 5]);
  order.arrive(6, () => ran.push(6));
  assert.deepEqual(ran, [1, 2, 3, 4, 5, 6, 7]);
});

Deno.test("RequestReader.run() hands over calls written by another thread, in order, until stop()", async () => {
  const buffer = requestBuffer();
  const reader = new RequestReader(buffer);
  const got: number[] = [];
  const { promise: three, resolve } = Promise.withResolvers<void>();
  const running = reader.run((record) => {
    got.push(record[0]);
    if (got.length === 3 * REQUEST_SLOTS) resolve();
  });
  const worker = moduleWorker(
    new URL("../../backend/cpu/_requests.ts", import.meta.url),
    `const writer = new m.RequestWriter(data.buffer);
    let id = 1;
    while (id <= ${3 * REQUEST_SLOTS}) {
      if (writer.write((slot) => (slot[0] = id, true))) id++;
      else await new Promise((r) => setTimeout(r, 1));
    }`,
  );
  try {
    worker.postMessage({ buffer });
    await three;
    assert.deepEqual(got, Array.from({ length: 3 * REQUEST_SLOTS }, (_, i) => i + 1));
  } finally {
    reader.stop();
    await running;
    worker.terminate();
  }
});
