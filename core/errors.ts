/**
 * The error hierarchy: one {@linkcode DistError} base with a machine-readable `code` and the underlying
 * failure as `cause`, and a subclass per kind of failure. Bad arguments are not DistErrors: they throw
 * `TypeError` or `RangeError` naming what was expected and what was found.
 *
 * @module
 */

/**
 * Options accepted by every {@linkcode DistError} constructor.
 *
 * @example Giving a code and a cause
 * ```ts
 * import { DistError, type DistErrorOptions } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: DistErrorOptions = { code: "ABORTED", cause: new Error("stop") };
 * const error = new DistError("Aborted before it started: stop", options);
 * assert.equal(error.code, "ABORTED");
 * assert.equal((error.cause as Error).message, "stop");
 * assert.equal(new DistError("no options").code, "DIST");
 * ```
 */
export interface DistErrorOptions {
  /** The underlying failure. */
  cause?: unknown;
  /** A machine-readable code. @default the class's own code */
  code?: string;
}

/**
 * The base of every error dcomm raises for a failure of the distributed system itself.
 *
 * @example Catching a refused collective
 * ```ts
 * import { DistError, init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const signal = AbortSignal.abort("stop");
 * await assert.rejects(
 *   async () => await pg.allReduce(new Float32Array(4), { signal }),
 *   (e) => e instanceof DistError && e.code === "ABORTED" && e.message.includes("stop"),
 * );
 * ```
 *
 * @example Telling dcomm's failures from bad arguments
 * ```ts
 * import { DistError, TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error: unknown = new TimeoutError("Timed out after 10 ms waiting for rank 1");
 * assert.ok(error instanceof DistError);
 * assert.equal(error.name, "TimeoutError");
 * assert.equal(error.code, "TIMEOUT");
 * assert.ok(!(new RangeError("bad rank") instanceof DistError));
 * ```
 */
export class DistError extends Error {
  /** A machine-readable code, such as `"TIMEOUT"` or `"NCCL"`. */
  readonly code: string;

  /**
   * Creates the error.
   *
   * @param message What failed, what was expected and what was found.
   * @param options The cause and code.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? "DIST";
  }
}

/**
 * A wait ran past its deadline.
 *
 * @example A store get that nobody answers
 * ```ts
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import { DistError, StoreError, TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await using store = new MemoryStore();
 * await assert.rejects(store.get("rank1/address", { timeoutMs: 10 }), (e) =>
 *   e instanceof TimeoutError && e instanceof DistError && !(e instanceof StoreError) &&
 *   e.code === "TIMEOUT" && e.message.startsWith("Timed out after 10 ms"));
 * ```
 */
export class TimeoutError extends DistError {
  /**
   * Creates the error.
   *
   * @param message What was waited for and for how long.
   * @param options The cause.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, { code: "TIMEOUT", ...options });
  }
}

/**
 * A peer closed its connection, died, aborted, or sent bytes that break the protocol.
 *
 * @example Reading which peer failed
 * ```ts
 * import { DistError, TransportError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error = new TransportError("Rank 1 died (pid 4242) during all-reduce", { peer: 1 });
 * assert.ok(error instanceof DistError);
 * assert.equal(error.code, "TRANSPORT");
 * assert.equal(error.peer, 1);
 * assert.equal(new TransportError("The connection closed").peer, undefined);
 * ```
 */
export class TransportError extends DistError {
  /** The peer rank involved, when known. */
  readonly peer?: number;
  /**
   * Creates the error.
   *
   * @param message What happened and with which peer.
   * @param options The cause, code and peer rank.
   */
  constructor(message: string, options: DistErrorOptions & { peer?: number } = {}) {
    super(message, { code: "TRANSPORT", ...options });
    this.peer = options.peer;
  }
}

/**
 * Ranks called different collectives (or the same with different arguments) at the same point.
 *
 * @example Reading a mismatch
 * ```ts
 * import { DistError, MismatchError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error = new MismatchError(
 *   "Mismatched calls: rank 1 called broadcast(4 × float32, root 0) #3 in group 0 " +
 *     "but rank 0 called allReduce(4 × float32, op sum) #3 in group 0",
 * );
 * assert.ok(error instanceof DistError);
 * assert.equal(error.name, "MismatchError");
 * assert.equal(error.code, "MISMATCH");
 * ```
 */
export class MismatchError extends DistError {
  /**
   * Creates the error.
   *
   * @param message Both ranks and both calls.
   * @param options The cause.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, { code: "MISMATCH", ...options });
  }
}

/**
 * The group was revoked (`pg.revoke()`, on this rank or another): every call in flight or queued, and every
 * later one, fails with it, on every rank. Make the group to go on with by `shrink()`.
 *
 * @example
 * ```ts
 * import { DistError, RevokedError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error = new RevokedError("Group 0 revoked by rank 2: a rank died");
 * assert.ok(error instanceof DistError);
 * assert.deepEqual([error.name, error.code], ["RevokedError", "REVOKED"]);
 * ```
 */
export class RevokedError extends DistError {
  /**
   * Creates the error.
   *
   * @param message Which rank revoked the group, and why.
   * @param options The cause.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, { code: "REVOKED", ...options });
  }
}

/**
 * The rendezvous store refused a request or could not be reached.
 *
 * @example Using a closed store
 * ```ts
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import { DistError, StoreError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const store = new MemoryStore();
 * await store.close();
 * await assert.rejects(store.set("rank0/address", "10.0.0.1:29400"), (e) =>
 *   e instanceof StoreError && e instanceof DistError && e.code === "STORE");
 * ```
 */
export class StoreError extends DistError {
  /**
   * Creates the error.
   *
   * @param message What the store was asked and what went wrong.
   * @param options The cause.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, { code: "STORE", ...options });
  }
}

/**
 * A native library could not be found; the message lists every path tried and how to fix it.
 *
 * @example The nccl backend on a machine without NCCL
 * ```ts
 * import { DistError, init, LibraryNotFoundError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * try {
 *   await using pg = await init({ backend: "nccl", rank: 0, worldSize: 1, env: {} });
 *   console.log(`the nccl backend runs here (${pg.size} rank)`);
 * } catch (e) {
 *   if (e instanceof LibraryNotFoundError) {
 *     assert.equal(e.code, "LIBRARY_NOT_FOUND");
 *     assert.ok(e.tried.length > 0 && e.tried.every((path) => e.message.includes(path)));
 *     assert.match(e.message, /^Cannot find NCCL[\s\S]*\nFix: set DCOMM_NCCL_PATH/);
 *   } else if (!(e instanceof DistError)) {
 *     throw e; // (an UnsupportedError: NCCL is there, no GPU is)
 *   }
 * }
 * ```
 */
export class LibraryNotFoundError extends DistError {
  /** Every path that was tried, in order. */
  readonly tried: readonly string[];
  /**
   * Creates the error.
   *
   * @param message What was looked for, every path tried and the fix.
   * @param options The cause and the paths tried.
   */
  constructor(message: string, options: DistErrorOptions & { tried?: readonly string[] } = {}) {
    super(message, { code: "LIBRARY_NOT_FOUND", ...options });
    this.tried = options.tried ?? [];
  }
}

/**
 * The backend, library version or machine cannot do what was asked; nothing falls back silently.
 *
 * @example Reading why something is unsupported
 * ```ts
 * import { DistError, UnsupportedError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const cause = new Error("libcuda.so.1: cannot open shared object file");
 * const error = new UnsupportedError("Cannot start the nccl backend: no usable GPU", { cause });
 * assert.ok(error instanceof DistError);
 * assert.equal(error.code, "UNSUPPORTED");
 * assert.equal(error.cause, cause);
 * ```
 */
export class UnsupportedError extends DistError {
  /**
   * Creates the error.
   *
   * @param message What is unsupported and what would support it.
   * @param options The cause.
   */
  constructor(message: string, options: DistErrorOptions = {}) {
    super(message, { code: "UNSUPPORTED", ...options });
  }
}

/**
 * A call into the CUDA runtime returned an error code.
 *
 * @example Reading the CUDA status
 * ```ts
 * import { CudaError, DistError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error = new CudaError("cudaMalloc failed: cudaErrorMemoryAllocation (2): out of memory", {
 *   status: 2,
 * });
 * assert.ok(error instanceof DistError);
 * assert.equal(error.code, "CUDA");
 * assert.equal(error.status, 2);
 * ```
 */
export class CudaError extends DistError {
  /** The `cudaError_t` value. */
  readonly status: number;
  /**
   * Creates the error.
   *
   * @param message The call, the code's name and its string.
   * @param options The status code and cause.
   */
  constructor(message: string, options: DistErrorOptions & { status: number }) {
    super(message, { code: "CUDA", ...options });
    this.status = options.status;
  }
}

/**
 * A call into NCCL returned an error code.
 *
 * @example Reading the NCCL result
 * ```ts
 * import { CudaError, DistError, NcclError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const error = new NcclError("ncclAllReduce failed: ncclInvalidArgument (4): invalid argument", {
 *   status: 4,
 * });
 * assert.ok(error instanceof DistError && !(error instanceof CudaError));
 * assert.equal(error.code, "NCCL");
 * assert.equal(error.status, 4);
 * ```
 */
export class NcclError extends DistError {
  /** The `ncclResult_t` value. */
  readonly status: number;
  /**
   * Creates the error.
   *
   * @param message The call, `ncclGetErrorString` and `ncclGetLastError`.
   * @param options The status code and cause.
   */
  constructor(message: string, options: DistErrorOptions & { status: number }) {
    super(message, { code: "NCCL", ...options });
    this.status = options.status;
  }
}
