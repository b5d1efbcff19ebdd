/**
 * One rank of a multi-process transport test, run as
 * `deno run -A transport_rank.ts <tcp|rdma> <port> <rank> <size> <scenario>`, with the test process as rank 0
 * and the TCP store server (RDMA needs RDMA hardware). It prints one JSON line per event on stdout: `{"event":"ready"}` once connected,
 * `{"event":"failed",...}` when the transport fails, `{"event":"done"}` at the end.
 *
 * Scenarios:
 * - `send-sizes`: sends MESSAGE_SIZES to rank 0 in order (all at once, not awaiting each), then waits for a
 *   0-byte reply and closes.
 * - `wait`: waits for a message from the highest rank (which never sends), and reports how it failed.
 * - `hang`: waits forever; the test kills it.
 *
 * @module
 */
import { TcpStore } from "../../../store/tcp_store.ts";
import { TcpTransport } from "../../../transport/tcp.ts";
import { RdmaTransport } from "../../../transport/rdma.ts";
import type { Transport } from "../../../transport/transport.ts";
import { sendSizes } from "./_pattern.ts";

const [kind, port, rank, size, scenario] = Deno.args;
const say = (event: Record<string, unknown>): void => console.log(JSON.stringify(event));

await using store = await TcpStore.connect({ port: Number(port), timeoutMs: 20_000 });
const options = { rank: Number(rank), size: Number(size), timeoutMs: 20_000 };
await using transport: Transport = kind === "rdma"
  ? await RdmaTransport.connect(store, { ...options, heartbeatMs: 500 })
  : await TcpTransport.connect(store, options);
say({ event: "ready" });
transport.failed.then((error) => {
  say({
    event: "failed",
    name: error.name,
    message: error.message,
    peer: (error as { peer?: number }).peer,
    at: Date.now(),
  });
});

if (scenario === "send-sizes") {
  await sendSizes(transport.pair(0));
} else if (scenario === "wait") {
  try {
    await transport.pair(transport.size - 1).recv(new Uint8Array(8));
  } catch {
    // Reported through `failed`.
  }
  await transport.failed;
} else if (scenario === "hang") {
  await transport.pair(0).recv(new Uint8Array(8));
}
say({ event: "done" });
