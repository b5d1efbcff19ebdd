import assert from "node:assert/strict";
import { fromWire, toWire, WIRE_ERROR_CLASSES } from "../../core/wire_error.ts";
import {
  CudaError,
  DistError,
  LibraryNotFoundError,
  MismatchError,
  NcclError,
  StoreError,
  TimeoutError,
  TransportError,
  UnsupportedError,
} from "../../core/errors.ts";

/** Through toWire, a structured clone (what postMessage does) and fromWire. */
function trip(e: unknown): Error {
  return fromWire(structuredClone(toWire(e)));
}

const cause = new RangeError("the underlying failure");
const DIST_ERRORS: [Error, new (...args: never[]) => Error, Record<string, unknown>][] = [
  [new DistError("d", { cause, code: "CUSTOM" }), DistError, { code: "CUSTOM" }],
  [new TimeoutError("t", { cause }), TimeoutError, { code: "TIMEOUT" }],
  [new TransportError("p", { cause, peer: 3 }), TransportError, { code: "TRANSPORT", peer: 3 }],
  [new MismatchError("m", { cause }), MismatchError, { code: "MISMATCH" }],
  [new StoreError("s", { cause }), StoreError, { code: "STORE" }],
  [
    new LibraryNotFoundError("l", { cause, tried: ["/a/libx.so (no such file)", "libx.so: not found"] }),
    LibraryNotFoundError,
    { code: "LIBRARY_NOT_FOUND", tried: ["/a/libx.so (no such file)", "libx.so: not found"] },
  ],
  [new UnsupportedError("u", { cause }), UnsupportedError, { code: "UNSUPPORTED" }],
  [new CudaError("c", { cause, status: 35 }), CudaError, { code: "CUDA", status: 35 }],
  [new NcclError("n", { cause, status: 3 }), NcclError, { code: "NCCL", status: 3 }],
];

Deno.test("fromWire(toWire()) keeps every DistError subclass's class, name, message, fields and cause", () => {
  for (const [original, cls, fields] of DIST_ERRORS) {
    const back = trip(original);
    assert.ok(back instanceof cls, `${original.name}: expected an instance of ${cls.name}, found ${back}`);
    assert.ok(back instanceof DistError);
    assert.equal(back.name, original.name);
    assert.equal(back.message, original.message);
    assert.equal(back.stack, original.stack);
    for (const [key, value] of Object.entries(fields)) {
      assert.deepEqual((back as unknown as Record<string, unknown>)[key], value, `${original.name}.${key}`);
    }
    assert.ok(back.cause instanceof RangeError, `${original.name}: expected a RangeError cause`);
    assert.equal((back.cause as Error).message, "the underlying failure");
  }
  // Every class of errors.ts is in the table.
  for (const [, cls] of DIST_ERRORS) assert.equal(WIRE_ERROR_CLASSES[cls.name], cls);
});

Deno.test("fromWire(toWire()) keeps built-in classes and a chain of causes", () => {
  const e = new TypeError("outer", {
    cause: new TransportError("middle", { peer: 1, cause: new Error("inner", { cause: { errno: 104 } }) }),
  });
  const back = trip(e);
  assert.ok(back instanceof TypeError);
  assert.ok(!(back instanceof DistError));
  const middle = back.cause as TransportError;
  assert.ok(middle instanceof TransportError);
  assert.equal(middle.peer, 1);
  const inner = middle.cause as Error;
  assert.equal(inner.constructor, Error);
  assert.equal(inner.message, "inner");
  assert.deepEqual(inner.cause, { errno: 104 });
  assert.ok(!("cause" in trip(new RangeError("no cause"))), "no cause stays no cause");
});

Deno.test("fromWire(toWire()) keeps a subclass it does not know as its nearest known class", () => {
  class MpiLikeError extends DistError {
    readonly status: number;
    constructor(message: string, status: number) {
      super(message, { code: "MPI" });
      this.status = status;
    }
  }
  const back = trip(new MpiLikeError("MPI_Iallreduce failed", 14));
  assert.ok(back instanceof DistError);
  assert.equal(back.name, "MpiLikeError");
  assert.equal((back as DistError).code, "MPI");
  assert.equal((back as unknown as { status: number }).status, 14);
});

Deno.test("toWire() maps a DistError class from another copy of errors.ts by name", () => {
  // What a rank module sees when it imports dcomm from another URL than the caller.
  class DistError extends Error {
    code = "MISMATCH";
  }
  class MismatchError extends DistError {
    override name = "MismatchError";
  }
  const back = trip(new MismatchError("from the other copy"));
  assert.ok(back instanceof (WIRE_ERROR_CLASSES.MismatchError as typeof Error));
  assert.equal((back as unknown as { code: string }).code, "MISMATCH");
  // A class of the same name outside the DistError family stays what it is.
  class TimeoutError extends Error {
    override name = "TimeoutError";
  }
  const plain = trip(new TimeoutError("a user's own"));
  assert.equal(plain.constructor, Error);
  assert.equal(plain.name, "TimeoutError");
});

Deno.test("toWire() keeps a DOMException apart from dcomm's TimeoutError, and AggregateError's errors", () => {
  const dom = trip(new DOMException("Signal timed out.", "TimeoutError"));
  assert.ok(dom instanceof DOMException);
  assert.ok(!(dom instanceof TimeoutError));
  assert.equal(dom.name, "TimeoutError");
  const agg = trip(new AggregateError([new MismatchError("a"), "b"], "two failed"));
  assert.ok(agg instanceof AggregateError);
  assert.ok(agg.errors[0] instanceof MismatchError);
  assert.equal(agg.errors[1], "b");
  const notFound = trip(new Deno.errors.NotFound("no file"));
  assert.ok(notFound instanceof Deno.errors.NotFound);
});

Deno.test("toWire() is structured-clone safe for anything thrown, and never throws", () => {
  const e = new DistError("has a function field", { cause: () => 1 });
  (e as unknown as { callback: () => void }).callback = () => {};
  const back = trip(e);
  assert.equal(typeof back.cause, "string", "a cause that does not clone arrives as text");
  assert.ok(!("callback" in back), "a field that does not clone is left out");
  const cyclic = new Error("cyclic");
  cyclic.cause = cyclic;
  let depth = 0;
  for (let c: unknown = trip(cyclic); c instanceof Error; c = c.cause) depth++;
  assert.ok(depth > 1 && depth <= 17, `expected the cause chain cut, found ${depth} levels`);
  const thrown = trip(42);
  assert.equal(thrown.constructor, Error);
  assert.equal(thrown.message, "42");
  assert.equal(thrown.cause, 42);
  assert.equal(trip(undefined).message, "undefined");
});
