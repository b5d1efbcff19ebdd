import assert from "node:assert/strict";
import { TransportError } from "../../core/errors.ts";
import {
  checkRingBytes,
  FRAME_HEADER_BYTES,
  initRing,
  Ring,
  RING_HEADER_BYTES,
  RingReader,
  ringRegionBytes,
  RingWriter,
  STATE_ABORTED,
  STATE_CLOSED,
  STATE_OPEN,
} from "../../transport/_ring.ts";
import { Rng } from "../_util/rng.ts";
import { descriptor, fillPattern, firstWrongByte, indexOf } from "./_fixtures/_pattern.ts";

/** A writer and a reader over one ring in a SharedArrayBuffer, driven by hand on one thread. */
function ringOf(
  capacity: number,
): { ring: Ring; writer: RingWriter; reader: RingReader; notified: number[] } {
  const buffer = new SharedArrayBuffer(ringRegionBytes(capacity));
  initRing(buffer, 0, capacity);
  const ring = new Ring(buffer, 0);
  const notified = [0, 0];
  const writer = new RingWriter(ring, { writer: 0, reader: 1, notify: () => notified[0]++ });
  const reader = new RingReader(new Ring(buffer, 0), { writer: 0, reader: 1, notify: () => notified[1]++ });
  return { ring, writer, reader, notified };
}

/** Progresses both ends until neither moves. */
function pump(writer: RingWriter, reader: RingReader): void {
  for (let rounds = 0; rounds < 1_000_000; rounds++) {
    const wrote = writer.progress();
    const read = reader.progress();
    if (!wrote && !read) return;
  }
  throw new Error("Expected the ring to settle, found it still moving after a million rounds");
}

function settled(promise: Promise<unknown>): Promise<boolean> {
  const marker = Symbol();
  return Promise.race([promise.then(() => true, () => true), Promise.resolve(marker).then(() => false)]);
}

Deno.test("RingWriter and RingReader deliver messages of 0 to 4x the capacity in order, wrapping at odd offsets", async () => {
  const capacity = 1001; // odd, so frames and payloads wrap at odd offsets
  const { writer, reader } = ringOf(capacity);
  const sizes = [0, 1, 7, 13, 952, 953, 954, 1000, 1001, 1002, 0, 4004, 3, 65_537, 5];
  const payloads = sizes.map((bytes, i) => {
    const payload = new Uint8Array(bytes);
    fillPattern(payload, i);
    return payload;
  });
  const intos = sizes.map((bytes) => new Uint8Array(bytes));
  const sends = payloads.map((payload, i) => writer.send(descriptor(i), payload));
  const recvs = intos.map((into) => reader.recv(into));
  pump(writer, reader);
  await Promise.all(sends);
  const descs = await Promise.all(recvs);
  for (let i = 0; i < sizes.length; i++) {
    assert.equal(indexOf(descs[i]), i, `message ${i} arrived out of order`);
    assert.equal(firstWrongByte(intos[i], i), -1, `message ${i} (${sizes[i]} bytes) was corrupted`);
  }
  assert.equal(reader.unread, false);
});

Deno.test("RingWriter and RingReader survive random sizes, capacities and interleavings", async () => {
  const rng = new Rng(20240607);
  for (let trial = 0; trial < 20; trial++) {
    const capacity = 64 + (rng.u32() % 3000);
    const { writer, reader } = ringOf(capacity);
    const count = 40;
    const sizes = Array.from({ length: count }, () => rng.u32() % (rng.u32() % 2 === 0 ? 64 : 3 * capacity));
    const intos = sizes.map((bytes) => new Uint8Array(bytes));
    const sends: Promise<void>[] = [];
    const recvs: Promise<Uint8Array>[] = [];
    let sent = 0;
    let posted = 0;
    // Post sends and receives in random order and progress either end at random.
    while (sent < count || posted < count) {
      const step = rng.u32() % 4;
      if (step === 0 && sent < count) {
        const payload = new Uint8Array(sizes[sent]);
        fillPattern(payload, trial * 1000 + sent);
        sends.push(writer.send(descriptor(sent), payload));
        sent++;
      } else if (step === 1 && posted < count) {
        recvs.push(reader.recv(intos[posted]));
        posted++;
      } else if (step === 2) {
        writer.progress();
      } else {
        reader.progress();
      }
    }
    pump(writer, reader);
    await Promise.all(sends);
    const descs = await Promise.all(recvs);
    for (let i = 0; i < count; i++) {
      assert.equal(indexOf(descs[i]), i, `trial ${trial}: message ${i} arrived out of order`);
      assert.equal(firstWrongByte(intos[i], trial * 1000 + i), -1, `trial ${trial}: message ${i} corrupted`);
    }
  }
});

Deno.test("RingReader runs check() on descriptor and length before any payload lands", async () => {
  const { writer, reader } = ringOf(256);
  const payload = new Uint8Array(1000).fill(7);
  const into = new Uint8Array(1000);
  const seen: [number, number, number][] = [];
  const recv = reader.recv(
    into,
    (desc, bytes) => seen.push([indexOf(desc), bytes, into.reduce((a, b) => a + b)]),
  );
  const send = writer.send(descriptor(42), payload);
  writer.progress(); // header and the first bytes only: the ring holds 256
  reader.progress();
  assert.deepEqual(seen, [[42, 1000, 0]]);
  pump(writer, reader);
  await send;
  assert.equal(indexOf(await recv), 42);
  assert.deepEqual(into, payload);
});

Deno.test("RingReader throws a TransportError naming both lengths when a message does not fit the receive", () => {
  const { writer, reader } = ringOf(4096);
  void writer.send(descriptor(0), new Uint8Array(100));
  const recv = reader.recv(new Uint8Array(64));
  writer.progress();
  assert.throws(() => reader.progress(), (error: unknown) => {
    assert.ok(error instanceof TransportError);
    assert.equal(error.message, "Rank 0 sent a message of 100 bytes but rank 1 expected 64");
    assert.equal(error.peer, 0);
    return true;
  });
  const rejection = assert.rejects(recv, /Closing/);
  reader.rejectAll(new Error("Closing"));
  return rejection;
});

Deno.test("RingReader fails with what check() throws and leaves the receive to rejectAll", async () => {
  const { writer, reader } = ringOf(4096);
  void writer.send(descriptor(5), new Uint8Array(10));
  const into = new Uint8Array(10).fill(9);
  const recv = reader.recv(into, () => {
    throw new RangeError("Expected collective 4, found 5");
  });
  writer.progress();
  assert.throws(() => reader.progress(), RangeError);
  assert.equal(into[0], 9, "no payload may land after a refused header");
  reader.rejectAll(new Error("Refused"));
  await assert.rejects(recv, /Refused/);
});

Deno.test("RingReader leaves a message in the ring while it fits, and drains it once the ring is full", async () => {
  const { writer, reader } = ringOf(1024);
  const small = new Uint8Array(100).fill(1);
  const first = writer.send(descriptor(0), small);
  pump(writer, reader);
  await first;
  assert.equal(reader.unread, true, "a message that fits waits in the ring for its receive");

  // A second message bigger than the ring: the writer would wait forever for a receive it has not
  // posted yet (both ranks send before they receive), so the reader takes it out of the ring.
  const big = new Uint8Array(10_000);
  fillPattern(big, 1);
  const second = writer.send(descriptor(1), big);
  pump(writer, reader);
  assert.equal(await settled(second), true, "the send completes with no receive posted");
  assert.equal(reader.unread, false);

  const into = [new Uint8Array(100), new Uint8Array(10_000)];
  const descs = [reader.recv(into[0]), reader.recv(into[1])];
  pump(writer, reader);
  assert.deepEqual((await Promise.all(descs)).map(indexOf), [0, 1]);
  assert.deepEqual(into[0], small);
  assert.equal(firstWrongByte(into[1], 1), -1);
});

Deno.test("RingReader moves a partly drained message into a receive posted midway", async () => {
  const { writer, reader } = ringOf(500);
  const payload = new Uint8Array(5000);
  fillPattern(payload, 3);
  const send = writer.send(descriptor(3), payload);
  for (let i = 0; i < 4; i++) {
    writer.progress();
    reader.progress();
  }
  const into = new Uint8Array(5000);
  const recv = reader.recv(into);
  pump(writer, reader);
  await send;
  assert.equal(indexOf(await recv), 3);
  assert.equal(firstWrongByte(into, 3), -1);
});

Deno.test("Ring ends copy at most 256 KiB per progress step, publishing and notifying after each piece", () => {
  const { writer, reader, notified } = ringOf(2 << 20);
  void writer.send(descriptor(0), new Uint8Array(1 << 20));
  let steps = 0;
  while (writer.progress()) steps++;
  assert.equal(steps, 4, "1 MiB in steps of 256 KiB");
  assert.ok(notified[0] >= 4, `expected a notification per 256 KiB piece, found ${notified[0]}`);
  void reader.recv(new Uint8Array(1 << 20));
  steps = 0;
  while (reader.progress()) steps++;
  assert.equal(steps, 4, "1 MiB in steps of 256 KiB");
  assert.ok(notified[1] >= 4, `expected a notification per 256 KiB piece, found ${notified[1]}`);
});

Deno.test("Ring.abort() records a reason the other end reads, and an ABORT frame ends the stream", async () => {
  const { ring, writer, reader } = ringOf(4096);
  assert.equal(ring.state("writer"), STATE_OPEN);
  const recv = reader.recv(new Uint8Array(8));
  ring.abort("writer", "Rank 0 ran out of memory");
  assert.equal(ring.state("writer"), STATE_ABORTED);
  assert.equal(ring.reason("writer"), "Rank 0 ran out of memory");
  assert.equal(writer.writeAbortFrame("Rank 0 ran out of memory"), true);
  assert.throws(() => reader.progress(), (error: unknown) => {
    assert.ok(error instanceof TransportError);
    assert.equal(error.message, "Rank 0 aborted: Rank 0 ran out of memory");
    return true;
  });
  reader.rejectAll(new Error("aborted"));
  await assert.rejects(recv, /aborted/);

  ring.close("reader");
  assert.equal(ring.state("reader"), STATE_CLOSED);
  ring.close("writer"); // an aborted end stays aborted
  assert.equal(ring.state("writer"), STATE_ABORTED);
  assert.equal(ring.reason("writer").length, "Rank 0 ran out of memory".length);
  ring.abort("reader", "é".repeat(2000)); // truncated to 1 KiB, on a character boundary
  assert.equal(ring.reason("reader"), "é".repeat(512));
});

Deno.test("RingWriter writes no ABORT frame in the middle of a message", () => {
  const { writer } = ringOf(256);
  void writer.send(descriptor(0), new Uint8Array(1000));
  writer.progress();
  assert.equal(writer.writeAbortFrame("late"), false);
});

Deno.test("Ring records each end's pid, and refuses memory that holds no ring", () => {
  const { ring } = ringOf(64);
  ring.setPid("writer", 1234);
  ring.setPid("reader", 5678);
  assert.equal(ring.pid("writer"), 1234);
  assert.equal(ring.pid("reader"), 5678);
  assert.throws(() => new Ring(new SharedArrayBuffer(RING_HEADER_BYTES + 64), 0), TypeError);
});

Deno.test("checkRingBytes() accepts 64 B to 1 GiB and names what it found otherwise", () => {
  assert.equal(checkRingBytes(64), 64);
  assert.equal(checkRingBytes(1 << 30), 1 << 30);
  assert.ok(FRAME_HEADER_BYTES < 64);
  assert.throws(() => checkRingBytes(63), /from 64 to 1073741824, found 63/);
  assert.throws(() => checkRingBytes(1.5), RangeError);
  assert.throws(() => checkRingBytes(2 ** 30 + 1), RangeError);
  assert.equal(ringRegionBytes(1), RING_HEADER_BYTES + 4096);
});
