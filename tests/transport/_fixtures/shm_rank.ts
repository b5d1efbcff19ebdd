/**
 * One rank of a multi-process shared-memory transport test, run as
 * `deno run -A shm_rank.ts <port> <rank> <size> <scenario> [bytes] [ringBytes] [count]`, with the test
 * process as rank 0 and the TCP store server. It prints one JSON line per event on stdout:
 * `{"event":"ready","pid":…}` once connected, `{"event":"failed",…}` when the transport fails,
 * `{"event":"done",…}` at the end.
 *
 * Scenarios: those of `runSharedScenario()` in `_pattern.ts` (`send-sizes`, `all-to-all`, `send-first`,
 * `echo`, `abort` with the reason "Rank 1 ran out of memory", `wait`), and
 * - `hang`: waits for 8 bytes from rank 0, forever; the test kills it.
 *
 * @module
 */
import { TcpStore } from "../../../store/tcp_store.ts";
import { ShmTransport } from "../../../transport/shm.ts";
import { runSharedScenario } from "./_pattern.ts";

const [port, rankArg, sizeArg, scenario, bytesArg, ringArg, countArg] = Deno.args;
const rank = Number(rankArg);
const bytes = Number(bytesArg ?? 0);
const say = (event: Record<string, unknown>): void => console.log(JSON.stringify(event));

await using store = await TcpStore.connect({ port: Number(port), timeoutMs: 20_000 });
await using transport = await ShmTransport.connect(store, {
  rank,
  size: Number(sizeArg),
  ringBytes: Number(ringArg ?? 1 << 20),
  timeoutMs: 20_000,
});
transport.failed.then((error) => {
  say({ event: "failed", message: error.message, peer: (error as { peer?: number }).peer, at: Date.now() });
});
say({ event: "ready", pid: Deno.pid });

const options = { rank, bytes, count: Number(countArg ?? 1), reason: "Rank 1 ran out of memory" };
if (!(await runSharedScenario(transport, scenario, options, say)) && scenario === "hang") {
  await transport.pair(0).recv(new Uint8Array(8));
}
