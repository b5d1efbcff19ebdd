/**
 * What an algorithm sees: a communicator of group-local ranks that sends and receives bytes, a reduction
 * function, and scratch memory. Nothing else: no transport, no dtype, no sockets (Gloo's rule: algorithms
 * see only a context and point-to-point pairs).
 *
 * @module
 */

/** Point-to-point messages between the ranks of one group, numbered 0..size-1 within the group. */
export interface Comm {
  /** This rank, within the group. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /**
   * Sends `data` to `peer` as one message; resolves when `data` may be reused. Messages between two ranks
   * arrive in the order they were sent.
   */
  send(peer: number, data: Uint8Array): Promise<void>;
  /** Receives the next message from `peer`; its length must equal `into.length`. */
  recv(peer: number, into: Uint8Array): Promise<void>;
}

/** Everything an algorithm may use. */
export interface CollectiveContext {
  /** The group's communicator. */
  readonly comm: Comm;
  /** Bytes per element; every buffer and chunk boundary handed to `reduce` is a multiple of it. */
  readonly elemSize: number;
  /**
   * `dst = op(dst, src)` elementwise, for the collective's op (sum, prod, min or max; avg is a sum that
   * the caller divides afterwards). `dst` and `src` have the same length.
   */
  reduce(dst: Uint8Array, src: Uint8Array): void;
  /**
   * `dst = op(srcs[0], ..., srcs[k-1])` elementwise, in that order, so that every rank reducing the same
   * inputs gets the same bits.
   */
  reduceMany(dst: Uint8Array, srcs: readonly Uint8Array[]): void;
  /** A buffer of `bytes` bytes valid until the collective ends; its contents are undefined. */
  scratch(bytes: number): Uint8Array;
  /** The largest message an algorithm should send at once when it pipelines (bytes). */
  readonly chunkBytes: number;
  /**
   * The host of each group rank (equal numbers share a host), for topology-aware algorithms; undefined
   * where unknown (then every rank counts as its own host).
   */
  readonly hosts?: readonly number[];
}
