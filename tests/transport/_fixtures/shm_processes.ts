/**
 * Runs `shm_rank.ts` processes for the shared-memory transport tests, with the test process as rank 0
 * and the store server, and collects the JSON lines they print.
 *
 * @module
 */
import { TcpStore } from "../../../store/tcp_store.ts";
import { TcpStoreServer } from "../../../store/tcp_store_server.ts";
import { ShmTransport, type ShmTransportOptions } from "../../../transport/shm.ts";

/** A line a rank process prints. */
export interface RankEvent {
  event: "ready" | "done" | "failed";
  pid?: number;
  message?: string;
  peer?: number;
  wrong?: number[] | number;
  at?: number;
}

/** One rank in a child process. */
export class RankProcess {
  readonly child: Deno.ChildProcess;
  readonly #events: RankEvent[] = [];
  #wake: (() => void) | undefined;
  readonly #reading: Promise<void>;
  readonly #stderr: Promise<string>;

  /**
   * @param port The store server's port.
   * @param rank The child's rank.
   * @param size The world size.
   * @param args The scenario and its arguments (see `shm_rank.ts`).
   */
  constructor(port: number, rank: number, size: number, args: readonly (string | number)[]) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("./shm_rank.ts", import.meta.url).pathname,
        String(port),
        String(rank),
        String(size),
        ...args.map(String),
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#reading = this.#read();
    this.#stderr = new Response(this.child.stderr).text();
  }

  async #read(): Promise<void> {
    const lines = this.child.stdout.pipeThrough(new TextDecoderStream());
    let rest = "";
    for await (const chunk of lines) {
      rest += chunk;
      let newline;
      while ((newline = rest.indexOf("\n")) >= 0) {
        this.#events.push(JSON.parse(rest.slice(0, newline)));
        rest = rest.slice(newline + 1);
        this.#wake?.();
      }
    }
    this.#wake?.();
  }

  /**
   * Waits for the first event of a kind.
   *
   * @param kind The event.
   * @returns It.
   * @throws {Error} With the child's stderr, if it exits first.
   */
  async next(kind: RankEvent["event"]): Promise<RankEvent> {
    let ended = false;
    this.#reading.then(() => ended = true);
    while (true) {
      const found = this.#events.find((e) => e.event === kind);
      if (found !== undefined) return found;
      if (ended) throw new Error(`Rank process ended without "${kind}": ${await this.#stderr}`);
      await Promise.race([new Promise<void>((resolve) => this.#wake = resolve), this.#reading]);
    }
  }

  /** Waits until the process exits, and for its output. */
  async exit(): Promise<Deno.CommandStatus> {
    const status = await this.child.status;
    await this.#reading;
    await this.#stderr;
    return status;
  }

  /** Kills the process (if it still runs) and waits for it. */
  async kill(): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Exited already.
    }
    await this.exit();
  }
}

/** A world with the test process as rank 0 and the store server. */
export class World implements AsyncDisposable {
  readonly server: TcpStoreServer;
  readonly store: TcpStore;
  readonly ranks: RankProcess[];

  private constructor(server: TcpStoreServer, store: TcpStore, ranks: RankProcess[]) {
    this.server = server;
    this.store = store;
    this.ranks = ranks;
  }

  /**
   * Starts the server and ranks 1..size-1 with one scenario.
   *
   * @param size The world size.
   * @param args The scenario and its arguments, for every child.
   * @returns The world.
   */
  static async start(size: number, args: readonly (string | number)[]): Promise<World> {
    const server = await TcpStoreServer.listen({ log: () => {} });
    const store = await TcpStore.connect({ port: server.port, timeoutMs: 20_000 });
    const ranks = Array.from({ length: size - 1 }, (_, i) => new RankProcess(server.port, i + 1, size, args));
    return new World(server, store, ranks);
  }

  /**
   * Connects the test process as rank 0.
   *
   * @param options Overrides of the transport options.
   * @returns The transport.
   */
  connect(options: Partial<ShmTransportOptions> = {}): Promise<ShmTransport> {
    return ShmTransport.connect(this.store, {
      rank: 0,
      size: this.ranks.length + 1,
      ringBytes: 1 << 20,
      timeoutMs: 20_000,
      ...options,
    });
  }

  /** Kills every child still running, closes the store and the server. */
  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.ranks.map((rank) => rank.kill()));
    await this.store.close();
    await this.server.close();
  }
}

/**
 * The names in /dev/shm that the shared-memory transport of any of `pids` created.
 *
 * @param pids Process ids.
 * @returns Names like `dcomm-1234-0-…`.
 */
export function segmentsOf(pids: readonly number[]): string[] {
  const prefixes = pids.map((pid) => `dcomm-${pid}-`);
  return [...Deno.readDirSync("/dev/shm")].map((entry) => entry.name).filter((name) =>
    prefixes.some((prefix) => name.startsWith(prefix))
  );
}
