/**
 * One rank of `deno task bench:calibrate` (two ranks, started by the launcher): a ping-pong over the
 * transport itself (no process group, no communication thread), so the fitted α and β are the per-message
 * costs an algorithm's steps pay; and, on rank 0, the engine's reduction throughput for γ. With a second
 * argument `ring` (any number of ranks, `bench/network.ts`): every rank sends to the next while it
 * receives from the previous, every link busy at once as in a ring all-reduce's steps, and a step's time
 * is the sample.
 *
 * @module
 */
import { TcpStore } from "../store/tcp_store.ts";
import { PrefixStore } from "../store/prefix_store.ts";
import { TcpTransport } from "../transport/tcp.ts";
import { ShmTransport } from "../transport/shm.ts";
import type { Transport } from "../transport/transport.ts";
import { DESC_BYTES } from "../transport/transport.ts";
import { kernels } from "../wasm/kernels.ts";
import { Reducer } from "../backend/cpu/_reducer.ts";
import { defaultHostname, rankInfo } from "../backend/env.ts";

const kind = Deno.args[0];
// `tcp ring`: every rank sends to the next and receives from the previous at once (the steady state of a
// ring all-reduce, every link busy), on any number of ranks, instead of a two-rank ping-pong.
const ring = Deno.args[1] === "ring";
const info = rankInfo(Deno.env.toObject());
if (info.masterPort === undefined) {
  throw new RangeError("bench:calibrate ranks need MASTER_PORT (the launcher sets it)");
}
const client = await TcpStore.connect({ hostname: info.masterAddr, port: info.masterPort });
const store = new PrefixStore(`calibrate-${kind}`, client);
const common = { rank: info.rank, size: info.worldSize, timeoutMs: 60_000 };
// Across hosts (the emulated cluster of bench/network.ts), each rank listens on its own address.
const hostname = defaultHostname(info.masterAddr ?? "127.0.0.1");
const transport: Transport = kind === "tcp"
  ? await TcpTransport.connect(store, { ...common, hostname })
  : await ShmTransport.connect(store, common);
const desc = new Uint8Array(DESC_BYTES);
const n = info.worldSize;
const peer = 1 - info.rank;
const pair = ring ? undefined : transport.pair(peer);
const right = ring ? transport.pair((info.rank + 1) % n) : undefined;
const left = ring ? transport.pair((info.rank - 1 + n) % n) : undefined;
const samples: { bytes: number; seconds: number }[] = [];
for (const bytes of [0, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20]) {
  const buf = new Uint8Array(bytes), into = new Uint8Array(bytes);
  const iters = bytes <= 65536 ? 400 : bytes <= 1 << 20 ? 60 : 20;
  const times: number[] = [];
  for (let i = 0; i < iters + 5; i++) {
    const t0 = performance.now();
    if (ring) {
      // In steady state each rank's step lasts as long as the slowest link's: its left neighbour's sends
      // arrive no faster.
      await Promise.all([right?.send(desc, buf), left?.recv(into)]);
    } else if (info.rank === 0) {
      await pair?.send(desc, buf);
      await pair?.recv(buf);
    } else {
      await pair?.recv(buf);
      await pair?.send(desc, buf);
    }
    if (i >= 5) times.push((performance.now() - t0) / (ring ? 1000 : 2000));
  }
  times.sort((a, b) => a - b);
  samples.push({ bytes, seconds: times[times.length >> 1] });
}
let gamma = 0;
if (info.rank === 0) {
  // What the engine pays per byte reduced: staging through wasm memory included.
  const reducer = new Reducer(await kernels(), 2);
  const n = 16 << 20;
  const dst = new Uint8Array(new SharedArrayBuffer(n)), src = new Uint8Array(new SharedArrayBuffer(n));
  const times: number[] = [];
  for (let i = 0; i < 9; i++) {
    const t0 = performance.now();
    reducer.reduce("float32", "sum", dst, src);
    times.push((performance.now() - t0) / 1000);
  }
  times.sort((a, b) => a - b);
  gamma = times[4] / n;
  console.log(`CALIBRATION ${JSON.stringify({ kind: transport.kind, samples, gamma })}`);
}
await transport.close();
await client[Symbol.asyncDispose]();
