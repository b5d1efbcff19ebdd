/**
 * A tensor in flight is safe whatever the caller does to its buffer: while a call reaches it by address
 * (the cpu backend's communication thread, MPI's non-blocking calls), its buffer cannot be detached
 * (`transfer()`, `structuredClone` or `postMessage` with a transfer list throw), and the call's result is
 * right. Before the buffer was pinned, a transfer mid-call made the ranks crash in memcpy or write into
 * memory another object owned.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import type { PinResult } from "./_fixtures/pin_rank.ts";
import { launchedResults, mpiexecResults } from "../_util/launched.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { pinBuffer } from "../../backend/_pin.ts";

const FIXTURE = new URL("./_fixtures/pin_rank.ts", import.meta.url);

function check(results: PinResult[]): void {
  for (const r of results) {
    assert.deepEqual(r, {
      transfer: "TypeError",
      clone: "TypeError",
      post: "DataCloneError",
      after: "TypeError",
      wrong: 0,
    });
  }
}

Deno.test("a tensor's buffer cannot be detached while a call runs on it (2 threads)", async () => {
  check(await spawnThreads(FIXTURE, { worldSize: 2, timeoutMs: 60_000 }) as PinResult[]);
});

for (const transport of ["tcp", "shm"]) {
  Deno.test(`a tensor's buffer cannot be detached while a call runs on it (2 processes over ${transport})`, async () => {
    check(await launchedResults<PinResult>(FIXTURE.pathname, 2, { DCOMM_TRANSPORT: transport }, 60_000));
  });
}

gatedTest("a tensor's buffer cannot be detached while an MPI call runs on it (2 ranks under mpiexec)", {
  missing: hasCommand("mpiexec") ? undefined : "mpiexec not found (apt-get install mpich libmpich-dev)",
  ciCanSatisfy: true,
}, async () => {
  check(await mpiexecResults<PinResult>(FIXTURE.pathname, 2));
});

Deno.test("pinBuffer marks ordinary buffers and leaves a WebAssembly memory's alone (its grow still works)", () => {
  const address = (b: ArrayBufferLike): number => Number(Deno.UnsafePointer.value(Deno.UnsafePointer.of(b)));
  const memory = new WebAssembly.Memory({ initial: 2 });
  pinBuffer(memory.buffer, address(memory.buffer));
  memory.grow(1); // would abort the process had the buffer been marked
  assert.equal(memory.buffer.byteLength, 3 * 65536);
  for (const bytes of [8, 65536, 1 << 20]) {
    const plain = new ArrayBuffer(bytes);
    pinBuffer(plain, address(plain));
    assert.throws(() => plain.transfer(), TypeError, `${bytes} bytes`);
  }
  const shared = new SharedArrayBuffer(16);
  pinBuffer(shared, address(shared)); // nothing to do: shared memory is never detached
});
