import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { ShmTransport } from "../../transport/shm.ts";
import { probeCases } from "./_probe_cases.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf, receiveSizes } from "./_fixtures/_pattern.ts";
import { RankProcess, segmentsOf, World } from "./_fixtures/shm_processes.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import type { Store } from "../../store/store.ts";
import { DEFAULT_SEGMENT_LAYOUT } from "../../transport/segment.ts";

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

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `store`, but its `set` of `key` waits for `gate`. */
function gated(store: Store, key: string, gate: Promise<void>): Store {
  return new Proxy(store, {
    get(target, property): unknown {
      if (property === "set") {
        return async (k: string, v: Uint8Array | string): Promise<void> => {
          if (k === key) await gate;
          return target.set(k, v);
        };
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

Deno.test("ShmTransport.connect() fails within 2 s naming a peer that died before it mapped the inbox", async () => {
  await using world = await World.start(2, ["wait"]);
  let open = (): void => {};
  const gate = new Promise<void>((resolve) => open = resolve);
  // Rank 0 publishes its inbox only once rank 1, which published its own, is dead.
  const connecting = ShmTransport.connect(gated(world.store, "shm/inbox/0", gate), {
    rank: 0,
    size: 2,
    ringBytes: 1 << 20,
    timeoutMs: 20_000,
  }).then(() => undefined, (e: unknown) => e);
  await world.store.get("shm/inbox/1");
  const pid = world.ranks[0].child.pid;
  await world.ranks[0].kill();
  try {
    const killed = performance.now();
    open();
    const error = await connecting;
    const elapsed = performance.now() - killed;
    assert.ok(error instanceof TransportError, `expected a TransportError, found ${error}`);
    assert.equal(
      error.message,
      `Cannot connect the shm transport of rank 0: rank 1 (pid ${pid}) exited before it mapped its inbox`,
    );
    assert.equal(error.peer, 1);
    assert.ok(elapsed < 2000, `expected the failure within 2 s, found ${elapsed.toFixed(0)} ms`);
    // Rank 0 mapped the dead rank's inbox last, so it removed that name as well as its own.
    assert.deepEqual(segmentsOf([Deno.pid, pid]), []);
  } finally {
    // What a failure left of the SIGKILLed rank.
    for (const name of segmentsOf([pid])) Deno.removeSync(`/dev/shm/${name}`);
  }
});

Deno.test("ShmTransport.connect() fails every rank at once when one asks for another segment layout", async () => {
  await using store = new MemoryStore();
  const start = performance.now();
  const results = await Promise.allSettled([
    ShmTransport.connect(store, { rank: 0, size: 3, ringBytes: 4096, segment: DEFAULT_SEGMENT_LAYOUT }),
    ShmTransport.connect(store, { rank: 1, size: 3, ringBytes: 4096, segment: DEFAULT_SEGMENT_LAYOUT }),
    ShmTransport.connect(store, {
      rank: 2,
      size: 3,
      ringBytes: 4096,
      segment: { buffers: 8, bufferBytes: 4096 },
    }),
  ]);
  assert.ok(performance.now() - start < 2000, "not at the 300 s timeout");
  const messages = results.map((r) =>
    r.status === "rejected" ? String((r.reason as Error).message) : "connected"
  );
  assert.equal(
    messages[2],
    "Rank 0 uses 4 segment buffers of 1048576 bytes and a pool of 0 bytes but rank 2 uses 8 segment buffers " +
      "of 4096 bytes and a pool of 0 bytes",
  );
  for (const rank of [0, 1]) {
    assert.equal(
      messages[rank],
      `Cannot connect the shm transport of rank ${rank}: rank 2 (pid ${Deno.pid}) failed: ${messages[2]}`,
    );
  }
  assert.deepEqual(segmentsOf([Deno.pid]), []);
});

for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  Deno.test(`a rank stopped by ${signal} while it connects removes its object and still dies of the signal`, async () => {
    await using server = await TcpStoreServer.listen({ log: () => {} });
    // Rank 0 never comes: rank 1 holds its object, waiting for it.
    const rank = new RankProcess(server.port, 1, 2, ["wait"]);
    const pid = rank.child.pid;
    try {
      const deadline = performance.now() + 20_000;
      while (segmentsOf([pid]).length === 0) {
        assert.ok(performance.now() < deadline, "rank 1 did not create its object within 20 s");
        await sleep(10);
      }
      rank.child.kill(signal);
      const status = await rank.exit();
      assert.equal(status.signal, signal, "the signal's default action still happens");
      assert.deepEqual(segmentsOf([pid]), []);
    } finally {
      await rank.kill();
    }
  });
}

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const STARTUP_RANK = new URL("./_fixtures/shm_startup_rank.ts", import.meta.url).pathname;

/**
 * Starts 4 ranks under the launcher; after `delayMs` (if given) sends SIGINT to the launcher, and with
 * `group` to every rank that has started as well (Ctrl-C in a terminal reaches the whole process group).
 * Resolves with the launcher's exit code, the ranks' pids, and when (ms after the launch) the first rank
 * began its `init()` and the last one was done.
 */
async function startup(
  dir: string,
  delayMs?: number,
  group = false,
): Promise<{ code: number; pids: number[]; start: number; ready: number }> {
  await Deno.mkdir(dir);
  const launched = Date.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "4", STARTUP_RANK],
    env: { DCOMM_TEST_PID_DIR: dir },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).spawn();
  const output = child.output();
  const pidsOf = (): number[] => [...Deno.readDirSync(dir)].map((entry) => Number(entry.name));
  if (delayMs !== undefined) {
    await sleep(delayMs);
    try {
      child.kill("SIGINT");
    } catch {
      // Done already.
    }
    for (const pid of group ? pidsOf() : []) {
      try {
        Deno.kill(pid, "SIGINT");
      } catch {
        // Exited already.
      }
    }
  }
  const { code, stdout } = await output;
  const times = (word: string): number[] =>
    [...new TextDecoder().decode(stdout).matchAll(new RegExp(`${word} (\\d+)`, "g"))].map((m) =>
      Number(m[1]) - launched
    );
  return { code, pids: pidsOf(), start: Math.min(...times("START")), ready: Math.max(...times("READY")) };
}

Deno.test("SIGINT at random moments of a 4-rank startup under the launcher leaves nothing in /dev/shm", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dcomm-startup-" });
  try {
    // When the ranks start and connect here: the signals land from the first init() to past the last.
    const clean = await startup(`${dir}/clean`);
    assert.equal(clean.code, 0);
    const { start, ready } = clean;
    const tries = 20;
    const left: string[] = [];
    for (let i = 0; i < tries; i++) {
      const delay = Math.round(start + ((i + Math.random()) / tries) * (ready - start) * 1.2);
      const { pids } = await startup(`${dir}/${i}`, delay, i % 2 === 1);
      const names = segmentsOf(pids);
      if (names.length > 0) left.push(`try ${i} (SIGINT at ${delay} ms): ${names.join(", ")}`);
    }
    assert.deepEqual(left, [], `objects left in /dev/shm (init() from ${start} to ${ready} ms)`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
