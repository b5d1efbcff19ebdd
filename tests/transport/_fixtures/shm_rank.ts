/**
 * One rank of a multi-process shared-memory transport test, run as
 * `deno run -A shm_rank.ts <port> <rank> <size> <scenario> [bytes] [ringBytes] [count]`, with the test
 * process as rank 0 and the TCP store server. It prints one JSON line per event on stdout:
 * `{"event":"ready","pid":…}` once connected, `{"event":"failed",…}` when the transport fails,
 * `{"event":"done",…}` at the end.
 *
 * Scenarios:
 * - `send-sizes`: sends MESSAGE_SIZES to rank 0, all at once, then waits for a 0-byte reply.
 * - `all-to-all`: sends one pattern message of `bytes` to every other rank and receives one from each;
 *   reports the peers whose message was wrong.
 * - `send-first`: sends `bytes` to rank 0 and waits for the send, then receives `bytes` from it.
 * - `echo`: receives `bytes` from rank 0 and sends them back, `count` times.
 * - `abort`: waits for a 0-byte "go" from rank 0, then aborts with the reason "Rank 1 ran out of memory".
 * - `wait`: waits for 8 bytes from rank 0 and reports how that failed.
 * - `hang`: waits for 8 bytes from rank 0, forever; the test kills it.
 *
 * @module
 */
import { TcpStore } from "../../../store/tcp_store.ts";
import { ShmTransport } from "../../../transport/shm.ts";
import { allToAll, descriptor, fillPattern, firstWrongByte, sendSizes } from "./_pattern.ts";

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

const root = transport.pair(0);
if (scenario === "send-sizes") {
  await sendSizes(root);
  say({ event: "done" });
} else if (scenario === "all-to-all") {
  const wrong = await allToAll(transport, bytes);
  say({ event: "done", wrong });
} else if (scenario === "send-first") {
  const payload = new Uint8Array(bytes);
  fillPattern(payload, rank);
  await root.send(descriptor(rank), payload);
  const got = new Uint8Array(bytes);
  await root.recv(got);
  say({ event: "done", wrong: firstWrongByte(got, 0) });
} else if (scenario === "echo") {
  const data = new Uint8Array(bytes);
  for (let i = 0; i < Number(countArg ?? 1); i++) {
    await root.recv(data);
    await root.send(descriptor(i), data);
  }
  say({ event: "done" });
} else if (scenario === "abort") {
  await root.recv(new Uint8Array(0));
  transport.abort(new Error("Rank 1 ran out of memory"));
  say({ event: "done" });
} else if (scenario === "wait") {
  const error = await root.recv(new Uint8Array(8)).then(() => undefined, (e: Error) => e);
  say({ event: "done", message: error?.message });
} else if (scenario === "hang") {
  await root.recv(new Uint8Array(8));
}
