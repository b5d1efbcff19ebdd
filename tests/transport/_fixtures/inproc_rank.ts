/**
 * One rank of an in-process transport test, run as a module Worker. The test posts
 * `{ mesh, rank, scenario, bytes?, reason? }`; the Worker joins the mesh, runs the scenario, and posts
 * `{ event: "done", ... }` or `{ event: "error", message }`. It posts `{ event: "failed", message, peer }`
 * when its transport fails.
 *
 * Scenarios (the test is rank 0): those of `runSharedScenario()` in `_pattern.ts` (`send-sizes`,
 * `all-to-all`, `send-first`, `echo`, `abort` with `reason`, `wait`), and
 * - `close`: closes its transport at once, with nothing pending.
 *
 * @module
 */
/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />
import { type InprocMesh, InprocTransport } from "../../../transport/inproc.ts";
import { runSharedScenario } from "./_pattern.ts";

interface Start {
  mesh: InprocMesh;
  rank: number;
  scenario: string;
  bytes?: number;
  count?: number;
  reason?: string;
}

const post = (message: Record<string, unknown>): void => self.postMessage(message);

self.onmessage = async (event: MessageEvent<Start>) => {
  const { mesh, rank, scenario, bytes = 0, count = 1, reason = "" } = event.data;
  try {
    await using transport = InprocTransport.create(mesh, rank);
    transport.failed.then((error) =>
      post({ event: "failed", message: error.message, peer: (error as { peer?: number }).peer })
    );
    if (await runSharedScenario(transport, scenario, { rank, bytes, count, reason }, post)) return;
    if (scenario === "close") {
      await transport.close();
      post({ event: "done" });
    } else {
      throw new Error(`Unknown scenario ${scenario}`);
    }
  } catch (error) {
    post({ event: "error", message: error instanceof Error ? error.message : String(error) });
  }
};
