/**
 * Waiting for the GPU without blocking the event loop: {@linkcode pollUntil} checks a condition (an event
 * or stream query, a communicator's state) between turns of the event loop. It checks often at first
 * (every turn, through a MessageChannel, for about two milliseconds), then backs off to timers, so short
 * operations finish with little latency and long ones cost little CPU.
 *
 * @module
 */
import { DistError, TimeoutError } from "../core/errors.ts";

/**
 * Options of {@linkcode pollUntil}.
 *
 * @example A condition that never comes true
 * ```ts
 * import { type PollOptions, pollUntil } from "@dcomm/dcomm/gpu";
 * import { TimeoutError } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * const options: PollOptions = { timeoutMs: 20, what: "a flag nobody sets", spinMs: 1 };
 * await assert.rejects(pollUntil(() => false, options), (e) =>
 *   e instanceof TimeoutError && /for a flag nobody sets \(timeout 20 ms\)$/.test(e.message));
 * ```
 */
export interface PollOptions {
  /** Milliseconds before it gives up with a TimeoutError. @default Infinity */
  timeoutMs?: number;
  /** Stops waiting: rejects with a DistError carrying the signal's reason. @default none */
  signal?: AbortSignal;
  /** What is waited for, for the timeout message. @default "the GPU" */
  what?: string;
  /** How long to check on every turn of the event loop before backing off to timers. @default 2 */
  spinMs?: number;
}

/**
 * Yields one turn of the event loop (a MessageChannel round trip: no timer clamping).
 *
 * @returns Resolves on the next turn.
 *
 * @example
 * ```ts
 * import { nextTurn } from "@dcomm/dcomm/gpu";
 * import assert from "node:assert/strict";
 * const order: string[] = [];
 * const turn = nextTurn().then(() => order.push("next turn"));
 * order.push("now");
 * await turn;
 * assert.deepEqual(order, ["now", "next turn"]);
 * ```
 */
export function nextTurn(): Promise<void> {
  const { port1, port2 } = new MessageChannel();
  return new Promise<void>((resolve) => {
    port1.onmessage = (): void => {
      port1.close();
      port2.close();
      resolve();
    };
    port2.postMessage(0);
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Checks `done` until it returns `true`, yielding to the event loop between checks.
 *
 * @param done The condition; an exception from it rejects the wait.
 * @param options Timeout, abort signal and what is awaited.
 * @returns Resolves once `done()` is true.
 * @throws {TimeoutError} If the timeout passes first.
 * @throws {DistError} If the signal aborts first.
 *
 * @example
 * ```ts
 * import { pollUntil } from "@dcomm/dcomm/gpu";
 * let n = 0;
 * await pollUntil(() => ++n >= 3, { timeoutMs: 1000 });
 * ```
 */
export async function pollUntil(done: () => boolean, options: PollOptions = {}): Promise<void> {
  const start = performance.now();
  const timeoutMs = options.timeoutMs ?? Infinity;
  const spinMs = options.spinMs ?? 2;
  let backoff = 0.25;
  while (!done()) {
    const elapsed = performance.now() - start;
    if (options.signal?.aborted) {
      throw new DistError(
        `Stopped waiting for ${options.what ?? "the GPU"}: ${String(options.signal.reason)}`,
        {
          cause: options.signal.reason,
        },
      );
    }
    if (elapsed > timeoutMs) {
      throw new TimeoutError(
        `Waited ${Math.round(elapsed)} ms for ${options.what ?? "the GPU"} (timeout ${timeoutMs} ms)`,
      );
    }
    if (elapsed < spinMs) await nextTurn();
    else {
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 4);
    }
  }
}
