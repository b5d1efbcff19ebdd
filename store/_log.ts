/**
 * A rate limit on a server's log lines about its clients, so that a flood of bad connections costs a few
 * lines a second rather than one each: at most `perSecond` lines in each second, and, once the second is
 * over, one line saying how many were left out.
 *
 * @module
 */

/** A log callback that writes at most a few lines a second and counts the ones it leaves out. */
export class LogLimiter {
  readonly #write: (line: string) => void;
  readonly #perSecond: number;
  #windowStart = -Infinity;
  #written = 0;
  #leftOut = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /**
   * @param write Writes one line (its failures are swallowed: logging must not hurt the server).
   * @param perSecond The most lines written in one second.
   */
  constructor(write: (line: string) => void, perSecond = 5) {
    this.#write = write;
    this.#perSecond = perSecond;
  }

  /** Writes `line`, unless this second already had its share of lines. */
  line(line: string): void {
    const now = performance.now();
    if (now - this.#windowStart >= 1_000) {
      this.#flush();
      this.#windowStart = now;
      this.#written = 0;
    }
    if (this.#written < this.#perSecond) {
      this.#written++;
      this.#emit(line);
      return;
    }
    this.#leftOut++;
    if (this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#flush();
      }, Math.max(0, this.#windowStart + 1_000 - now));
      Deno.unrefTimer(this.#timer);
    }
  }

  /** Writes `line` whatever the rate (a warning that must not be lost). */
  always(line: string): void {
    this.#emit(line);
  }

  /** Writes the count of lines left out, if any, and stops the timer. */
  close(): void {
    this.#flush();
  }

  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#leftOut === 0) return;
    const n = this.#leftOut;
    this.#leftOut = 0;
    this.#emit(
      `left out ${n} more lines like the ones above (at most ${this.#perSecond} a second are written)`,
    );
  }

  #emit(line: string): void {
    try {
      this.#write(line);
    } catch { /* the caller's logger failed; serving matters more */ }
  }
}
