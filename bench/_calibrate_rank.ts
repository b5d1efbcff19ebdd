/**
 * One rank of `deno task bench:calibrate` (two ranks, started by the launcher): a ping-pong over the
 * transport itself (no process group, no communication thread), so the fitted α and β are the per-message
 * costs an algorithm's steps pay; and, on rank 0, the engine's reduction throughput for γ.
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
import { rankInfo } from "../backend/env.ts";

const kind = Deno.args[0];
const info = rankInfo(Deno.env.toObject());
if (info.masterPort === undefined) {
  throw new RangeError("bench:calibrate ranks need MASTER_PORT (the launcher sets it)");
}
const client = await TcpStore.connect({ hostname: info.masterAddr, port: info.masterPort });
const store = new PrefixStore(`calibrate-${kind}`, client);
const common = { rank: info.rank, size: info.worldSize, timeoutMs: 60_000 };
const transport: Transport = kind === "tcp"
  ? await TcpTransport.connect(store, common)
  : await ShmTransport.connect(store, common);
const desc = new Uint8Array(DESC_BYTES);
const peer = 1 - info.rank;
const pair = transport.pair(peer);
const samples: { bytes: number; seconds: number }[] = [];
for (const bytes of [0, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20]) {
  const buf = new Uint8Array(bytes);
  const iters = bytes <= 65536 ? 400 : bytes <= 1 << 20 ? 60 : 20;
  const times: number[] = [];
  for (let i = 0; i < iters + 5; i++) {
    const t0 = performance.now();
    if (info.rank === 0) {
      await pair.send(desc, buf);
      await pair.recv(buf);
    } else {
      await pair.recv(buf);
      await pair.send(desc, buf);
    }
    if (i >= 5) times.push((performance.now() - t0) / 2000);
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
