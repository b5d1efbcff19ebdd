/**
 * The debug switch, `DCOMM_DEBUG=info|detail` (like `NCCL_DEBUG` and `TORCH_DISTRIBUTED_DEBUG`), on
 * stderr, each line `dcomm[INFO] rank R/N: ...`:
 * - `info`: at `init()`, the rendezvous (the store, who serves it, how long the ranks took to meet), the
 *   transport, and on rank 0 the host map and the host segment's size; each new group;
 * - `detail`: also every call when it ends: its collective, dtype and count, the algorithm and transport
 *   that ran it, and its time (or its error).
 *
 * `init()` sets the level from its environment (`init({ env })` or the process's); it stays for the
 * thread.
 *
 * @module
 */

/** The levels, least first. */
export type DebugLevel = "off" | "info" | "detail";

let level: DebugLevel = "off";

/**
 * Sets this thread's level from `DCOMM_DEBUG` in `env`.
 *
 * @param env The variables `init()` reads.
 * @returns The level.
 * @throws {RangeError} If `DCOMM_DEBUG` is set to something else than `info`, `detail`, `off` or empty.
 */
export function setDebugLevel(env: Readonly<Record<string, string | undefined>>): DebugLevel {
  const raw = env["DCOMM_DEBUG"]?.trim().toLowerCase();
  if (raw === undefined || raw === "" || raw === "off" || raw === "0") level = "off";
  else if (raw === "info" || raw === "detail") level = raw;
  else {
    throw new RangeError(`Invalid DCOMM_DEBUG: expected info, detail or off, found "${env["DCOMM_DEBUG"]}"`);
  }
  return level;
}

/**
 * Whether lines of `at` are printed.
 *
 * @param at The line's level.
 * @returns Whether.
 */
export function debugOn(at: "info" | "detail"): boolean {
  return level === "detail" || (level === "info" && at === "info");
}

/**
 * Prints a line at `at` when the level lets it through.
 *
 * @param at The line's level.
 * @param rank This rank, and the world's size.
 * @param line What to say.
 */
export function debugLog(at: "info" | "detail", rank: { rank: number; size: number }, line: string): void {
  if (!debugOn(at)) return;
  try {
    console.error(`dcomm[${at.toUpperCase()}] rank ${rank.rank}/${rank.size}: ${line}`);
  } catch { /* no stderr */ }
}

/**
 * Bytes in words: `16.2 MiB`.
 *
 * @param n Bytes.
 * @returns The text.
 */
export function bytesText(n: number): string {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}
