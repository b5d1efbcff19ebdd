import assert from "node:assert/strict";
import { TransportError } from "../../core/errors.ts";
import { createInprocMesh, InprocTransport } from "../../transport/inproc.ts";
import { probeCases } from "./_probe_cases.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf, receiveSizes } from "./_fixtures/_pattern.ts";
import { RankWorker } from "./_fixtures/inproc_workers.ts";

const DESC = new Uint8Array(32);

Deno.test("InprocTransport delivers 0 B to 64 MiB in order from a Worker, received before and after arrival", async () => {
  const mesh = createInprocMesh(2, { ringBytes: 1 << 20 });
  await using transport = InprocTransport.create(mesh, 0);
  using worker = new RankWorker(mesh, 1, { scenario: "send-sizes" });
  const peer = transport.pair(1);
  await receiveSizes(peer);
  await worker.done();
});

Deno.test("InprocTransport lets two ranks both send 64 MiB (16 rings' worth) before either receives", async () => {
  const bytes = 64 << 20;
  const mesh = createInprocMesh(2, { ringBytes: 4 << 20 });
  await using transport = InprocTransport.create(mesh, 0);
  using worker = new RankWorker(mesh, 1, { scenario: "send-first", bytes });
  const payload = new Uint8Array(bytes);
  fillPattern(payload, 0);
  await transport.pair(1).send(descriptor(0), payload);
  const got = new Uint8Array(bytes);
  await transport.pair(1).recv(got);
  assert.equal(firstWrongByte(got, 1), -1);
  assert.equal((await worker.done()).wrong, -1);
});

for (const size of [2, 3, 4]) {
  Deno.test(`InprocTransport exchanges all-to-all among ${size} ranks through rings that wrap at odd offsets`, async () => {
    const bytes = 100_003;
    const mesh = createInprocMesh(size, { ringBytes: 4099 });
    await using transport = InprocTransport.create(mesh, 0);
    const workers = Array.from(
      { length: size - 1 },
      (_, i) => new RankWorker(mesh, i + 1, { scenario: "all-to-all", bytes }),
    );
    try {
      const peers = workers.map((_, i) => i + 1);
      const got = peers.map(() => new Uint8Array(bytes));
      await Promise.all([
        ...peers.map((peer) => {
          const payload = new Uint8Array(bytes);
          fillPattern(payload, peer);
          return transport.pair(peer).send(descriptor(0), payload);
        }),
        ...peers.map((peer, i) => transport.pair(peer).recv(got[i])),
      ]);
      for (const [i, peer] of peers.entries()) assert.equal(firstWrongByte(got[i], peer * 100), -1);
      for (const worker of workers) assert.deepEqual((await worker.done()).wrong, []);
    } finally {
      for (const worker of workers) worker[Symbol.dispose]();
    }
  });
}

Deno.test("InprocTransport.abort() in one Worker fails every rank with its reason", async () => {
  const mesh = createInprocMesh(3, { ringBytes: 4096 });
  await using transport = InprocTransport.create(mesh, 0);
  using aborter = new RankWorker(mesh, 1, { scenario: "abort", reason: "Rank 1 ran out of memory" });
  using bystander = new RankWorker(mesh, 2, { scenario: "wait" });
  const recv = transport.pair(1).recv(new Uint8Array(16));
  await transport.pair(1).send(DESC, new Uint8Array(0)); // "go"
  await assert.rejects(recv, (error: unknown) => {
    assert.ok(error instanceof TransportError);
    assert.equal(error.message, "Rank 1 aborted: Rank 1 ran out of memory");
    assert.equal(error.peer, 1);
    return true;
  });
  assert.equal((await transport.failed).message, "Rank 1 aborted: Rank 1 ran out of memory");
  // Rank 2, which waited on rank 0, hears it from rank 1 itself or from rank 0, which failed in turn.
  assert.match(
    (await bystander.done()).message ?? "",
    /^(Rank 0 aborted: )?Rank 1 aborted: Rank 1 ran out of memory$/,
  );
  await aborter.done();
  await assert.rejects(transport.pair(2).send(DESC, new Uint8Array(1)), /Rank 1 aborted/);
});

Deno.test("InprocTransport fails both ranks with both lengths when a message does not fit the receive", async () => {
  const mesh = createInprocMesh(2, { ringBytes: 4096 });
  await using a = InprocTransport.create(mesh, 0);
  await using b = InprocTransport.create(mesh, 1);
  const expected = "Rank 0 sent a message of 100 bytes but rank 1 expected 64";
  await a.pair(1).send(DESC, new Uint8Array(100));
  await assert.rejects(b.pair(0).recv(new Uint8Array(64)), { name: "TransportError", message: expected });
  assert.equal((await b.failed).message, expected);
  await assert.rejects(a.pair(1).recv(new Uint8Array(1)), { message: `Rank 1 aborted: ${expected}` });
  assert.equal((await a.failed).message, `Rank 1 aborted: ${expected}`);
});

Deno.test("InprocTransport.recv() fails the transport with what check() throws, before the payload lands", async () => {
  const mesh = createInprocMesh(2, { ringBytes: 4096 });
  await using a = InprocTransport.create(mesh, 0);
  await using b = InprocTransport.create(mesh, 1);
  const reply = a.pair(1).recv(new Uint8Array(1)); // rank 0 waits on rank 1, so it sees rank 1 fail
  await a.pair(1).send(descriptor(7), new Uint8Array(10).fill(1));
  const into = new Uint8Array(10);
  const refused = new RangeError("Expected collective 6, found 7");
  const recv = b.pair(0).recv(into, (desc, bytes) => {
    assert.equal(bytes, 10);
    if (indexOf(desc) !== 6) throw refused;
  });
  await assert.rejects(recv, (error) => error === refused);
  assert.equal(await b.failed, refused);
  assert.deepEqual(into, new Uint8Array(10));
  await assert.rejects(reply, { message: "Rank 1 aborted: Expected collective 6, found 7" });
  assert.equal((await a.failed).message, "Rank 1 aborted: Expected collective 6, found 7");
});

Deno.test("InprocTransport.close() rejects pending receives, and a peer still waiting on it fails", async () => {
  const mesh = createInprocMesh(2, { ringBytes: 4096 });
  const transport = InprocTransport.create(mesh, 0);
  using worker = new RankWorker(mesh, 1, { scenario: "wait" });
  const pending = assert.rejects(transport.pair(1).recv(new Uint8Array(4)), {
    message: "Cannot use the inproc transport of rank 0: it was closed",
  });
  await transport.close();
  await pending;
  await assert.rejects(transport.pair(1).send(DESC, new Uint8Array(1)), /it was closed/);
  assert.equal(
    (await worker.done()).message,
    "Cannot receive from rank 0: it closed its transport while rank 1 still used it",
  );
});

Deno.test("InprocTransport.close() lets a peer read what was sent before it, with no failure", async () => {
  const mesh = createInprocMesh(2, { ringBytes: 4096 });
  const a = InprocTransport.create(mesh, 0);
  await using b = InprocTransport.create(mesh, 1);
  const payload = new Uint8Array(3000);
  fillPattern(payload, 3);
  await a.pair(1).send(descriptor(3), payload);
  await a.close();
  const got = new Uint8Array(3000);
  assert.equal(indexOf(await b.pair(0).recv(got)), 3);
  assert.equal(firstWrongByte(got, 3), -1);
  await assert.rejects(b.pair(0).recv(got), /closed its transport while rank 1 still used it/);
});

Deno.test("InprocTransport.create() refuses a rank that joined already, and ranks out of range", async () => {
  const mesh = createInprocMesh(2);
  await using transport = InprocTransport.create(mesh, 0);
  assert.throws(() => InprocTransport.create(mesh, 0), /Expected rank 0 of the mesh to be free/);
  assert.throws(() => InprocTransport.create(mesh, 2), RangeError);
  assert.throws(() => transport.pair(0), /other than 0, found 0/);
  assert.throws(() => createInprocMesh(2, { ringBytes: 10 }), RangeError);
  assert.equal(transport.kind, "inproc");
});

Deno.test("InprocTransport moves 64 MiB between two threads (throughput)", async () => {
  const bytes = 64 << 20;
  const count = 4;
  const mesh = createInprocMesh(2);
  await using transport = InprocTransport.create(mesh, 0);
  using worker = new RankWorker(mesh, 1, { scenario: "echo", bytes, count });
  const peer = transport.pair(1);
  const data = new Uint8Array(bytes);
  fillPattern(data, 9);
  const back = new Uint8Array(bytes);
  let best = Infinity;
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    await Promise.all([peer.send(descriptor(i), data), peer.recv(back)]);
    best = Math.min(best, performance.now() - start);
  }
  assert.equal(firstWrongByte(back, 9), -1);
  await worker.done();
  // A round trip moves the 64 MiB twice.
  console.log(
    `    inproc: 64 MiB one way in ${(best / 2).toFixed(1)} ms = ${(2 * bytes / best / 1e6).toFixed(2)} GB/s`,
  );
});

probeCases("InprocTransport", () => {
  const mesh = createInprocMesh(3, { ringBytes: 1 << 16 });
  const ranks = [0, 1, 2].map((rank) => InprocTransport.create(mesh, rank));
  return Promise.resolve({
    ranks,
    async [Symbol.asyncDispose](): Promise<void> {
      await Promise.all(ranks.map((t) => t.close()));
    },
  });
});
