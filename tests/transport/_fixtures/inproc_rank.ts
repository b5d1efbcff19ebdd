/**
 * One rank of an in-process transport test, run as a module Worker. The test posts
 * `{ mesh, rank, scenario, bytes?, reason? }`; the Worker joins the mesh, runs the scenario, and posts
 * `{ event: "done", ... }` or `{ event: "error", message }`. It posts `{ event: "failed", message, peer }`
 * when its transport fails.
 *
 * Scenarios (the test is rank 0 unless said otherwise):
 * - `send-sizes`: sends MESSAGE_SIZES to rank 0, all at once, then waits for a 0-byte reply.
 * - `all-to-all`: sends one pattern message of `bytes` to every other rank and receives one from each,
 *   all at once; reports the peers whose message was wrong.
 * - `send-first`: sends `bytes` to rank 0 and waits for the send, then receives `bytes` from it.
 * - `echo`: receives `bytes` from rank 0 and sends them back, `count` times (for throughput).
 * - `abort`: waits until rank 0 posts a receive, then aborts with `reason`.
 * - `wait`: waits for 8 bytes from rank 0 and reports how that failed.
 * - `close`: closes its transport at once, with nothing pending.
 *
 * @module
 */
/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />
import { type InprocMesh, InprocTransport } from "../../../transport/inproc.ts";
import { allToAll, descriptor, fillPattern, firstWrongByte, sendSizes } from "./_pattern.ts";

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
    const root = transport.pair(0);
    if (scenario === "send-sizes") {
      await sendSizes(root);
      post({ event: "done" });
    } else if (scenario === "all-to-all") {
      const wrong = await allToAll(transport, bytes);
      post({ event: "done", wrong });
    } else if (scenario === "send-first") {
      const payload = new Uint8Array(bytes);
      fillPattern(payload, rank);
      await root.send(descriptor(rank), payload);
      const got = new Uint8Array(bytes);
      await root.recv(got);
      post({ event: "done", wrong: firstWrongByte(got, 0) });
    } else if (scenario === "echo") {
      const data = new Uint8Array(bytes);
      for (let i = 0; i < count; i++) {
        await root.recv(data);
        await root.send(descriptor(i), data);
      }
      post({ event: "done" });
    } else if (scenario === "abort") {
      await root.recv(new Uint8Array(0)); // rank 0 says "go" once its receive is posted
      transport.abort(new Error(reason));
      post({ event: "done" });
    } else if (scenario === "wait") {
      const error = await root.recv(new Uint8Array(8)).then(() => undefined, (e: Error) => e);
      post({ event: "done", message: error?.message });
    } else if (scenario === "close") {
      await transport.close();
      post({ event: "done" });
    } else {
      throw new Error(`Unknown scenario ${scenario}`);
    }
  } catch (error) {
    post({ event: "error", message: error instanceof Error ? error.message : String(error) });
  }
};
