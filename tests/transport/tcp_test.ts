import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import {
  decodeHello,
  encodeHeader,
  encodeHello,
  FRAME_DATA,
  HEADER_BYTES,
  HELLO_BYTES,
  readExact,
  stripes,
  writeAll,
} from "../../transport/_tcp_wire.ts";
import { TcpTransport, type TcpTransportOptions } from "../../transport/tcp.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf, MESSAGE_SIZES } from "./_fixtures/_pattern.ts";

const FIXTURE = new URL("./_fixtures/tcp_rank.ts", import.meta.url).pathname;

/** A world of `size` TcpTransports in this process, each on its own sockets, rendezvoused in memory. */
async function world(
  size: number,
  options: Partial<TcpTransportOptions> = {},
): Promise<{ ranks: TcpTransport[]; store: MemoryStore } & AsyncDisposable> {
  const store = new MemoryStore({ timeoutMs: 10_000 });
  const ranks = await Promise.all(
    Array.from(
      { length: size },
      (_, rank) => TcpTransport.connect(store, { timeoutMs: 10_000, ...options, rank, size }),
    ),
  );
  return {
    ranks,
    store,
    async [Symbol.asyncDispose](): Promise<void> {
      await Promise.all(ranks.map((t) => t.close()));
      await store.close();
    },
  };
}

function message(bytes: number, seed: number): Uint8Array {
  const payload = new Uint8Array(bytes);
  fillPattern(payload, seed);
  return payload;
}

/** Resolves with `promise`'s settled state, or "pending" if it is still pending after `ms`. */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"pending">((resolve) => timer = setTimeout(() => resolve("pending"), ms));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

for (const size of [1, 2, 3, 5]) {
  Deno.test(`TcpTransport.connect() forms a full mesh of ${size} rank${size > 1 ? "s" : ""}`, async () => {
    await using w = await world(size);
    for (const t of w.ranks) {
      assert.equal(t.kind, "tcp");
      assert.throws(() => t.pair(t.rank), RangeError);
      assert.throws(() => t.pair(size), RangeError);
    }
    // Every rank sends every other rank a message naming both; everyone receives from everyone.
    await Promise.all(w.ranks.flatMap((t) =>
      w.ranks.filter((u) => u !== t).flatMap((u) => {
        const got = new Uint8Array(1000);
        return [
          t.pair(u.rank).send(descriptor(t.rank * 100 + u.rank), message(1000, t.rank * 100 + u.rank)),
          u.pair(t.rank).recv(got).then((desc) => {
            assert.equal(indexOf(desc), t.rank * 100 + u.rank);
            assert.equal(firstWrongByte(got, t.rank * 100 + u.rank), -1);
          }),
        ];
      })
    ));
  });
}

Deno.test("TcpTransport delivers many messages of every size in order, posted before or after arrival", async () => {
  await using w = await world(2);
  const [a, b] = w.ranks;
  // Round 1: every receive posted before the data arrives (payloads land straight in the views).
  // Round 2: every message sent (and queued by the reader) before its receive is posted.
  for (const round of [1, 2]) {
    const received = MESSAGE_SIZES.map((bytes) => new Uint8Array(bytes));
    const recvAll = (): Promise<Uint8Array[]> => Promise.all(received.map((into) => b.pair(0).recv(into)));
    const early = round === 1 ? recvAll() : undefined;
    await Promise.all(
      MESSAGE_SIZES.map((bytes, i) => a.pair(1).send(descriptor(i), message(bytes, i + round))),
    );
    const descs = await (early ?? recvAll());
    descs.forEach((desc, i) => {
      assert.equal(indexOf(desc), i);
      assert.equal(firstWrongByte(received[i], i + round), -1, `message ${i} of ${MESSAGE_SIZES[i]} bytes`);
    });
  }
});

Deno.test("TcpTransport lets two ranks both send 8 MiB before either receives", async () => {
  await using w = await world(2);
  const [a, b] = w.ranks;
  const bytes = 8 << 20; // far above the kernel's socket buffers: only the reader loops can make room
  await Promise.all([
    a.pair(1).send(descriptor(0), message(bytes, 1)),
    b.pair(0).send(descriptor(0), message(bytes, 2)),
  ]);
  const [atA, atB] = [new Uint8Array(bytes), new Uint8Array(bytes)];
  await Promise.all([a.pair(1).recv(atA), b.pair(0).recv(atB)]);
  assert.equal(firstWrongByte(atA, 2), -1);
  assert.equal(firstWrongByte(atB, 1), -1);
});

Deno.test("TcpTransport stripes a big message over socketsPerPeer 3 sockets in order", async () => {
  const bytes = (8 << 20) + 5;
  const ranges = stripes(bytes, 3);
  assert.equal(ranges.length, 3);
  assert.deepEqual([ranges[0][0], ranges[2][1]], [0, bytes]);
  assert.ok(ranges.every(([, end], i) => i === 2 || ranges[i + 1][0] === end), "contiguous");
  assert.equal(stripes(1 << 20, 3).length, 1);
  await using w = await world(2, { socketsPerPeer: 3 });
  const [a, b] = w.ranks;
  const sizes = [bytes, 5, 3 << 20, 0, bytes];
  const into = sizes.map((n) => new Uint8Array(n));
  const recvs = Promise.all(into.map((v) => b.pair(0).recv(v)));
  await Promise.all(sizes.map((n, i) => a.pair(1).send(descriptor(i), message(n, 40 + i))));
  (await recvs).forEach((desc, i) => {
    assert.equal(indexOf(desc), i);
    assert.equal(firstWrongByte(into[i], 40 + i), -1);
  });
});

Deno.test("TcpTransport.connect() fails fast on both ranks when socketsPerPeer differs", async () => {
  await using store = new MemoryStore();
  const started = performance.now();
  const results = await Promise.allSettled(
    [0, 1].map((rank) =>
      TcpTransport.connect(store, { rank, size: 2, socketsPerPeer: rank + 1, timeoutMs: 5_000 })
    ),
  );
  assert.ok(performance.now() - started < 2_000, "no retries until the deadline");
  const messages = results.map((r) => {
    assert.equal(r.status, "rejected");
    const error = (r as PromiseRejectedResult).reason;
    assert.ok(error instanceof TransportError, String(error));
    return error.message;
  });
  assert.deepEqual(messages, [
    "Rank 1 runs with socketsPerPeer 2 but rank 0 with 1",
    "Rank 0 runs with socketsPerPeer 1 but rank 1 with 2",
  ]);
});

Deno.test("TcpTransport.recv() runs check() on the descriptor before the payload lands", async () => {
  await using w = await world(2);
  const [a, b] = w.ranks;
  const into = new Uint8Array(100_000);
  let seen: { index: number; bytes: number; untouched: boolean } | undefined;
  const got = b.pair(0).recv(into, (desc, bytes) => {
    seen = { index: indexOf(desc), bytes, untouched: into.every((x) => x === 0) };
  });
  await a.pair(1).send(descriptor(7), message(100_000, 7));
  await got;
  assert.deepEqual(seen, { index: 7, bytes: 100_000, untouched: true });
  assert.equal(firstWrongByte(into, 7), -1);
});

Deno.test("TcpTransport fails on every rank when a recv check throws", async () => {
  await using w = await world(3);
  const [a, b, c] = w.ranks;
  const refused = new TransportError(
    "Collective mismatch: rank 0 sent allReduce #4, rank 1 expected broadcast #4",
  );
  const into = new Uint8Array(64);
  const recv = b.pair(0).recv(into, () => {
    throw refused;
  });
  const pendingAtC = c.pair(0).recv(new Uint8Array(4));
  pendingAtC.catch(() => {}); // asserted below; must not count as unhandled meanwhile
  await a.pair(1).send(descriptor(4), message(64, 4));
  await assert.rejects(recv, (e) => e === refused);
  assert.equal(await b.failed, refused);
  assert.ok(into.every((x) => x === 0), "no payload byte reached the refused view");
  for (const t of [a, c]) {
    const error = await t.failed;
    assert.ok(error instanceof TransportError);
    assert.match(error.message, /Rank 1 aborted: Collective mismatch/);
  }
  await assert.rejects(pendingAtC, TransportError);
  const atA = await a.failed;
  await assert.rejects(a.pair(2).send(descriptor(0), new Uint8Array(1)), (e) => e === atA);
});

Deno.test("TcpTransport fails with both lengths when a message does not fit the receive view", async () => {
  await using w = await world(2);
  const [a, b] = w.ranks;
  const recv = b.pair(0).recv(new Uint8Array(10));
  await a.pair(1).send(descriptor(0), new Uint8Array(12));
  await assert.rejects(recv, (e: Error) => {
    assert.ok(e instanceof TransportError);
    assert.equal(e.message, "Rank 0 sent a message of 12 bytes but rank 1 expected 10");
    assert.equal(e.peer, 0);
    return true;
  });
  assert.match((await a.failed).message, /^Rank 1 aborted: Rank 0 sent a message of 12 bytes/);
});

Deno.test("TcpTransport.abort() gives every peer the reason and fails every pending operation", async () => {
  await using w = await world(3);
  const [a, b, c] = w.ranks;
  // Pending operations on pairs that do not even involve the aborting rank fail too.
  const atA = a.pair(2).recv(new Uint8Array(8));
  const atC = c.pair(0).recv(new Uint8Array(8));
  const atB = b.pair(0).recv(new Uint8Array(8));
  const reason = new Error("Out of memory while allocating the gradient bucket");
  b.abort(reason);
  b.abort(new Error("A second abort is ignored"));
  await assert.rejects(atB, (e) => e === reason);
  assert.equal(await b.failed, reason);
  for (const [t, pending] of [[a, atA], [c, atC]] as const) {
    const error = await t.failed;
    assert.ok(error instanceof TransportError);
    assert.match(error.message, /Rank 1 aborted: Out of memory while allocating the gradient bucket/);
    await assert.rejects(pending, (e) => e === error);
    await assert.rejects(t.pair(1).send(descriptor(0), new Uint8Array(1)), (e) => e === error);
    await assert.rejects(t.pair(1).recv(new Uint8Array(1)), (e) => e === error);
  }
});

Deno.test("TcpTransport.close() writes the sends made before it and leaves idle peers working", async () => {
  await using w = await world(3);
  const [a, b, c] = w.ranks;
  const sends = [0, 1, 2].map((i) => a.pair(1).send(descriptor(i), message(100_000 * i, i)));
  await a.close();
  await Promise.all(sends);
  for (const i of [0, 1, 2]) {
    const into = new Uint8Array(100_000 * i);
    assert.equal(indexOf(await b.pair(0).recv(into)), i);
    assert.equal(firstWrongByte(into, i), -1);
  }
  await assert.rejects(a.pair(1).send(descriptor(0), new Uint8Array(1)), /it was closed/);
  const failures = Promise.race([b.failed, c.failed]).then((e) => e.message);
  assert.equal(await settledWithin(failures, 200), "pending");
  const got = new Uint8Array(2);
  await Promise.all([b.pair(2).send(descriptor(0), new Uint8Array([5, 6])), c.pair(1).recv(got)]);
  assert.deepEqual([...got], [5, 6]);
  await assert.rejects(b.pair(0).send(descriptor(0), new Uint8Array(1)), /Cannot send to rank 0: it closed/);
});

Deno.test("TcpTransport fails a rank still waiting for a message from a peer that closed", async () => {
  await using w = await world(2);
  const [a, b] = w.ranks;
  const waiting = b.pair(0).recv(new Uint8Array(1));
  await a.close();
  const error = await b.failed;
  assert.equal(
    error.message,
    "Cannot receive from rank 0: it closed its transport while rank 1 still used it",
  );
  await assert.rejects(waiting, (e) => e === error);
});

Deno.test("TcpTransport.connect() refuses stray connections while the mesh forms", async () => {
  const store = new MemoryStore({ timeoutMs: 10_000 });
  const rank0 = TcpTransport.connect(store, { rank: 0, size: 2, timeoutMs: 10_000 });
  const [host, port] = new TextDecoder().decode(await store.get("tcp/addr/0")).split(":");
  const strays = await Promise.all([0, 1, 2].map(() => Deno.connect({ hostname: host, port: Number(port) })));
  // One sends garbage, one a well-formed hello with the wrong token, one nothing at all.
  await writeAll(
    strays[0],
    new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n".padEnd(HELLO_BYTES)),
  );
  await writeAll(
    strays[1],
    encodeHello({ rank: 1, size: 2, socketIndex: 0, socketsPerPeer: 1, token: new Uint8Array(16) }),
  );
  const rank1 = TcpTransport.connect(store, { rank: 1, size: 2, timeoutMs: 10_000 });
  await using a = await rank0;
  await using b = await rank1;
  for (const stray of strays) {
    assert.equal(await stray.read(new Uint8Array(HELLO_BYTES)).catch(() => null), null, "refused by closing");
    stray.close();
  }
  const got = new Uint8Array(3);
  await Promise.all([a.pair(1).send(descriptor(0), new Uint8Array([1, 2, 3])), b.pair(0).recv(got)]);
  assert.deepEqual([...got], [1, 2, 3]);
  await store.close();
});

Deno.test("TcpTransport.connect() times out naming the rank that never showed up", async () => {
  const store = new MemoryStore();
  const started = performance.now();
  const results = await Promise.allSettled(
    [0, 1].map((rank) => TcpTransport.connect(store, { rank, size: 3, timeoutMs: 400 })),
  );
  assert.ok(performance.now() - started < 3_000);
  for (const [rank, r] of results.entries()) {
    assert.equal(r.status, "rejected");
    const error = (r as PromiseRejectedResult).reason;
    assert.ok(error instanceof TimeoutError, String(error));
    assert.equal(
      error.message,
      `Cannot connect rank ${rank} of 3 within 400 ms: missing rank 2: rank 2 never connected`,
    );
  }
  // A rank whose lower peers never came names what it waited for.
  await using empty = new MemoryStore();
  const alone = await TcpTransport.connect(empty, { rank: 2, size: 3, timeoutMs: 300 }).catch((e) => e);
  assert.ok(alone instanceof TimeoutError);
  assert.match(alone.message, /missing ranks 0, 1: rank 0 never published the world token/);
  await store.close();
});

Deno.test("TcpTransport fails when a peer sends a malformed frame header", async () => {
  const store = new MemoryStore({ timeoutMs: 10_000 });
  const rank0 = TcpTransport.connect(store, { rank: 0, size: 2, timeoutMs: 10_000 });
  // This test plays rank 1 by hand, speaking the handshake correctly and then breaking the framing.
  const token = await store.get("tcp/token");
  const [host, port] = new TextDecoder().decode(await store.get("tcp/addr/0")).split(":");
  const conn = await Deno.connect({ hostname: host, port: Number(port) });
  await writeAll(conn, encodeHello({ rank: 1, size: 2, socketIndex: 0, socketsPerPeer: 1, token }));
  const answer = new Uint8Array(HELLO_BYTES);
  await readExact(conn, answer);
  assert.equal(decodeHello(answer)?.rank, 0);
  await using a = await rank0;
  const pending = a.pair(1).recv(new Uint8Array(4));
  pending.catch(() => {}); // asserted below; must not count as unhandled meanwhile
  const header = new Uint8Array(HEADER_BYTES);
  encodeHeader(header, { kind: FRAME_DATA, desc: descriptor(0), bytes: 4 });
  header[4] = 9; // an unknown frame kind
  await writeAll(conn, header);
  const error = await a.failed;
  assert.ok(error instanceof TransportError);
  assert.equal(error.message, "Rank 1 sent rank 0 a malformed frame: unknown frame kind 9");
  await assert.rejects(pending, (e) => e === error);
  conn.close();
  await store.close();
});

/** A rank run as a separate process, with its JSON events from stdout. */
class RankProcess implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly #events: Record<string, unknown>[] = [];
  #wake: () => void = () => {};
  readonly #pump: Promise<void>;

  constructor(port: number, rank: number, size: number, scenario: string) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", FIXTURE, String(port), String(rank), String(size), scenario],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#pump = this.#read();
  }

  async #read(): Promise<void> {
    let buffered = "";
    for await (const chunk of this.child.stdout.pipeThrough(new TextDecoderStream())) {
      buffered += chunk;
      let newline;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        this.#events.push(JSON.parse(buffered.slice(0, newline)));
        buffered = buffered.slice(newline + 1);
        this.#wake();
      }
    }
    this.#wake();
  }

  /** Waits for the event named `event` and returns it. */
  async next(event: string, timeoutMs = 15_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    while (true) {
      const found = this.#events.find((e) => e.event === event);
      if (found) return found;
      const wait = new Promise<void>((resolve) => this.#wake = resolve);
      if ((await settledWithin(wait, deadline - Date.now())) === "pending") {
        throw new Error(`No ${event} event within ${timeoutMs} ms; got ${JSON.stringify(this.#events)}`);
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // It has exited already.
    }
    await this.child.status;
    await this.#pump;
  }
}

Deno.test("TcpTransport delivers every size in order between two processes", async () => {
  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port, timeoutMs: 20_000 });
  await using peer = new RankProcess(server.port, 1, 2, "send-sizes");
  await using t = await TcpTransport.connect(store, { rank: 0, size: 2, timeoutMs: 20_000 });
  for (const [i, bytes] of MESSAGE_SIZES.entries()) {
    const into = new Uint8Array(bytes);
    const desc = await t.pair(1).recv(into);
    assert.equal(indexOf(desc), i);
    assert.equal(firstWrongByte(into, i), -1, `message ${i} of ${bytes} bytes`);
  }
  await t.pair(1).send(descriptor(0), new Uint8Array(0));
  await peer.next("done");
  assert.equal((await peer.child.status).code, 0);
});

Deno.test("TcpTransport fails every rank fast when a peer process dies", async () => {
  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port, timeoutMs: 20_000 });
  await using survivor = new RankProcess(server.port, 1, 3, "wait");
  await using victim = new RankProcess(server.port, 2, 3, "hang");
  await using t = await TcpTransport.connect(store, { rank: 0, size: 3, timeoutMs: 20_000 });
  await Promise.all([survivor.next("ready"), victim.next("ready")]);
  const pending = t.pair(2).recv(new Uint8Array(8));
  pending.catch(() => {}); // asserted below; must not count as unhandled meanwhile
  const killedAt = Date.now();
  victim.child.kill("SIGKILL");
  const error = await t.failed;
  assert.ok(Date.now() - killedAt < 3_000, `failed after ${Date.now() - killedAt} ms`);
  assert.ok(error instanceof TransportError);
  assert.match(error.message, /Rank 2 closed its connection to rank \d mid-collective/);
  await assert.rejects(pending, (e) => e === error);
  const other = await survivor.next("failed");
  assert.equal(other.name, "TransportError");
  assert.match(String(other.message), /Rank 2 closed its connection to rank \d mid-collective/);
  assert.ok((other.at as number) - killedAt < 3_000);
  await survivor.next("done");
  assert.equal((await survivor.child.status).code, 0);
});
