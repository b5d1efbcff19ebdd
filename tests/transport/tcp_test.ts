import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import {
  COALESCE_BYTES,
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
import { descriptor, firstWrongByte, indexOf, MESSAGE_SIZES } from "./_fixtures/_pattern.ts";
import { message, transportCases, type TransportSuite, world } from "./_transport_cases.ts";
import { RankProcess } from "./_fixtures/rank_process.ts";
import { countingStore } from "../_util/counting_store.ts";

const TCP: TransportSuite<TcpTransportOptions> = {
  name: "TcpTransport",
  kind: "tcp",
  label: "",
  connect: (store, options) => TcpTransport.connect(store, options),
  neverCame: (rank) => `rank ${rank} never connected`,
};
transportCases(TCP);

/** The same transport with every pair connected when first used. */
const LAZY_TCP: TransportSuite<TcpTransportOptions> = {
  ...TCP,
  name: "TcpTransport (lazy)",
  connect: (store, options) => TcpTransport.connect(store, { ...options, connections: "lazy" }),
  neverCame: (rank) => `rank ${rank} never published its address (store key "tcp/addr/${rank}")`,
  lazy: true,
};
transportCases(LAZY_TCP);

Deno.test("TcpTransport stripes a big message over socketsPerPeer 3 sockets in order", async () => {
  const bytes = (8 << 20) + 5;
  const ranges = stripes(bytes, 3);
  assert.equal(ranges.length, 3);
  assert.deepEqual([ranges[0][0], ranges[2][1]], [0, bytes]);
  assert.ok(ranges.every(([, end], i) => i === 2 || ranges[i + 1][0] === end), "contiguous");
  assert.equal(stripes(1 << 20, 3).length, 1);
  await using w = await world(TCP, 2, { socketsPerPeer: 3 });
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

Deno.test("TcpTransport puts header and payload together in a buffer it keeps, up to COALESCE_BYTES: sends in a row of growing and shrinking sizes arrive intact", async () => {
  await using w = await world(TCP, 2);
  const [a, b] = w.ranks;
  // Around the limit, larger then smaller (the kept buffer reused with stale bytes behind), and beyond it.
  const sizes = [COALESCE_BYTES, 5, 300 << 10, COALESCE_BYTES + 4, 0, 64 << 10, COALESCE_BYTES, 17];
  const into = sizes.map((n) => new Uint8Array(n));
  const recvs = Promise.all(into.map((v) => b.pair(0).recv(v)));
  // Sent without waiting for each other: the transport runs them one at a time, so one buffer serves all.
  await Promise.all(sizes.map((n, i) => a.pair(1).send(descriptor(i), message(n, 60 + i))));
  (await recvs).forEach((desc, i) => {
    assert.equal(indexOf(desc), i);
    assert.equal(firstWrongByte(into[i], 60 + i), -1, `message ${i} (${sizes[i]} bytes)`);
  });
});

Deno.test("TcpTransport keeps the buffers of messages that came before their receive: early messages of mixed sizes, received later, arrive intact", async () => {
  await using w = await world(TCP, 2);
  const [a, b] = w.ranks;
  // Each round: three messages sent before any receive is posted, so they land in buffers of their own,
  // which the next round's early messages reuse (larger, smaller, equal; one beyond what a pair keeps).
  const rounds = [[128 << 10, 128 << 10, 64 << 10], [200 << 10, 5, 128 << 10], [(4 << 20) + 8, 64 << 10, 0]];
  let k = 0;
  for (const sizes of rounds) {
    const first = k;
    await Promise.all(sizes.map((n, i) => a.pair(1).send(descriptor(first + i), message(n, first + i))));
    // The receiving side's reader has taken them in by the time a round trip on the other direction ends.
    await Promise.all([b.pair(0).send(descriptor(99), message(1, 99)), a.pair(1).recv(new Uint8Array(1))]);
    for (const [i, n] of sizes.entries()) {
      const into = new Uint8Array(n);
      assert.equal(indexOf(await b.pair(0).recv(into)), first + i);
      assert.equal(firstWrongByte(into, first + i), -1, `message ${first + i} (${n} bytes)`);
    }
    k += sizes.length;
  }
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

Deno.test("TcpTransport.connect() times out naming what a rank whose lower peers never came waited for", async () => {
  await using empty = new MemoryStore();
  const alone = await TcpTransport.connect(empty, { rank: 2, size: 3, timeoutMs: 300 }).catch((e) => e);
  assert.ok(alone instanceof TimeoutError);
  assert.match(alone.message, /missing ranks 0, 1: rank 0 never published the world token/);
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

Deno.test("TcpTransport delivers every size in order between two processes", async () => {
  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port, timeoutMs: 20_000 });
  await using peer = new RankProcess("tcp", server.port, 1, 2, "send-sizes");
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
  await using survivor = new RankProcess("tcp", server.port, 1, 3, "wait");
  await using victim = new RankProcess("tcp", server.port, 2, 3, "hang");
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

for (const connections of ["eager", "lazy"] as const) {
  Deno.test(`TcpTransport's mesh (${connections}) learns its peers' addresses from one table: ranks joining late, O(N) store requests`, async () => {
    await using store = new MemoryStore();
    const requests = { n: 0 };
    const counted = countingStore(store, requests);
    const size = 8;
    // Ranks start in a scrambled order, up to 150 ms apart.
    const delays = [120, 0, 150, 30, 90, 10, 60, 140];
    const ranks = await Promise.all(delays.map(async (ms, rank) => {
      await new Promise((r) => setTimeout(r, ms));
      return await TcpTransport.connect(counted, { rank, size, timeoutMs: 10_000, connections });
    }));
    try {
      // Per rank but 0: the token, its address, the table; rank 0 (which dials nobody) sets the token and
      // its address, reads every address and writes the table (and, lazily, reads it back as every rank
      // does before connect() returns): 3N + 1 (+ 1), where every rank reading every lower rank's address
      // was N²/2 + 3N/2.
      assert.equal(requests.n, 3 * size + (connections === "lazy" ? 2 : 1));
      // Every pair talks.
      for (let r = 0; r < size; r++) {
        const next = (r + 1) % size;
        const into = new Uint8Array(64);
        const got = ranks[next].pair(r).recv(into);
        await ranks[r].pair(next).send(descriptor(r), message(64, r));
        assert.equal(indexOf(await got), r);
        assert.equal(firstWrongByte(into, r), -1);
      }
    } finally {
      await Promise.all(ranks.map((t) => t.close()));
    }
  });
}

Deno.test("TcpTransport (lazy): a ring opens 2 sockets per rank, a full exchange N − 1; auto is lazy above 16 ranks", async () => {
  await using store = new MemoryStore();
  const size = 8;
  const ranks = await Promise.all(
    Array.from(
      { length: size },
      (_, rank) => TcpTransport.connect(store, { rank, size, connections: "lazy" }),
    ),
  );
  try {
    assert.deepEqual(ranks.map((t) => [t.lazy, t.connections]), Array(size).fill([true, 0]));
    // One step of a ring: each rank sends to the next and receives from the previous.
    await Promise.all(ranks.map(async (t, r) => {
      const into = new Uint8Array(16);
      const got = t.pair((r + size - 1) % size).recv(into);
      await t.pair((r + 1) % size).send(descriptor(r), message(16, r));
      assert.equal(indexOf(await got), (r + size - 1) % size);
    }));
    assert.deepEqual(ranks.map((t) => t.connections), Array(size).fill(2));
    // Everyone to everyone.
    await Promise.all(ranks.flatMap((t, r) =>
      ranks.map(async (_, p) => {
        if (p === r) return;
        const got = t.pair(p).recv(new Uint8Array(4));
        await t.pair(p).send(descriptor(p), message(4, r));
        await got;
      })
    ));
    assert.deepEqual(ranks.map((t) => t.connections), Array(size).fill(size - 1));
  } finally {
    await Promise.all(ranks.map((t) => t.close()));
  }
  for (const [size, lazy] of [[16, false], [17, true]] as const) {
    await using auto = new MemoryStore();
    const world = await Promise.all(
      Array.from({ length: size }, (_, rank) => TcpTransport.connect(auto, { rank, size })),
    );
    assert.deepEqual(world.map((t) => t.lazy), Array(size).fill(lazy), `${size} ranks`);
    await Promise.all(world.map((t) => t.close()));
  }
});

Deno.test("TcpTransport (lazy): a rank gone before its first connection is named by the peer that wanted it", async () => {
  await using store = new MemoryStore();
  const [a, b, c] = await Promise.all(
    [0, 1, 2].map((rank) =>
      TcpTransport.connect(store, { rank, size: 3, connections: "lazy", timeoutMs: 30_000 })
    ),
  );
  try {
    // Rank 2 stops before any pair connected (its listener closes, as a killed process's would).
    c.abort(new Error("killed"));
    await c.failed;
    const started = performance.now();
    // Rank 1 waits for rank 2 to dial it (the higher rank dials): its checks of rank 2's port find it gone.
    const waiting = b.pair(2).recv(new Uint8Array(4));
    await assert.rejects(
      waiting,
      (e: unknown) =>
        e instanceof TransportError &&
        /^Rank 2 is gone: rank 1 waited for it to connect, and its port .* refuses connections/.test(
          e.message,
        ),
    );
    assert.ok(performance.now() - started < 5_000, "within a few probes");
    // Rank 0 dials nobody higher... rank 2 dials rank 0: rank 0's send waits the same way and fails too.
    await assert.rejects(a.pair(2).send(descriptor(0), new Uint8Array(1)), /Rank 2 is gone/);
  } finally {
    await Promise.all([a, b, c].map((t) => t.close().catch(() => {})));
  }
});

Deno.test("checkOpenFiles() refuses more sockets than the open-file limit allows, naming both and the fixes", async () => {
  const module = new URL("../../transport/tcp.ts", import.meta.url).href;
  const code = `import { checkOpenFiles } from "${module}";
checkOpenFiles(60, 3);
try { checkOpenFiles(100, 3); } catch (e) { console.log(e.message); }`;
  const out = await new Deno.Command("bash", {
    args: ["-c", `ulimit -n 160 && exec "${Deno.execPath()}" eval --quiet '${code}'`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  assert.equal(
    text,
    "Rank 3 needs 100 sockets to its peers, more than its open-file limit of 160 allows (ulimit -n, less 64 " +
      'kept for the rest): raise the limit (ulimit -n), use connections: "lazy" (DCOMM_TCP_CONNECTIONS=lazy: a ' +
      "pair connects when first used), or fewer socketsPerPeer",
  );
});
