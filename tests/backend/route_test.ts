/**
 * `route()`: where a cpu call runs, from the call and its group's and thread's state alone — through the
 * segment on the calling thread, in place in the pool, on the Worker by address or staged, or through a
 * codec — and the refusals it makes before anything is sent.
 */
import assert from "node:assert/strict";
import { UnsupportedError } from "../../core/errors.ts";
import { SEGMENT_GROUPS } from "../../transport/segment.ts";
import {
  groupUsesSegment,
  inputOf,
  outputOf,
  route,
  type RoutedCall,
  type RouteSite,
} from "../../backend/cpu/_route.ts";
import type { CheckedCompression } from "../../backend/_compression.ts";

/** A shared-memory world's group 0, idle, with FFI, 16 MiB inline, no pool. */
const SHM: RouteSite = {
  group: 0,
  segment: true,
  transport: "shm",
  idle: true,
  inlineBytes: 16 << 20,
  byAddress: true,
  pool: undefined,
};

function allReduce(tensor: Float32Array, more: Partial<RoutedCall> = {}): RoutedCall {
  return { collective: "allReduce", algorithm: "auto", tensor, ...more };
}

const INT8 = { codec: "int8", blockSize: 256, interHost: false } as unknown as CheckedCompression;

Deno.test("route() runs a small auto all-reduce through the segment on the calling thread when idle", () => {
  assert.deepEqual(route(allReduce(new Float32Array(2)), SHM), { kind: "inline", segment: true });
  assert.deepEqual(route(allReduce(new Float32Array(2), { algorithm: "segment" }), SHM), {
    kind: "inline",
    segment: true,
  });
});

Deno.test("route() sends a segment call to the Worker when it is busy, failed or the input is large", () => {
  const t = new Float32Array(1024);
  const busy = { ...SHM, idle: false };
  assert.deepEqual(route(allReduce(t), busy), { kind: "byAddress", segment: true });
  assert.deepEqual(route(allReduce(t), { ...SHM, inlineBytes: 4095 }), { kind: "byAddress", segment: true });
  assert.deepEqual(route(allReduce(t), { ...SHM, inlineBytes: 4096 }), { kind: "inline", segment: true });
  assert.deepEqual(route(allReduce(t), { ...busy, byAddress: false }), { kind: "staged", segment: true });
});

Deno.test("route() runs a named message algorithm, and auto without a segment, on the Worker", () => {
  const t = new Float32Array(4);
  assert.deepEqual(route(allReduce(t, { algorithm: "ring" }), SHM), { kind: "byAddress", segment: false });
  const tcp = { ...SHM, segment: false, transport: "tcp" };
  assert.deepEqual(route(allReduce(t), tcp), { kind: "byAddress", segment: false });
  assert.deepEqual(route(allReduce(t), { ...tcp, byAddress: false }), { kind: "staged", segment: false });
});

Deno.test("route() never runs send or recv through the segment", () => {
  const t = new Float32Array(4);
  assert.deepEqual(route({ collective: "send", algorithm: "auto", tensor: t }, SHM), {
    kind: "byAddress",
    segment: false,
  });
  assert.throws(
    () => route({ collective: "recv", algorithm: "segment", tensor: t }, SHM),
    UnsupportedError,
  );
});

Deno.test("route() refuses the segment by name where the group has none, saying why", () => {
  const t = new Float32Array(4);
  assert.throws(
    () => route(allReduce(t, { algorithm: "segment" }), { ...SHM, segment: false, transport: "tcp" }),
    {
      name: "UnsupportedError",
      message:
        'Cannot run allReduce with algorithm "segment": it needs the ranks\' shared host segment, and this world ' +
        "runs over tcp, not shared memory",
    },
  );
  assert.throws(
    () => route(allReduce(t, { algorithm: "segment" }), { ...SHM, group: SEGMENT_GROUPS, segment: false }),
    { message: new RegExp(`group ${SEGMENT_GROUPS} has no block in it`) },
  );
});

Deno.test("route() runs an all-reduce of a pool tensor in place, whatever its size", () => {
  const pool = new ArrayBuffer(1 << 16);
  const site = { ...SHM, pool, inlineBytes: 16 };
  const t = new Float32Array(pool, 1024, 1024);
  assert.deepEqual(route(allReduce(t), site), { kind: "pooled", segment: true, inline: true });
  assert.deepEqual(route(allReduce(t), { ...site, idle: false }), {
    kind: "pooled",
    segment: true,
    inline: false,
  });
  // Only an all-reduce, only through the segment.
  assert.deepEqual(route({ collective: "broadcast", algorithm: "auto", tensor: t }, site), {
    kind: "byAddress",
    segment: true,
  });
  assert.deepEqual(route(allReduce(t, { algorithm: "ring" }), site), { kind: "byAddress", segment: false });
});

Deno.test("route() runs compression and commDtype through a codec on the Worker, and only with FFI", () => {
  const t = new Float32Array(4);
  assert.deepEqual(route(allReduce(t, { compression: INT8 }), SHM), { kind: "codec", segment: false });
  assert.deepEqual(route(allReduce(t, { commDtype: "float16" }), SHM), { kind: "codec", segment: false });
  const noFfi = { ...SHM, byAddress: false };
  assert.throws(() => route(allReduce(t, { compression: INT8 }), noFfi), {
    name: "UnsupportedError",
    message: /^Cannot all-reduce with compression: the cpu backend without FFI backend has no communication/,
  });
  assert.throws(() => route(allReduce(t, { commDtype: "bfloat16" }), noFfi), {
    name: "UnsupportedError",
    message: /^Cannot all-reduce with commDtype: the cpu backend without FFI backend reduces/,
  });
});

Deno.test("route() returns one frozen object per route, so routing allocates nothing", () => {
  const a = route(allReduce(new Float32Array(2)), SHM);
  const b = route(allReduce(new Float32Array(8)), SHM);
  assert.equal(a, b);
  assert.ok(Object.isFrozen(a));
});

Deno.test("inputOf() and outputOf() name what a call reads and writes", () => {
  const t = new Float32Array(4), out = new Float32Array(8);
  assert.equal(inputOf({ collective: "recv", algorithm: "auto", tensor: t }), undefined);
  assert.equal(outputOf({ collective: "recv", algorithm: "auto", tensor: t }), t);
  assert.equal(inputOf({ collective: "send", algorithm: "auto", tensor: t }), t);
  assert.equal(outputOf({ collective: "send", algorithm: "auto", tensor: t }), undefined);
  assert.equal(inputOf({ collective: "allGather", algorithm: "auto", input: t, output: out }), t);
  assert.equal(outputOf({ collective: "allGather", algorithm: "auto", input: t, output: out }), out);
});

Deno.test("groupUsesSegment() holds for groups with a block in a world with a segment", () => {
  assert.equal(groupUsesSegment(true, 0), true);
  assert.equal(groupUsesSegment(true, SEGMENT_GROUPS - 1), true);
  assert.equal(groupUsesSegment(true, SEGMENT_GROUPS), false);
  assert.equal(groupUsesSegment(false, 0), false);
});
