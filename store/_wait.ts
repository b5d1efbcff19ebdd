/**
 * One helper that every blocking store call goes through, so that timeouts, abort signals and closing the
 * store behave the same in every implementation, and every timer and listener is gone when the call ends.
 *
 * @module
 */
import { StoreError, TimeoutError } from "../core/errors.ts";

/** setTimeout fires at once for delays above 2^31 - 1 ms; longer timeouts are treated as "never". */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Options of {@linkcode waitWithDeadline}. */
export interface DeadlineOptions {
  /** Milliseconds before the wait rejects with a TimeoutError; `Infinity` never. */
  timeoutMs: number;
  /** The timeout the message names, when the wait is the rest of a longer call's. @default {timeoutMs} */
  reportMs?: number;
  /** The caller's signal: the wait rejects with its reason. */
  signal?: AbortSignal;
  /** The store's own signal, aborted when the store closes with a StoreError as the reason. */
  closed?: AbortSignal;
  /** What is waited for, as `key "a"`, for the messages. */
  what: string;
  /** Where, as ` in the store at 127.0.0.1:29500`, for the messages. */
  where: string;
  /** Appended to the timeout message when the wait times out, such as the keys still missing. */
  timeoutDetail?: () => string;
}

/**
 * Starts a wait and settles with its outcome, or rejects on timeout, abort or close, whichever comes first.
 *
 * @param start Begins the wait and returns a function that cancels it; it may settle synchronously.
 *   The cancel function is called only when the wait is abandoned (timeout, abort, close).
 * @param options The deadline, the signals and the names for the messages.
 * @returns The wait's result.
 */
export function waitWithDeadline<T>(
  start: (resolve: (value: T) => void, reject: (error: unknown) => void) => () => void,
  options: DeadlineOptions,
): Promise<T> {
  const { timeoutMs, signal, closed, what, where, timeoutDetail } = options;
  const reportMs = options.reportMs ?? timeoutMs;
  return new Promise<T>((resolve, reject) => {
    if (closed?.aborted) return reject(closedError(closed, what, where));
    if (signal?.aborted) return reject(signal.reason);
    let done = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let cancel: () => void = () => {};
    const finish = (): boolean => {
      if (done) return false;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      closed?.removeEventListener("abort", onClose);
      return true;
    };
    const abandon = (error: unknown): void => {
      if (!finish()) return;
      cancel();
      reject(error);
    };
    const onAbort = (): void => abandon(signal?.reason);
    const onClose = (): void => abandon(closed && closedError(closed, what, where));
    const started = start(
      (value) => {
        if (finish()) resolve(value);
      },
      (error) => {
        if (finish()) reject(error);
      },
    );
    if (done) return;
    cancel = started;
    signal?.addEventListener("abort", onAbort, { once: true });
    closed?.addEventListener("abort", onClose, { once: true });
    if (timeoutMs <= MAX_TIMER_MS) {
      timer = setTimeout(() => {
        const detail = timeoutDetail?.() ?? "";
        abandon(new TimeoutError(`Timed out after ${reportMs} ms waiting for ${what}${where}${detail}`));
      }, timeoutMs);
    }
  });
}

function closedError(closed: AbortSignal, what: string, where: string): StoreError {
  return new StoreError(`Stopped waiting for ${what}${where}: the store was closed`, {
    cause: closed.reason,
  });
}

/**
 * Sleeps `ms` milliseconds, or less if `signal` aborts (then it resolves early, without throwing).
 *
 * @param ms The delay.
 * @param signal Cuts the sleep short.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
