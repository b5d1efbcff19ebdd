/** `epochNowMs()`: CLOCK_MONOTONIC through one FFI call, anchored to the epoch the other reports use. */
import assert from "node:assert/strict";
import { epochNowMs } from "../../ffi/libc/libc.ts";

Deno.test("epochNowMs() agrees with performance's epoch and never goes back", () => {
  epochNowMs(); // libc opened, the anchor taken
  const perf = performance.timeOrigin + performance.now();
  const ours = epochNowMs();
  assert.ok(Math.abs(ours - perf) < 1, `epochNowMs() ${ours} against performance's ${perf}`);
  assert.ok(Math.abs(ours - Date.now()) < 50, `epochNowMs() ${ours} against Date.now() ${Date.now()}`);
  let last = epochNowMs();
  for (let i = 0; i < 10_000; i++) {
    const now = epochNowMs();
    assert.ok(now >= last, `went back from ${last} to ${now}`);
    last = now;
  }
  // Sub-millisecond resolution: a busy 2 ms shows as about 2 ms.
  const t0 = epochNowMs(), p0 = performance.now();
  while (performance.now() - p0 < 2);
  const spent = epochNowMs() - t0;
  assert.ok(spent >= 1.9 && spent < 50, `a 2 ms wait measured ${spent} ms`);
});
