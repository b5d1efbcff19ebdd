/**
 * The error hierarchy: one {@linkcode DistError} base with a machine-readable `code` and the underlying
 * failure as `cause`, and a subclass per kind of failure. Bad arguments are not DistErrors: they throw
 * `TypeError` or `RangeError` naming what was expected and what was found.
 *
 * @module
 */

/** Options accepted by every {@linkcode DistError} constructor. */
export interface DistErrorOptions {
  /** The underlying failure. */
  cause?: unknown;
  /** A machine-readable code. @default the class's own code */
  code?: string;
}

/** The base of every error dcomm raises for a failure of the distributed system itself. */
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

/** A wait ran past its deadline. */
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

/** A peer closed its connection, died, aborted, or sent bytes that break the protocol. */
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

/** Ranks called different collectives (or the same with different arguments) at the same point. */
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

/** The rendezvous store refused a request or could not be reached. */
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

/** A native library could not be found; the message lists every path tried and how to fix it. */
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

/** The backend, library version or machine cannot do what was asked; nothing falls back silently. */
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

/** A call into the CUDA runtime returned an error code. */
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

/** A call into NCCL returned an error code. */
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
