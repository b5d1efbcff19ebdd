import assert from "node:assert/strict";
import {
  type Completion,
  COMPLETION_SLOTS,
  completionBuffer,
  CompletionReader,
  CompletionWriter,
} from "../../backend/cpu/_completions.ts";
import { moduleWorker } from "../_util/worker.ts";

function completion(id: number): Completion {
  return {
    id,
    algorithm: id % 7,
    bytes: id * 4,
    bytesSent: id * 3,
    timeMs: id / 8,
    startedAt: 1.7e12 + id,
    finishedAt: 1.7e12 + id + id / 8,
    // Phases on every other record, waiting measured on every fourth: both absences round-trip.
    ...(id % 2 === 0
      ? {
        phases: {
          ...(id % 4 === 0 ? { waitingMs: id / 32 } : {}),
          movingMs: id / 16,
          reducingMs: id / 64,
          codecMs: id % 3,
        },
      }
      : {}),
  };
}

Deno.test("CompletionReader delivers what CompletionWriter wrote, in order, field by field", () => {
  const buffer = completionBuffer();
  const got: Completion[] = [];
  const reader = new CompletionReader(buffer, (c) => got.push(c));
  const writer = new CompletionWriter(buffer);
  reader.drain();
  assert.deepEqual(got, []);
  // Three times around the ring, so that slots are reused.
  for (let round = 0; round < 3; round++) {
    const ids = Array.from({ length: COMPLETION_SLOTS }, (_, i) => round * COMPLETION_SLOTS + i + 1);
    for (const id of ids) assert.equal(writer.write(completion(id)), true);
    reader.drain();
    assert.deepEqual(got.splice(0), ids.map(completion));
  }
});

Deno.test("CompletionWriter refuses a record when the reader is a whole ring behind", () => {
  const buffer = completionBuffer();
  const got: number[] = [];
  const reader = new CompletionReader(buffer, (c) => got.push(c.id));
  const writer = new CompletionWriter(buffer);
  for (let id = 1; id <= COMPLETION_SLOTS; id++) assert.equal(writer.write(completion(id)), true);
  assert.equal(writer.write(completion(COMPLETION_SLOTS + 1)), false, "full");
  reader.drain();
  assert.equal(got.length, COMPLETION_SLOTS);
  assert.equal(writer.write(completion(COMPLETION_SLOTS + 1)), true, "room again");
});

Deno.test("CompletionReader.watch() wakes for a record written by another thread and ends when nothing is pending", async () => {
  const buffer = completionBuffer();
  const got: number[] = [];
  let pending = 3;
  const reader = new CompletionReader(buffer, (c) => {
    got.push(c.id);
    pending--;
  });
  const watching = reader.watch(() => pending > 0);
  const worker = moduleWorker(
    new URL("../../backend/cpu/_completions.ts", import.meta.url),
    `const writer = new m.CompletionWriter(data.buffer);
    for (const id of [11, 12, 13]) {
      await new Promise((r) => setTimeout(r, 20));
      writer.write({ id, algorithm: 0, bytes: 0, bytesSent: 0, timeMs: 0, startedAt: 0, finishedAt: 0 });
    }
    self.postMessage("done");`,
  );
  try {
    const done = new Promise((resolve) => worker.onmessage = resolve);
    worker.postMessage({
      buffer,
      module: new URL("../../backend/cpu/_completions.ts", import.meta.url).href,
    });
    await done;
    await watching;
    assert.deepEqual(got, [11, 12, 13]);
  } finally {
    worker.terminate();
  }
});

Deno.test("CompletionReader.stop() ends a watch that waits", async () => {
  const reader = new CompletionReader(completionBuffer(), () => {});
  const watching = reader.watch(() => true);
  reader.stop();
  await watching;
});
