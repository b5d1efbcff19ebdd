/**
 * A rank of a multi-process transport test (`transport_rank.ts`) run as a separate process, with the JSON
 * events it prints on stdout.
 *
 * @module
 */
import { settledWithin } from "../_transport_cases.ts";

const FIXTURE = new URL("./transport_rank.ts", import.meta.url).pathname;

/** A rank run as a separate process, with its JSON events from stdout. */
export class RankProcess implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly #events: Record<string, unknown>[] = [];
  #wake: () => void = () => {};
  readonly #pump: Promise<void>;

  /**
   * @param kind `"tcp"` or `"rdma"`.
   * @param port The TCP store server's port.
   * @param rank The rank.
   * @param size The number of ranks.
   * @param scenario What the rank does (see `transport_rank.ts`).
   */
  constructor(kind: "tcp" | "rdma", port: number, rank: number, size: number, scenario: string) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", FIXTURE, kind, String(port), String(rank), String(size), scenario],
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#pump = this.#read();
  }

  async #read(): Promise<void> {
    let buffered = "";
    for await (const chunk of this.child.stdout.pipeThrough(new TextDecoderStream())) {
      buffered += chunk;
      let newline;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        this.#events.push(JSON.parse(buffered.slice(0, newline)));
        buffered = buffered.slice(newline + 1);
        this.#wake();
      }
    }
    this.#wake();
  }

  /** Waits for the event named `event` and returns it. */
  async next(event: string, timeoutMs = 15_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    while (true) {
      const found = this.#events.find((e) => e.event === event);
      if (found) return found;
      const wait = new Promise<void>((resolve) => this.#wake = resolve);
      if ((await settledWithin(wait, deadline - Date.now())) === "pending") {
        throw new Error(`No ${event} event within ${timeoutMs} ms; got ${JSON.stringify(this.#events)}`);
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // It has exited already.
    }
    await this.child.status;
    await this.#pump;
  }
}
