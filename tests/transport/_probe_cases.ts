/**
 * The cases of {@linkcode Pair.probe} every transport passes (what a receive from any rank stands on),
 * registered by each transport's tests: TCP and RDMA through `_transport_cases.ts`, the rings of
 * `inproc_test.ts` and `shm_test.ts` here directly.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Pair, Transport } from "../../transport/transport.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf } from "./_fixtures/_pattern.ts";

/** Three connected ranks of one transport, closed together. */
export type ProbeWorld = { readonly ranks: readonly Transport[] } & AsyncDisposable;

/** Resolves with "pending" if `promise` has not settled within `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"pending">((resolve) => timer = setTimeout(() => resolve("pending"), ms));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

function payload(bytes: number, seed: number): Uint8Array {
  const p = new Uint8Array(bytes);
  fillPattern(p, seed);
  return p;
}

/**
 * Registers the probe cases.
 *
 * @param name The transport's class, for test names.
 * @param connect Makes a world of three ranks.
 * @param test Registers one test (a gated one where the transport needs hardware).
 */
export function probeCases(
  name: string,
  connect: () => Promise<ProbeWorld>,
  test: (name: string, fn: () => Promise<void>) => void = Deno.test,
  lazy = false,
): void {
  test(`${name} Pair.probe() sees the next message's header and leaves the message for recv()`, async () => {
    await using w = await connect();
    const [a, b] = w.ranks;
    const probe = b.pair(0).probe();
    assert.equal(await within(probe, 50), "pending", "nothing was sent yet");
    assert.equal(b.pair(0).probe(), probe, "a second probe shares the pending one");
    for (const [i, bytes] of [[7, 10_000], [8, 0], [9, 3]]) {
      await a.pair(1).send(descriptor(i), payload(bytes, i));
    }
    const header = await probe;
    assert.deepEqual([indexOf(header.desc), header.bytes], [7, 10_000]);
    const again = await b.pair(0).probe(); // already here: at once, the same message
    assert.deepEqual([indexOf(again.desc), again.bytes], [7, 10_000]);
    for (const [i, bytes] of [[7, 10_000], [8, 0], [9, 3]]) {
      const into = new Uint8Array(bytes);
      assert.equal(indexOf(await b.pair(0).recv(into)), i);
      assert.equal(firstWrongByte(into, i), -1);
    }
    assert.equal(await within(b.pair(0).probe(), 50), "pending", "every message was taken");
  });

  test(`${name} Pair.probe() skips a message a posted recv() takes, and waits per peer`, async () => {
    await using w = await connect();
    const [a, b, c] = w.ranks;
    const first = new Uint8Array(64);
    const taken = b.pair(0).recv(first);
    const probes: Record<number, Promise<unknown>> = { 0: b.pair(0).probe(), 2: b.pair(2).probe() };
    await a.pair(1).send(descriptor(1), payload(64, 1));
    assert.equal(indexOf(await taken), 1);
    assert.equal(await within(probes[0], 50), "pending", "the posted recv took the only message");
    await c.pair(1).send(descriptor(5), payload(10, 5));
    const fromC = (await probes[2]) as Awaited<ReturnType<Pair["probe"]>>;
    assert.deepEqual([indexOf(fromC.desc), fromC.bytes], [5, 10]);
    assert.equal(await within(probes[0], 20), "pending", "a message from rank 2 is not rank 0's");
    await a.pair(1).send(descriptor(2), payload(64, 2));
    const fromA = (await probes[0]) as Awaited<ReturnType<Pair["probe"]>>;
    assert.deepEqual([indexOf(fromA.desc), fromA.bytes], [2, 64]);
    const rest = [new Uint8Array(64), new Uint8Array(10)];
    assert.equal(indexOf(await b.pair(0).recv(rest[0])), 2);
    assert.equal(indexOf(await b.pair(2).recv(rest[1])), 5);
    assert.equal(firstWrongByte(rest[0], 2), -1);
    assert.equal(firstWrongByte(rest[1], 5), -1);
  });

  test(`${name} Pair.probe() rejects when a peer aborts, and on a failed transport`, async () => {
    await using w = await connect();
    const [a, b] = w.ranks;
    const probe = b.pair(0).probe();
    a.abort(new Error("stopping for the probe test"));
    // Lazily connected, a peer that aborts before the pair's dial went through is only seen gone.
    const why = lazy
      ? /stopping for the probe test|it closed its transport or exited/
      : /stopping for the probe test/;
    await assert.rejects(probe, why);
    await assert.rejects(b.pair(2).probe(), why);
  });

  test(`${name} Pair.cancelProbe() withdraws a probe: a peer that closes after it fails nothing`, async () => {
    await using w = await connect();
    const [a, b, c] = w.ranks;
    const probe = b.pair(0).probe();
    b.pair(0).cancelProbe();
    await assert.rejects(probe, { name: "AbortError" });
    b.pair(0).cancelProbe(); // none pending: nothing happens
    await a.close();
    assert.equal(await within(b.failed, 100), "pending", "rank 0 closed while nothing waited on it");
    const into = new Uint8Array(5);
    await Promise.all([c.pair(1).send(descriptor(3), payload(5, 3)), b.pair(2).recv(into)]);
    assert.equal(firstWrongByte(into, 3), -1);
  });
}
