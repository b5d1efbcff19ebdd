/**
 * Connecting to a store server that may not be up yet, for every client protocol: attempts with back-off
 * (10 ms doubling to 250 ms) until one succeeds, one fails for good, the deadline passes or the caller
 * aborts.
 *
 * @module
 */
import { StoreError, TimeoutError } from "../core/errors.ts";
import { sleep } from "./_wait.ts";

/** A failure worth another attempt: nobody listening yet, the server restarting, a spoilt handshake. */
export class Unreachable extends Error {}

/** Whether another attempt may succeed: network errors may go away; a refusal or a missing permission will not. */
function isRetryable(error: unknown): boolean {
  if (error instanceof StoreError || error instanceof Deno.errors.NotCapable) return false;
  if (error instanceof Deno.errors.PermissionDenied || error instanceof TypeError) return false;
  return error instanceof Error;
}

/**
 * Runs `attempt` until it succeeds.
 *
 * @param attempt One connection attempt; `stop` aborts it (deadline or the caller's signal).
 * @param options The deadline, the caller's signal, and the message of the TimeoutError (given the last
 *   error's message, `none` if there was none).
 * @returns What the successful attempt returned.
 * @throws {TimeoutError} When the deadline passed; its cause is the last error.
 * @throws The first error that is not worth another attempt, or the signal's reason.
 */
export async function retryUntil<T>(
  attempt: (stop: AbortSignal) => Promise<T>,
  options: { timeoutMs: number; signal?: AbortSignal; timeout: (last: string) => string },
): Promise<T> {
  const { timeoutMs, signal } = options;
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  const timer = timeoutMs <= 2 ** 31 - 1
    ? setTimeout(() => stop.abort(new Unreachable("deadline")), timeoutMs)
    : undefined;
  let lastError: unknown;
  try {
    for (let delay = 10; !stop.signal.aborted; delay = Math.min(delay * 2, 250)) {
      try {
        return await attempt(stop.signal);
      } catch (error) {
        if (stop.signal.aborted) break;
        if (!isRetryable(error)) throw error;
        lastError = error;
      }
      await sleep(delay, stop.signal);
    }
    if (signal?.aborted) throw signal.reason;
    const last = lastError instanceof Error ? lastError.message : "none";
    throw new TimeoutError(options.timeout(last), { cause: lastError });
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}
