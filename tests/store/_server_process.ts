/**
 * A `TcpStoreServer` in a process of its own (`_fixtures/store_server.ts`), for the tests that stop or
 * kill it: started, its port read from the first line it prints, and stopped for good at disposal.
 *
 * @module
 */

/** The server's process and port; dispose it to kill it and wait for its end. */
export interface StoreServerProcess extends AsyncDisposable {
  /** The process (the tests send it SIGSTOP or SIGKILL). */
  readonly child: Deno.ChildProcess;
  /** The port it listens on (127.0.0.1). */
  readonly port: number;
}

/**
 * Starts the server process and waits for its port.
 *
 * @param stderr Where its stderr goes.
 * @returns The process and its port.
 * @throws {Error} If it exits before printing its port.
 */
export async function startServerProcess(stderr: "null" | "inherit" = "null"): Promise<StoreServerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./_fixtures/store_server.ts", import.meta.url).pathname],
    stdout: "piped",
    stderr,
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const stop = async (): Promise<void> => {
    try {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    } catch { /* already dead */ }
    await lines.cancel();
    await child.status;
  };
  let out = "";
  try {
    while (!out.includes("\n")) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`The server process exited before printing its port: ${out}`);
      out += value;
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { child, port: Number(out.trim()), [Symbol.asyncDispose]: stop };
}
