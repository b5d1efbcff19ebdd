/**
 * The lifecycle every transport shares (`transport.ts`'s failure model), written once: a transport is open
 * until the first failure (which wins: later ones, and failures found while closing, are ignored) or its
 * first `close()`. {@linkcode Lifecycle} holds that state, the `failed` promise, the error a new operation
 * rejects with once the transport cannot be used, and the errors that name a peer that aborted or closed;
 * the transport hands it what is its own, the shutdown after a failure and the one after a close.
 * {@linkcode Grace} is the time a farewell gives sends under way and goodbyes before it stops waiting.
 *
 * @module
 */
import { TransportError } from "../core/errors.ts";
import type { RecvCheck } from "./transport.ts";

/**
 * How long a farewell (closing, or telling peers why this rank failed) waits for sends under way and for
 * its goodbyes: a peer that reads slowly still gets what was sent before, a dead one stalls nobody for long.
 */
export const GRACE_MS = 1000;

/**
 * Where a transport stands: `"open"`; `"failed"` from the first failure on (its shutdown may still run);
 * `"closing"` from the first `close()` on, until its farewell is done, then `"closed"`.
 */
export type LifecycleState = "open" | "failed" | "closing" | "closed";

/** What a transport hands to its {@linkcode Lifecycle}. */
export interface LifecycleOptions {
  /** The transport's name in messages, e.g. `"TCP"` (`Cannot use the TCP transport of rank 0: ...`). */
  readonly name: string;
  /** This rank. */
  readonly rank: number;
  /**
   * Called once, at the first failure, after `failed` resolved: rejects what is pending, tells the peers
   * why, and frees the transport. `close()` returns what it returns.
   */
  readonly onFail: (error: Error) => Promise<void>;
  /**
   * Called once, at the first `close()` when no failure came before: the farewell, which ends with the
   * transport freed; operations are refused with `closed` from then on.
   */
  readonly onClose: (closed: TransportError) => Promise<void>;
}

/** What a receive that met its message's header checks (see {@linkcode Lifecycle.checkReceive}). */
export interface ReceivedHeader {
  /** The receive's view. */
  readonly into: Uint8Array;
  /** The message's descriptor. */
  readonly desc: Uint8Array;
  /** The message's payload length. */
  readonly bytes: number;
  /** The receive's own check, if any. */
  readonly check?: RecvCheck;
}

/**
 * A transport's state from open to failed or closed, and the errors that go with it.
 *
 * @example A transport that failed refuses every new operation with its failure
 * ```ts
 * import { Lifecycle } from "./_lifecycle.ts";
 * import assert from "node:assert/strict";
 *
 * const life = new Lifecycle({ name: "TCP", rank: 0, onFail: async () => {}, onClose: async () => {} });
 * const error = new Error("Rank 1 stopped responding");
 * life.fail(error);
 * life.fail(new Error("A later failure is ignored"));
 * assert.equal(await life.failed, error);
 * assert.equal(life.unusable(), error);
 * assert.equal(life.state, "failed");
 * ```
 */
export class Lifecycle {
  /** Resolves with the error that failed the transport; never resolves if it only closes. */
  readonly failed: Promise<Error>;
  /** This rank. */
  readonly rank: number;

  readonly #options: LifecycleOptions;
  #resolveFailed: (error: Error) => void = () => {};
  #state: LifecycleState = "open";
  #failure: Error | undefined;
  #closed: TransportError | undefined;
  #shutdown: Promise<void> | undefined;

  /**
   * @param options The transport's name and rank, and what it does on failing and on closing.
   */
  constructor(options: LifecycleOptions) {
    this.#options = options;
    this.rank = options.rank;
    this.failed = new Promise((resolve) => this.#resolveFailed = resolve);
  }

  /** Where the transport stands. */
  get state(): LifecycleState {
    return this.#state;
  }

  /** The failure, once failed. */
  get failure(): Error | undefined {
    return this.#failure;
  }

  /**
   * The error a new operation rejects with: the failure, or `Cannot use the <name> transport of rank <r>:
   * it was closed`; `undefined` while open.
   *
   * @returns The error, if the transport cannot be used.
   */
  unusable(): Error | undefined {
    return this.#failure ?? this.#closed;
  }

  /**
   * Fails the transport, unless it failed or began closing already: resolves `failed` with the error (a
   * value that is no `Error` becomes a `TransportError` with its text), then runs the transport's
   * `onFail`.
   *
   * @param thrown Why.
   */
  fail(thrown: unknown): void {
    if (this.#state !== "open") return;
    const error = thrown instanceof Error ? thrown : new TransportError(String(thrown));
    this.#state = "failed";
    this.#failure = error;
    this.#resolveFailed(error);
    this.#shutdown = this.#options.onFail(error);
  }

  /**
   * Closes, once: the transport's `onClose` runs the farewell. After a failure, waits for the failure's
   * shutdown instead.
   *
   * @returns Resolves when the transport is freed.
   */
  close(): Promise<void> {
    if (this.#shutdown === undefined) {
      const { name, rank, onClose } = this.#options;
      this.#closed = new TransportError(`Cannot use the ${name} transport of rank ${rank}: it was closed`);
      this.#state = "closing";
      this.#shutdown = onClose(this.#closed).finally(() => this.#state = "closed");
    }
    return this.#shutdown;
  }

  /**
   * The error of an operation with a peer that closed while this rank still needed it.
   *
   * @param what What the operation was, `"send to"` or `"receive from"`.
   * @param peer The peer.
   * @returns `Cannot <what> rank <peer>: it closed its transport while rank <this rank> still used it`.
   */
  peerClosed(what: string, peer: number): TransportError {
    return new TransportError(
      `Cannot ${what} rank ${peer}: it closed its transport while rank ${this.rank} still used it`,
      { peer },
    );
  }

  /**
   * The error of a peer that aborted.
   *
   * @param peer The peer.
   * @param reason The reason it sent.
   * @returns `Rank <peer> aborted: <reason>`.
   */
  peerAborted(peer: number, reason: string): TransportError {
    return new TransportError(`Rank ${peer} aborted: ${reason}`, { peer });
  }

  /**
   * Runs a receive's check on a message's header, then checks that the payload fits the receive's view
   * exactly; whatever throws fails the transport (so every peer learns why) and is thrown again.
   *
   * @param peer The sender.
   * @param header The receive's view and check, and the message's descriptor and length.
   * @throws {TransportError} `Rank <peer> sent a message of <n> bytes but rank <r> expected <m>`.
   * @throws {Error} What the check threw.
   */
  checkReceive(peer: number, header: ReceivedHeader): void {
    const { into, desc, bytes, check } = header;
    try {
      check?.(desc, bytes);
      if (bytes !== into.length) {
        throw new TransportError(
          `Rank ${peer} sent a message of ${bytes} bytes but rank ${this.rank} expected ${into.length}`,
          { peer },
        );
      }
    } catch (error) {
      const failure = error instanceof Error ? error : new TransportError(String(error), { peer });
      this.fail(failure);
      throw failure;
    }
  }
}

/** One millisecond, the step of a {@linkcode Grace} wait that has nothing to drive. */
const nextMillisecond = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 1));

/**
 * A grace period, from its creation on: one farewell's waits share one deadline.
 *
 * @example Waiting for sends under way, a second at most
 * ```ts
 * import { Grace } from "./_lifecycle.ts";
 * import assert from "node:assert/strict";
 *
 * let pending = 3;
 * await new Grace().waitWhile(() => pending > 0, () => Promise.resolve(void pending--));
 * assert.equal(pending, 0);
 * ```
 */
export class Grace {
  readonly #deadline: number;

  /**
   * @param ms How long it lasts.
   */
  constructor(ms: number = GRACE_MS) {
    this.#deadline = performance.now() + ms;
  }

  /** Whether the time is up. */
  get over(): boolean {
    return performance.now() >= this.#deadline;
  }

  /**
   * Runs `step` while `busy()` holds and the time is not up.
   *
   * @param busy Whether there is still something to wait for.
   * @param step One turn of waiting (what drives progress, or by default a timer of 1 ms).
   */
  async waitWhile(busy: () => boolean, step: () => Promise<unknown> = nextMillisecond): Promise<void> {
    while (busy() && !this.over) await step();
  }

  /**
   * Waits for `work`, or until the time is up, whichever comes first.
   *
   * @param work What to wait for.
   * @throws What `work` rejects with, if it does in time.
   */
  async waitFor(work: Promise<unknown>): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const up = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, this.#deadline - performance.now()));
    });
    try {
      await Promise.race([work, up]);
    } finally {
      clearTimeout(timer);
    }
  }
}
