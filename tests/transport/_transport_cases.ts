/**
 * The cases every point-to-point transport passes, registered by each transport's own tests: the TCP
 * transport (`tcp_test.ts`) and the RDMA transport (`rdma_test.ts` on RDMA hardware, `rdma_loopback_test.ts`
 * over the loopback test double of libibverbs). What only one transport has (TCP striping, RDMA credits)
 * stays in that transport's file.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TimeoutError, TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import type { Store } from "../../store/store.ts";
import type { Transport } from "../../transport/transport.ts";
import { gatedTest, type GateOptions } from "../_util/skip.ts";
import { probeCases } from "./_probe_cases.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf, MESSAGE_SIZES } from "./_fixtures/_pattern.ts";

/** How the cases make and name one kind of transport. */
export interface TransportSuite<O = Record<never, never>> {
  /** The class, for test names: `"TcpTransport"`. */
  readonly name: string;
  /** Its `kind`: `"tcp"`. */
  readonly kind: string;
  /** Appended to each test name, e.g. `" (loopback test double)"`; `""` for none. */
  readonly label: string;
  /** Whether the suite can run here; always, when absent. */
  readonly gate?: GateOptions;
  /** Connects one rank through `store`. */
  readonly connect: (
    store: Store,
    options: { rank: number; size: number; timeoutMs: number } & Partial<O>,
  ) => Promise<Transport>;
  /** The end of the timeout message for a rank that never came, e.g. `"rank 2 never connected"`. */
  readonly neverCame: (rank: number) => string;
  /**
   * Whether pairs connect when first used (a lower rank's send waits until the higher rank uses the pair,
   * which dials): the close test then has the receiver use the pair before the sender closes.
   */
  readonly lazy?: boolean;
}

/**
 * A world of `size` transports of `suite` in this process, rendezvoused in memory.
 *
 * @param suite The transport.
 * @param size The number of ranks.
 * @param options More options for every rank's `connect`.
 * @returns The ranks and their store, disposed together.
 */
export async function world<O, T extends Transport = Transport>(
  suite: TransportSuite<O>,
  size: number,
  options: Partial<O> = {},
): Promise<{ ranks: T[]; store: MemoryStore } & AsyncDisposable> {
  const store = new MemoryStore({ timeoutMs: 10_000 });
  const ranks = await Promise.all(
    Array.from(
      { length: size },
      (_, rank) => suite.connect(store, { timeoutMs: 10_000, ...options, rank, size }) as Promise<T>,
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

/** A payload filled with the pattern of `seed`. */
export function message(bytes: number, seed: number): Uint8Array {
  const payload = new Uint8Array(bytes);
  fillPattern(payload, seed);
  return payload;
}

/** Resolves with `promise`'s value, or "pending" if it is still pending after `ms`. */
export async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"pending">((resolve) => timer = setTimeout(() => resolve("pending"), ms));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Registers every shared case for `suite`.
 *
 * @param suite The transport: how to connect it, its names and its gate.
 */
export function transportCases<O>(suite: TransportSuite<O>): void {
  const test = (name: string, fn: () => Promise<void>): void => {
    const full = `${suite.name}${name}${suite.label}`;
    if (suite.gate === undefined) Deno.test(full, fn);
    else gatedTest(full, suite.gate, fn);
  };
  for (const size of [1, 2, 3, 5]) {
    test(`.connect() forms a full mesh of ${size} rank${size > 1 ? "s" : ""}`, async () => {
      await using w = await world(suite, size);
      for (const t of w.ranks) {
        assert.equal(t.kind, suite.kind);
        assert.throws(() => t.pair(t.rank), RangeError);
        assert.throws(() => t.pair(size), RangeError);
      }
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

  test(" delivers many messages of every size in order, posted before or after arrival", async () => {
    await using w = await world(suite, 2);
    const [a, b] = w.ranks;
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

  test(" lets two ranks both send 8 MiB before either receives", async () => {
    await using w = await world(suite, 2);
    const [a, b] = w.ranks;
    const bytes = 8 << 20; // far more than any transport buffers: the receiving side must make room
    await Promise.all([
      a.pair(1).send(descriptor(0), message(bytes, 1)),
      b.pair(0).send(descriptor(0), message(bytes, 2)),
    ]);
    const [atA, atB] = [new Uint8Array(bytes), new Uint8Array(bytes)];
    await Promise.all([a.pair(1).recv(atA), b.pair(0).recv(atB)]);
    assert.equal(firstWrongByte(atA, 2), -1);
    assert.equal(firstWrongByte(atB, 1), -1);
  });

  test(".recv() runs check() on the descriptor before the payload lands", async () => {
    await using w = await world(suite, 2);
    const [a, b] = w.ranks;
    const into = new Uint8Array(1_000_000);
    let seen: { index: number; bytes: number; untouched: boolean } | undefined;
    const got = b.pair(0).recv(into, (desc, bytes) => {
      seen = { index: indexOf(desc), bytes, untouched: into.every((x) => x === 0) };
    });
    await a.pair(1).send(descriptor(7), message(1_000_000, 7));
    await got;
    assert.deepEqual(seen, { index: 7, bytes: 1_000_000, untouched: true });
    assert.equal(firstWrongByte(into, 7), -1);
  });

  test(" fails on every rank when a recv check throws", async () => {
    await using w = await world(suite, 3);
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

  test(" fails with both lengths when a message does not fit the receive view", async () => {
    await using w = await world(suite, 2);
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

  test(".abort() gives every peer the reason and fails every pending operation", async () => {
    await using w = await world(suite, 3);
    const [a, b, c] = w.ranks;
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

  test(".close() writes the sends made before it and leaves idle peers working", async () => {
    await using w = await world(suite, 3);
    const [a, b, c] = w.ranks;
    // Lazily connected, rank 1 dials rank 0 when it first uses the pair: here, a receive posted first.
    const first = suite.lazy ? b.pair(0).recv(new Uint8Array(0)) : undefined;
    if (first) await a.pair(1).send(descriptor(9), new Uint8Array(0));
    await first;
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
    await assert.rejects(
      b.pair(0).send(descriptor(0), new Uint8Array(1)),
      /Cannot send to rank 0: it closed/,
    );
  });

  test(" fails a rank still waiting for a message from a peer that closed", async () => {
    await using w = await world(suite, 2);
    const [a, b] = w.ranks;
    const waiting = b.pair(0).recv(new Uint8Array(1));
    waiting.catch(() => {}); // it may reject while a.close() still frees a's objects
    await a.close();
    const error = await b.failed;
    if (suite.lazy && !error.message.includes("still used it")) {
      // Rank 1's dial may come after rank 0 closed: then its port refuses it.
      assert.match(
        error.message,
        /^Cannot connect rank 1 to rank 0: it closed its transport or exited before/,
      );
    } else {
      assert.equal(
        error.message,
        "Cannot receive from rank 0: it closed its transport while rank 1 still used it",
      );
    }
    await assert.rejects(waiting, (e) => e === error);
  });

  test(".connect() times out naming the rank that never showed up", async () => {
    await using store = new MemoryStore();
    const results = await Promise.allSettled(
      [0, 1].map((rank) =>
        suite.connect(store, { rank, size: 3, timeoutMs: 400 } as Parameters<typeof suite.connect>[1])
      ),
    );
    for (const [rank, r] of results.entries()) {
      assert.equal(r.status, "rejected");
      const error = (r as PromiseRejectedResult).reason;
      assert.ok(error instanceof TimeoutError, String(error));
      // Over TCP, a rank up but waiting for the table of addresses (which needs rank 2's) is named apart.
      assert.ok(
        error.message.startsWith(
          `Cannot connect rank ${rank} of 3 within 400 ms: missing rank 2: ${suite.neverCame(2)}`,
        ),
        error.message,
      );
    }
  });

  probeCases("", () => world(suite, 3), test, suite.lazy);
}
