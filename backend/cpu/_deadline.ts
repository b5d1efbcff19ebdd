/**
 * The deadline of the engine's running call, on one timer for every call: it stays armed from call to
 * call (a setTimeout and a clearTimeout per call cost about 5 µs in Deno, a quarter of a small call's own
 * time here) and is moved only when a call's deadline comes before it; when it fires early for a later
 * call, it is armed again for that one.
 *
 * @module
 */

/** One timer for the deadline of whichever call is running. */
export class CallDeadline {
  #deadline = Infinity;
  #onDeadline: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;

  /**
   * Calls `onDeadline` if the running call is still running at `deadline`.
   *
   * @param deadline A `performance.now()` time.
   * @param onDeadline What to do then.
   */
  watch(deadline: number, onDeadline: () => void): void {
    this.#deadline = deadline;
    this.#onDeadline = onDeadline;
    if (this.#timer === undefined || deadline < this.#timerAt) this.#arm(deadline);
  }

  /** The running call is over: nothing happens at its deadline (the timer stays armed for the next). */
  clear(): void {
    this.#onDeadline = undefined;
  }

  /** Stops the timer. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #arm(at: number): void {
    clearTimeout(this.#timer);
    this.#timerAt = at;
    const timer = setTimeout(this.#fire, Math.max(0, at - performance.now()));
    this.#timer = timer;
    // Not what keeps the Worker alive: its port is. (Deno's setTimeout returns the timer's number.)
    Deno.unrefTimer(timer as unknown as number);
  }

  #fire = (): void => {
    this.#timer = undefined;
    const onDeadline = this.#onDeadline;
    if (onDeadline === undefined) return;
    if (performance.now() >= this.#deadline) {
      this.#onDeadline = undefined;
      onDeadline();
    } else this.#arm(this.#deadline);
  };
}
