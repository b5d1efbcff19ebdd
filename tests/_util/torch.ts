/**
 * The real PyTorch for interop tests: whether `python3 -c "import torch"` works (CI installs the CPU
 * wheel), and a driven torch `TCPStore` (`tests/store/_fixtures/torch_peer.py`): a Python process whose
 * store runs the commands a test sends it, one JSON line each.
 *
 * @module
 */

const PEER = new URL("../store/_fixtures/torch_peer.py", import.meta.url).pathname;

let cached: string | undefined | null = null;

/**
 * Why torch cannot be used here, or `undefined` when `import torch` works.
 *
 * @returns The reason, for a gated test's name.
 */
export function whyNoTorch(): string | undefined {
  if (cached !== null) return cached;
  try {
    const out = new Deno.Command("python3", {
      args: ["-c", "import torch.distributed as d; print(d.is_available())"],
      stdout: "piped",
      stderr: "null",
    }).outputSync();
    const text = new TextDecoder().decode(out.stdout).trim();
    cached = out.code === 0 && text === "True"
      ? undefined
      : "torch is not installed for python3 (pip install torch)";
  } catch {
    cached = "python3 not found";
  }
  return cached;
}

/** A command's reply: its result, or torch's exception as `Type: message`. */
export interface PeerReply {
  ok?: unknown;
  error?: string;
}

/** A torch `TCPStore` in a Python process, driven line by line. */
export class TorchPeer implements AsyncDisposable {
  /** The store's port (the one torch serves, or the one it connected to). */
  readonly port: number;
  /** torch's version. */
  readonly version: string;
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #lines: AsyncIterator<string>;
  readonly #stderr: Promise<string>;

  private constructor(
    child: Deno.ChildProcess,
    lines: AsyncIterator<string>,
    port: number,
    version: string,
    stderr: Promise<string>,
  ) {
    this.#child = child;
    this.#writer = child.stdin.getWriter();
    this.#lines = lines;
    this.port = port;
    this.version = version;
    this.#stderr = stderr;
  }

  /**
   * Starts torch's store: `server` hosts `TCPStore(is_master=True)`; `client` connects one to `port`.
   *
   * @param mode Which side torch plays.
   * @param port The server's port, for `client`.
   * @returns The running peer.
   */
  static async start(mode: "server" | "client", port?: number): Promise<TorchPeer> {
    const child = new Deno.Command("python3", {
      args: [PEER, mode, ...(port === undefined ? [] : [String(port)])],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    const lines = readLines(child.stdout);
    const first = await withTimeout(lines.next(), 60_000, "torch's store to start");
    const m = first.done ? null : /^PORT (\d+) TORCH (\S+)/.exec(first.value);
    if (!m) {
      child.kill();
      throw new Error(`torch_peer.py did not start: ${first.value ?? ""}\n${await stderr}`);
    }
    return new TorchPeer(child, lines, Number(m[1]), m[2], stderr);
  }

  /**
   * Runs one command on torch's side.
   *
   * @param command The command (see torch_peer.py).
   * @returns Its reply.
   */
  async call(command: Record<string, unknown>): Promise<PeerReply> {
    await this.#writer.write(new TextEncoder().encode(JSON.stringify(command) + "\n"));
    const line = await withTimeout(this.#lines.next(), 60_000, `torch's reply to ${command.op}`);
    if (line.done) throw new Error(`torch_peer.py ended: ${await this.#stderr}`);
    return JSON.parse(line.value) as PeerReply;
  }

  /** What torch printed on stderr (once it has ended). */
  stderr(): Promise<string> {
    return this.#stderr;
  }

  /** Ends the Python process. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.#writer.close();
    } catch { /* already closed */ }
    const timer = setTimeout(() => this.#child.kill("SIGKILL"), 10_000);
    await this.#child.status;
    clearTimeout(timer);
  }
}

/** Hex of bytes or a string, as torch_peer.py takes values. */
export function hexOf(value: Uint8Array | string): string {
  const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function* readLinesGen(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, nl);
      pending = pending.slice(nl + 1);
    }
  }
  if (pending) yield pending;
}

function readLines(stream: ReadableStream<Uint8Array>): AsyncIterator<string> {
  return readLinesGen(stream);
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms waiting for ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
