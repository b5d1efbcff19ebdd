/**
 * torchrun's error file: under torchrun every worker is given `TORCHELASTIC_ERROR_FILE`, and a worker that
 * fails writes its error there as JSON, which the agent reads to print the root cause in its summary
 * (torch's `@record` decorator does it for Python workers). `init()` installs the same for a Deno rank:
 * the first uncaught error or unhandled rejection of the process is written in torch's shape before Deno
 * reports it and exits non-zero as usual.
 *
 * ```json
 * {"message": {"message": "TimeoutError: ...", "extraInfo": {"py_callstack": "<stack>", "timestamp": "1764745200"}}}
 * ```
 *
 * @module
 */

let installed: string | undefined;

/**
 * The JSON torchrun's agent reads from a worker's error file.
 *
 * @param error What failed.
 * @param now The time, in ms since the epoch.
 * @returns The file's text.
 */
export function errorFileText(error: unknown, now: number = Date.now()): string {
  const e = error instanceof Error ? error : new Error(String(error));
  const name = e.name || "Error";
  return JSON.stringify({
    message: {
      message: `${name}: ${e.message}`,
      extraInfo: {
        py_callstack: e.stack ?? `${name}: ${e.message}`,
        timestamp: String(Math.floor(now / 1000)),
      },
    },
  });
}

/**
 * Writes the process's first uncaught error to `TORCHELASTIC_ERROR_FILE`, when the variable is set.
 * Installing twice (every `init()` calls it) installs once.
 *
 * @param env The environment.
 * @returns The file written on failure, if any.
 */
export function recordErrors(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const path = env["TORCHELASTIC_ERROR_FILE"];
  if (!path || installed !== undefined) return installed;
  installed = path;
  let written = false;
  const write = (error: unknown): void => {
    if (written) return;
    written = true;
    try {
      Deno.writeTextFileSync(path, errorFileText(error));
    } catch {
      // No permission or no such folder: Deno still reports the error itself.
    }
  };
  globalThis.addEventListener("error", (event) => write((event as ErrorEvent).error));
  globalThis.addEventListener(
    "unhandledrejection",
    (event) => write((event as PromiseRejectionEvent).reason),
  );
  return path;
}
