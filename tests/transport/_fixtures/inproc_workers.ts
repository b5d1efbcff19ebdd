/**
 * Starts `inproc_rank.ts` Workers for the in-process transport tests and collects what they post.
 *
 * @module
 */
import type { InprocMesh } from "../../../transport/inproc.ts";

/** A message a rank Worker posts. */
export interface RankEvent {
  event: "done" | "error" | "failed";
  message?: string;
  peer?: number;
  wrong?: number[] | number;
}

/** One rank running in a Worker. */
export class RankWorker implements Disposable {
  readonly #worker: Worker;
  readonly #events: RankEvent[] = [];
  #waiting: (() => void) | undefined;

  /**
   * Starts the Worker and hands it its rank and scenario.
   *
   * @param mesh The world's shared memory.
   * @param rank The Worker's rank.
   * @param scenario What it does (see `inproc_rank.ts`), and its parameters.
   */
  constructor(
    mesh: InprocMesh,
    rank: number,
    scenario: { scenario: string; bytes?: number; count?: number; reason?: string },
  ) {
    this.#worker = new Worker(new URL("./inproc_rank.ts", import.meta.url), { type: "module" });
    this.#worker.onmessage = (event: MessageEvent<RankEvent>) => {
      this.#events.push(event.data);
      this.#waiting?.();
    };
    this.#worker.onerror = (event) => {
      event.preventDefault();
      this.#events.push({ event: "error", message: event.message });
      this.#waiting?.();
    };
    this.#worker.postMessage({ mesh, rank, ...scenario });
  }

  /**
   * Waits for the first event of a kind.
   *
   * @param kind The event.
   * @returns It.
   */
  async next(kind: RankEvent["event"]): Promise<RankEvent> {
    while (true) {
      const found = this.#events.find((e) => e.event === kind || (kind === "done" && e.event === "error"));
      if (found !== undefined) return found;
      await new Promise<void>((resolve) => this.#waiting = resolve);
    }
  }

  /** Waits for the scenario's end; throws what the Worker reported as an error. */
  async done(): Promise<RankEvent> {
    const event = await this.next("done");
    if (event.event === "error") throw new Error(`Worker failed: ${event.message}`);
    return event;
  }

  /** Terminates the Worker. */
  [Symbol.dispose](): void {
    this.#worker.terminate();
  }
}
