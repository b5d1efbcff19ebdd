import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { ShmTransport } from "../../transport/shm.ts";
import { probeCases } from "./_probe_cases.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf, receiveSizes } from "./_fixtures/_pattern.ts";
import { segmentsOf, World } from "./_fixtures/shm_processes.ts";

const DESC = new Uint8Array(32);

/** Two ranks in this process, for the failure model (the processes tests cover the rest). */
async function twoRanks(store: MemoryStore, ringBytes = 4096): Promise<[ShmTransport, ShmTransport]> {
  const [a, b] = await Promise.all(
    [0, 1].map((rank) => ShmTransport.connect(store, { rank, size: 2, ringBytes })),
  );
  return [a, b];
}

Deno.test("ShmTransport delivers 0 B to 64 MiB in order between two processes, and leaves no segment", async () => {
  await using world = await World.start(2, ["send-sizes"]);
  const transport = await world.connect({ ringBytes: 1 << 20 });
  const { pid } = await world.ranks[0].next("ready");
  assert.deepEqual(
    segmentsOf([Deno.pid, pid as number]),
    [],
    "names are removed once every rank mapped them",
  );
  const peer = transport.pair(1);
  await receiveSizes(peer);
  await world.ranks[0].next("done");
  await transport.close();
  assert.equal((await world.ranks[0].exit()).code, 0);
  assert.deepEqual(segmentsOf([Deno.pid, pid as number]), []);
});

Deno.test("ShmTransport lets two processes both send 64 MiB before either receives", async () => {
  const bytes = 64 << 20;
  await using world = await World.start(2, ["send-first", bytes, 4 << 20]);
  await using transport = await world.connect({ ringBytes: 4 << 20 });
  const payload = new Uint8Array(bytes);
  fillPattern(payload, 0);
  await transport.pair(1).send(descriptor(0), payload);
  const got = new Uint8Array(bytes);
  await transport.pair(1).recv(got);
  assert.equal(firstWrongByte(got, 1), -1);
  assert.equal((await world.ranks[0].next("done")).wrong, -1);
});

for (const size of [2, 3, 4]) {
  Deno.test(`ShmTransport exchanges all-to-all among ${size} processes through rings that wrap at odd offsets`, async () => {
    const bytes = 100_003;
    await using world = await World.start(size, ["all-to-all", bytes, 4099]);
    await using transport = await world.connect({ ringBytes: 4099 });
    const peers = world.ranks.map((_, i) => i + 1);
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
    for (const rank of world.ranks) assert.deepEqual((await rank.next("done")).wrong, []);
  });
}

Deno.test("ShmTransport fails within 2 s naming a peer process killed with SIGKILL mid-receive", async () => {
  await using world = await World.start(3, ["hang"]);
  await using transport = await world.connect();
  const pids = await Promise.all(world.ranks.map(async (rank) => (await rank.next("ready")).pid as number));
  const recv = transport.pair(1).recv(new Uint8Array(16));
  await new Promise((resolve) => setTimeout(resolve, 100)); // asleep in the receive
  const killed = performance.now();
  world.ranks[0].child.kill("SIGKILL");
  const error = await recv.then(() => undefined, (e: unknown) => e);
  const elapsed = performance.now() - killed;
  assert.ok(error instanceof TransportError, `expected a TransportError, found ${error}`);
  assert.equal(error.message, `Rank 1 died (pid ${pids[0]}) during a receive`);
  assert.equal(error.peer, 1);
  assert.ok(elapsed < 2000, `expected the failure within 2 s, found ${elapsed.toFixed(0)} ms`);
  assert.equal(await transport.failed, error);
  // Rank 0 told rank 2, which was waiting on it.
  assert.equal((await world.ranks[1].next("failed")).message, `Rank 0 aborted: ${error.message}`);
  await world.ranks[0].exit();
  assert.deepEqual(segmentsOf([Deno.pid, ...pids]), [], "nothing is left in /dev/shm after a crash");
});

Deno.test("ShmTransport.abort() in one process fails every rank with its reason", async () => {
  await using world = await World.start(3, ["abort"]);
  await using transport = await world.connect();
  const recv = transport.pair(1).recv(new Uint8Array(16));
  await transport.pair(1).send(DESC, new Uint8Array(0)); // "go"
  await assert.rejects(recv, (error: unknown) => {
    assert.ok(error instanceof TransportError);
    assert.equal(error.message, "Rank 1 aborted: Rank 1 ran out of memory");
    return true;
  });
  await world.ranks[0].next("done");
  // Rank 2 hears it from rank 1 itself, or from rank 0, which failed in turn: whichever it sees first.
  assert.match(
    (await world.ranks[1].next("failed")).message ?? "",
    /^(Rank 0 aborted: )?Rank 1 aborted: Rank 1 ran out of memory$/,
  );
});

Deno.test("ShmTransport moves 64 MiB between two processes (throughput)", async () => {
  const bytes = 64 << 20;
  const count = 4;
  await using world = await World.start(2, ["echo", bytes, 4 << 20, count]);
  await using transport = await world.connect({ ringBytes: 4 << 20 });
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
  await world.ranks[0].next("done");
  console.log(
    `    shm: 64 MiB one way in ${(best / 2).toFixed(1)} ms = ${(2 * bytes / best / 1e6).toFixed(2)} GB/s`,
  );
});

Deno.test("ShmTransport fails both ranks with both lengths when a message does not fit the receive", async () => {
  await using store = new MemoryStore();
  const [a, b] = await twoRanks(store);
  await using _a = a;
  await using _b = b;
  const expected = "Rank 0 sent a message of 100 bytes but rank 1 expected 64";
  const reply = a.pair(1).recv(new Uint8Array(1));
  await a.pair(1).send(DESC, new Uint8Array(100));
  await assert.rejects(b.pair(0).recv(new Uint8Array(64)), { name: "TransportError", message: expected });
  await assert.rejects(reply, { message: `Rank 1 aborted: ${expected}` });
  assert.equal((await a.failed).message, `Rank 1 aborted: ${expected}`);
});

Deno.test("ShmTransport.recv() shows check() the descriptor and length before the payload lands", async () => {
  await using store = new MemoryStore();
  const [a, b] = await twoRanks(store);
  await using _a = a;
  await using _b = b;
  const payload = new Uint8Array(10_000).fill(5);
  const into = new Uint8Array(10_000);
  const seen: number[] = [];
  const recv = b.pair(0).recv(into, (desc, bytes) => seen.push(indexOf(desc), bytes, into[0], into[9_999]));
  await Promise.all([a.pair(1).send(descriptor(8), payload), recv]);
  assert.deepEqual(seen, [8, 10_000, 0, 0]);
  assert.deepEqual(into, payload);
});

Deno.test("ShmTransport.close() rejects pending receives and lets the peer read what was sent before", async () => {
  await using store = new MemoryStore();
  const [a, b] = await twoRanks(store);
  await using _b = b;
  const payload = new Uint8Array(3000);
  fillPattern(payload, 3);
  await a.pair(1).send(descriptor(3), payload);
  const pending = assert.rejects(a.pair(1).recv(new Uint8Array(4)), {
    message: "Cannot use the shm transport of rank 0: it was closed",
  });
  await a.close();
  await pending;
  const got = new Uint8Array(3000);
  assert.equal(indexOf(await b.pair(0).recv(got)), 3);
  assert.equal(firstWrongByte(got, 3), -1);
  await assert.rejects(b.pair(0).recv(got), {
    message: "Cannot receive from rank 0: it closed its transport while rank 1 still used it",
  });
});

Deno.test("ShmTransport fails a send to a peer that closed", async () => {
  await using store = new MemoryStore();
  const [a, b] = await twoRanks(store);
  await using _a = a;
  await b.close();
  const message = "Cannot send to rank 1: it closed its transport while rank 0 still used it";
  await assert.rejects(a.pair(1).send(DESC, new Uint8Array(8)), { message });
  assert.equal((await a.failed).message, message);
});

Deno.test("ShmTransport.connect() times out naming the missing rank, and removes its segment", async () => {
  await using store = new MemoryStore();
  const error = await ShmTransport.connect(store, { rank: 0, size: 3, timeoutMs: 200, ringBytes: 4096 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(error instanceof TimeoutError, `expected a TimeoutError, found ${error}`);
  assert.equal(
    error.message,
    "Cannot connect the shm transport of rank 0: ranks 1, 2 did not show up within 200 ms",
  );
  assert.deepEqual(segmentsOf([Deno.pid]), []);
});

Deno.test("ShmTransport.connect() refuses a rank with another ring size", async () => {
  await using store = new MemoryStore();
  const results = await Promise.allSettled([
    ShmTransport.connect(store, { rank: 0, size: 2, ringBytes: 4096, timeoutMs: 2000 }),
    ShmTransport.connect(store, { rank: 1, size: 2, ringBytes: 8192, timeoutMs: 2000 }),
  ]);
  for (const result of results) {
    assert.equal(result.status, "rejected");
    assert.match(
      String(result.reason),
      /uses size 2 and ringBytes \d+ but rank \d uses size 2 and ringBytes \d+/,
    );
  }
  assert.deepEqual(segmentsOf([Deno.pid]), []);
});

Deno.test("ShmTransport.connect() checks its options", async () => {
  await using store = new MemoryStore();
  await assert.rejects(ShmTransport.connect(store, { rank: 2, size: 2 }), RangeError);
  await assert.rejects(ShmTransport.connect(store, { rank: 0, size: 2, ringBytes: 10 }), RangeError);
  await assert.rejects(ShmTransport.connect(store, { rank: 0, size: 2, timeoutMs: 0 }), RangeError);
});

probeCases("ShmTransport", async () => {
  const store = new MemoryStore();
  const ranks = await Promise.all(
    [0, 1, 2].map((rank) => ShmTransport.connect(store, { rank, size: 3, ringBytes: 1 << 16 })),
  );
  return {
    ranks,
    async [Symbol.asyncDispose](): Promise<void> {
      await Promise.all(ranks.map((t) => t.close()));
      await store.close();
    },
  };
});
