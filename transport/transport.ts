/**
 * The transport layer's contract: ordered, reliable messages between two ranks (a {@linkcode Pair}), and
 * a {@linkcode Transport} that connects one rank to all the others. Algorithms never see a concrete
 * transport; they see a communicator built on pairs (`collectives/comm.ts`).
 *
 * Every message carries a 32-byte descriptor chosen by the layer above (the backend stamps each message
 * with the collective it belongs to, so ranks that disagree are caught). The receiver sees the descriptor
 * and the payload length before a byte of payload lands in its buffer.
 *
 * Failure model: any error on a pair (peer closed, died, aborted, protocol violation) is fatal to the
 * transport. {@linkcode Transport.abort} tells every peer why, best effort, and closes.
 *
 * @module
 */

/** Bytes in a message descriptor. */
export const DESC_BYTES = 32;

/**
 * Called when a message's header arrives, before its payload is copied into the receive buffer. Throw to
 * refuse the message (the transport then fails with that error).
 */
export type RecvCheck = (desc: Uint8Array, payloadBytes: number) => void;

/** A message's header, as {@linkcode Pair.probe} sees it before the message is received. */
export interface MessageHeader {
  /** The descriptor ({@linkcode DESC_BYTES} bytes; a copy the caller may keep). */
  readonly desc: Uint8Array;
  /** The payload's length in bytes. */
  readonly bytes: number;
  /**
   * When the message's header arrived (`performance.now()` on the receiving thread), where the transport
   * knows it: a receive from any source takes the message that came first, so no sender starves.
   */
  readonly arrivedAt?: number;
}

/** One end of an ordered, reliable message channel with one peer. */
export interface Pair {
  /** The peer's rank. */
  readonly peer: number;
  /**
   * Sends one message. Resolves when `payload` may be reused.
   *
   * @param desc Exactly {@linkcode DESC_BYTES} bytes.
   * @param payload The bytes to send.
   */
  send(desc: Uint8Array, payload: Uint8Array): Promise<void>;
  /**
   * Receives the next message from the peer into `into`. The message's payload length must equal
   * `into.length`; `check` sees the descriptor and length first.
   *
   * @param into Where the payload goes.
   * @param check Validates the header.
   * @returns The message's descriptor.
   */
  recv(into: Uint8Array, check?: RecvCheck): Promise<Uint8Array>;
  /**
   * Waits for the header of the next message that no posted receive will take, without taking it: the
   * next {@linkcode Pair.recv} gets that message (MPI's `MPI_Probe`; what a receive from any rank looks
   * at first). A probe made while one is pending gets the same promise. Rejects when the transport fails
   * or the peer closes.
   *
   * @returns The message's header.
   */
  probe(): Promise<MessageHeader>;
  /**
   * Withdraws the pending probe, if any: it rejects with an `AbortError`, and the pair no longer waits
   * for a message (a peer that closes after this fails nothing).
   */
  cancelProbe(): void;
}

/** A rank's connections to every other rank of a world. */
export interface Transport extends AsyncDisposable {
  /** The kind, for reports: `"tcp"`, `"shm"`, `"inproc"`. */
  readonly kind: string;
  /** This rank. */
  readonly rank: number;
  /** The number of ranks. */
  readonly size: number;
  /**
   * The pair with `peer`.
   *
   * @throws {RangeError} If `peer` is this rank or out of range.
   */
  pair(peer: number): Pair;
  /**
   * Fails every pending and future operation with `error`, tells every peer why (best effort), and
   * closes the connections. Idempotent.
   */
  abort(error: Error): void;
  /** Resolves when the transport fails (a peer died, aborted, or broke the protocol) with that error. */
  readonly failed: Promise<Error>;
  /** Closes every connection. */
  close(): Promise<void>;
}

/**
 * The pair with `peer` among a transport's pairs (indexed by rank, none at this rank's own index).
 *
 * @param pairs The pairs by peer rank.
 * @param peer The peer asked for.
 * @param transport This rank and the number of ranks, for the message.
 * @returns The pair.
 * @throws {RangeError} If `peer` is this rank or out of range.
 */
export function pairOf<P extends Pair>(
  pairs: readonly (P | undefined)[],
  peer: number,
  transport: { readonly rank: number; readonly size: number },
): P {
  const pair = Number.isInteger(peer) ? pairs[peer] : undefined;
  if (pair === undefined) {
    throw new RangeError(
      `Expected a peer rank in 0..${transport.size - 1} other than ${transport.rank}, found ${peer}`,
    );
  }
  return pair;
}

/**
 * Checks the world size a transport is asked to connect.
 *
 * @param size The number of ranks.
 * @throws {RangeError} If `size` is not an integer of at least 1.
 */
export function checkSize(size: number): void {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`Expected size >= 1, found ${size}`);
}

/**
 * Checks the rank and world size a transport is asked to connect: every transport's `connect` (or
 * `create`) starts with it, so a bad rank gets the same error from each.
 *
 * @param rank This rank.
 * @param size The number of ranks.
 * @throws {RangeError} If `size` is not an integer of at least 1, or `rank` is not one in `0..size-1`.
 */
export function checkRank(rank: number, size: number): void {
  checkSize(size);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) {
    throw new RangeError(`Expected rank in 0..${size - 1}, found ${rank}`);
  }
}
