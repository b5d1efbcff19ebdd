import assert from "node:assert/strict";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { nextTurn } from "../../gpu/poll.ts";
import { Event, Stream } from "../../gpu/stream.ts";
import { gatedTest } from "../_util/skip.ts";
import { GPU } from "./_gpu.ts";

gatedTest("a new stream is idle; an event never recorded is done", GPU, () => {
  using stream = Stream.create();
  assert.equal(stream.query(), true);
  using event = Event.create();
  assert.equal(event.query(), true);
  stream.synchronize();
});

gatedTest("Event.done() waits for queued work without blocking the event loop", GPU, async () => {
  using stream = Stream.create({ nonBlocking: true });
  using buf = DeviceBuffer.alloc(256 << 20, { dtype: "uint8" });
  using start = Event.create();
  using end = Event.create();
  start.record(stream);
  for (let i = 0; i < 200; i++) buf.zero(i & 0xff, { stream });
  end.record(stream);
  const pending = !end.query();
  let turns = 0;
  let finished = false;
  const waiting = end.done({ timeoutMs: 30_000 }).then(() => (finished = true));
  while (!finished) {
    turns++;
    await nextTurn();
  }
  await waiting;
  const ms = end.elapsedSince(start);
  console.log(`200 memsets of 256 MiB: ${ms.toFixed(2)} ms GPU, event loop turned ${turns} times meanwhile`);
  assert.ok(ms > 0);
  if (pending) assert.ok(turns > 1, "the event loop kept running while the GPU worked");
  assert.equal((buf.view(0, 4).toArray() as Uint8Array)[0], 199);
});

gatedTest("Stream.waitEvent() orders two streams on the device", GPU, async () => {
  using a = Stream.create({ nonBlocking: true });
  using b = Stream.create({ nonBlocking: true });
  using src = DeviceBuffer.alloc(64 << 20, { dtype: "uint8" });
  using dst = DeviceBuffer.alloc(64 << 20, { dtype: "uint8" });
  using ready = Event.create({ timing: false });
  for (let i = 0; i < 20; i++) src.zero(7, { stream: a });
  ready.record(a);
  b.waitEvent(ready);
  dst.copyFrom(src, { stream: b });
  await b.done({ timeoutMs: 30_000 });
  assert.equal((dst.view(12345, 1).toArray() as Uint8Array)[0], 7);
});

gatedTest("Stream.legacy() wraps the legacy default stream and is never destroyed", GPU, () => {
  const legacy = Stream.legacy();
  legacy.synchronize();
  legacy[Symbol.dispose]();
  assert.equal(legacy.disposed, true);
});
