/**
 * Deterministic payloads for transport tests: every byte depends on its position and a seed, so a byte
 * delivered to the wrong place, twice, or from the wrong message is caught.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Pair, Transport } from "../../../transport/transport.ts";

/**
 * Fills `into` with the pattern of `seed`.
 *
 * @param into The bytes to fill.
 * @param seed Distinguishes messages.
 */
export function fillPattern(into: Uint8Array, seed: number): void {
  const words = Math.floor(into.length / 4);
  const aligned = into.byteOffset % 4 === 0
    ? new Uint32Array(into.buffer, into.byteOffset, words)
    : undefined;
  if (aligned) {
    for (let i = 0; i < words; i++) aligned[i] = Math.imul(i + 1, 2654435761) ^ seed;
  } else {
    const view = new DataView(into.buffer, into.byteOffset, into.length);
    for (let i = 0; i < words; i++) view.setUint32(i * 4, Math.imul(i + 1, 2654435761) ^ seed, true);
  }
  for (let i = words * 4; i < into.length; i++) into[i] = (seed + i) & 0xff;
}

/**
 * Finds the first byte of `bytes` that differs from the pattern of `seed`.
 *
 * @param bytes The bytes received.
 * @param seed The seed they were filled with.
 * @returns The index of the first wrong byte, or -1 when all are right.
 */
export function firstWrongByte(bytes: Uint8Array, seed: number): number {
  const expected = new Uint8Array(bytes.length);
  fillPattern(expected, seed);
  // Compare word by word where possible: a 64 MiB byte loop is slow enough to matter in the suite.
  const words = Math.floor(bytes.length / 4);
  if (bytes.byteOffset % 4 === 0) {
    const a = new Uint32Array(bytes.buffer, bytes.byteOffset, words);
    const b = new Uint32Array(expected.buffer, 0, words);
    for (let i = 0; i < words; i++) if (a[i] !== b[i]) return firstDiff(bytes, expected, i * 4);
  } else {
    return firstDiff(bytes, expected, 0);
  }
  return firstDiff(bytes, expected, words * 4);
}

function firstDiff(a: Uint8Array, b: Uint8Array, from: number): number {
  for (let i = from; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/** Sizes that cross every boundary of the framing: empty, tiny, the coalescing limit, stripes, 64 MiB. */
export const MESSAGE_SIZES: readonly number[] = [
  0,
  1,
  7,
  4096,
  16 * 1024,
  16 * 1024 + 1,
  65_536 + 3,
  1 << 20,
  (3 << 20) + 5,
  0,
  64 << 20,
  13,
];

/** A 32-byte descriptor that carries a message index, as the layer above stamps its messages. */
export function descriptor(index: number): Uint8Array {
  const desc = new Uint8Array(32);
  new DataView(desc.buffer).setUint32(0, index, true);
  desc[31] = 0xd5;
  return desc;
}

/** The message index of a descriptor made by {@linkcode descriptor}. */
export function indexOf(desc: Uint8Array): number {
  return new DataView(desc.buffer, desc.byteOffset, 32).getUint32(0, true);
}

/**
 * The `send-sizes` scenario of the rank fixtures: sends every size of {@linkcode MESSAGE_SIZES} to `root`
 * at once (message i filled with the pattern of seed i), then waits for its 0-byte reply.
 */
export async function sendSizes(root: Pair): Promise<void> {
  await Promise.all(MESSAGE_SIZES.map((size, i) => {
    const payload = new Uint8Array(size);
    fillPattern(payload, i);
    return root.send(descriptor(i), payload);
  }));
  await root.recv(new Uint8Array(0));
}

/**
 * The `all-to-all` scenario of the rank fixtures: `bytes` to and from every other rank at once, rank r's
 * message to p filled with the pattern of seed 100 r + p.
 *
 * @returns The peers whose message arrived wrong.
 */
export async function allToAll(transport: Transport, bytes: number): Promise<number[]> {
  const rank = transport.rank;
  const peers = Array.from({ length: transport.size }, (_, p) => p).filter((p) => p !== rank);
  const got = peers.map(() => new Uint8Array(bytes));
  await Promise.all([
    ...peers.map((peer) => {
      const payload = new Uint8Array(bytes);
      fillPattern(payload, rank * 100 + peer);
      return transport.pair(peer).send(descriptor(rank), payload);
    }),
    ...peers.map((peer, i) => transport.pair(peer).recv(got[i])),
  ]);
  return peers.filter((peer, i) => firstWrongByte(got[i], peer * 100 + rank) !== -1);
}

/**
 * The receiving end of {@linkcode sendSizes}: receives every size from `peer` and checks each, posting
 * the first half of the receives at once and the rest after the sender had time to fill the ring, then
 * sends the 0-byte reply.
 */
export async function receiveSizes(peer: Pair): Promise<void> {
  const got = MESSAGE_SIZES.map((bytes) => new Uint8Array(bytes));
  const half = Math.floor(got.length / 2);
  const early = got.slice(0, half).map((into) => peer.recv(into));
  await new Promise((resolve) => setTimeout(resolve, 50));
  const late = got.slice(half).map((into) => peer.recv(into));
  const descs = await Promise.all([...early, ...late]);
  for (let i = 0; i < got.length; i++) {
    assert.equal(indexOf(descs[i]), i);
    assert.equal(firstWrongByte(got[i], i), -1, `message ${i} (${got[i].length} bytes) is wrong`);
  }
  await peer.send(descriptor(0), new Uint8Array(0));
}

/** What the shared rank scenarios are given. */
export interface ScenarioOptions {
  /** This rank. */
  rank: number;
  /** Bytes of a message (`all-to-all`, `send-first`, `echo`). */
  bytes: number;
  /** Round trips of `echo`. */
  count: number;
  /** The reason `abort` aborts with. */
  reason: string;
}

/**
 * Runs one of the scenarios the in-process and shared-memory rank fixtures share, rank 0 being the test:
 * - `send-sizes`: sends MESSAGE_SIZES to rank 0, all at once, then waits for a 0-byte reply.
 * - `all-to-all`: sends one pattern message of `bytes` to every other rank and receives one from each;
 *   reports the peers whose message was wrong.
 * - `send-first`: sends `bytes` to rank 0 and waits for the send, then receives `bytes` from it.
 * - `echo`: receives `bytes` from rank 0 and sends them back, `count` times.
 * - `abort`: waits for a 0-byte "go" from rank 0 (its receive is posted), then aborts with `reason`.
 * - `wait`: waits for 8 bytes from rank 0 and reports how that failed.
 *
 * @param transport This rank's transport.
 * @param scenario The scenario's name.
 * @param options Its parameters.
 * @param say Reports `{ event: "done", ... }`.
 * @returns False for a scenario that is not one of these (the fixture's own).
 */
export async function runSharedScenario(
  transport: Transport,
  scenario: string,
  options: ScenarioOptions,
  say: (event: Record<string, unknown>) => void,
): Promise<boolean> {
  const { rank, bytes, count, reason } = options;
  const root = transport.pair(0);
  if (scenario === "send-sizes") {
    await sendSizes(root);
    say({ event: "done" });
  } else if (scenario === "all-to-all") {
    say({ event: "done", wrong: await allToAll(transport, bytes) });
  } else if (scenario === "send-first") {
    const payload = new Uint8Array(bytes);
    fillPattern(payload, rank);
    await root.send(descriptor(rank), payload);
    const got = new Uint8Array(bytes);
    await root.recv(got);
    say({ event: "done", wrong: firstWrongByte(got, 0) });
  } else if (scenario === "echo") {
    const data = new Uint8Array(bytes);
    for (let i = 0; i < count; i++) {
      await root.recv(data);
      await root.send(descriptor(i), data);
    }
    say({ event: "done" });
  } else if (scenario === "abort") {
    await root.recv(new Uint8Array(0));
    transport.abort(new Error(reason));
    say({ event: "done" });
  } else if (scenario === "wait") {
    const error = await root.recv(new Uint8Array(8)).then(() => undefined, (e: Error) => e);
    say({ event: "done", message: error?.message });
  } else {
    return false;
  }
  return true;
}
