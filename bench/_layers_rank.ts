/**
 * Where dcomm's time goes against bare sockets, layer by layer: a rank script for the emulated cluster
 * (`sudo deno task cluster --hosts 4 --ranks-per-host 2 --rate 1gbit bench/_layers_rank.ts [bytes]`) that
 * runs ring all-reduces of the same fp32 buffer, interleaved in blocks of 8 calls (15 blocks each), the
 * first five on the main thread (with a JavaScript sum but for `+wasm sum`):
 *
 * - `bare`: a ring loop on bare Deno TCP sockets (one per pair of ranks, within a host too);
 * - `plan+bare`: dcomm's Plan-based `ringAllReduce` over the same sockets, no framing;
 * - `plan+tcp`: the same over dcomm's `TcpTransport` (frames, a reader per pair);
 * - `plan+hybrid`: the same over `HybridTransport` (shared memory within a host, TCP between);
 * - `+wasm sum`: the same with the engine's sum (`Reducer`: the WebAssembly kernel, through copies into its
 *   memory and out);
 * - `tcp+hand-off`: `plan+tcp` after a call to a Worker that answers at once (`_echo_worker.ts`): the
 *   two wake-ups a call on a communication thread costs at least, under the same load;
 * - `engine`: a process group's `allReduce(..., { algorithm: "ring" })` (its communication Worker, the
 *   hybrid transport, the WebAssembly sum).
 *
 * Rank 0 prints each one's slowest-rank median call, the share of the machine's CPUs busy during its calls
 * and the machine's CPU time per call; then, of the process group's calls, the slowest rank's median time
 * in its Worker (the report's `timeMs`) and outside it (the hand-offs there and back).
 *
 * @module
 */
import { defaultHostname, rankInfo } from "../backend/env.ts";
import { TcpStore } from "../store/tcp_store.ts";
import { PrefixStore } from "../store/prefix_store.ts";
import { TcpTransport } from "../transport/tcp.ts";
import { HybridTransport } from "../transport/hybrid.ts";
import { init } from "../backend/init.ts";
import { kernels } from "../wasm/kernels.ts";
import { Reducer } from "../backend/cpu/_reducer.ts";
import { DESC_BYTES, type Transport } from "../transport/transport.ts";
import { ringAllReduce } from "../collectives/ring_allreduce.ts";
import type { CollectiveContext } from "../collectives/comm.ts";
import {
  addFloat32,
  bareMesh,
  bareRingAllReduce,
  type BlockCpu,
  cpuPerCall,
  readExact,
  timedBlock,
  writeAll,
} from "./_bare.ts";

const info = rankInfo(Deno.env.toObject());
const rank = info.rank, n = info.worldSize;
const bytes = Number(Deno.args[0] ?? 1 << 20);
if (!(bytes > 0 && bytes % (4 * n) === 0)) {
  throw new RangeError(`Expected a size in bytes that ${4 * n} divides, found ${Deno.args[0]}`);
}
const client = await TcpStore.connect({ hostname: info.masterAddr, port: info.masterPort as number });
const store = new PrefixStore("layers/", client);
const hostname = defaultHostname(info.masterAddr ?? "127.0.0.1");
const transport = await TcpTransport.connect(store, { rank, size: n, timeoutMs: 60_000, hostname });
const perHost = Number(Deno.env.get("LOCAL_WORLD_SIZE") ?? 1);
const hosts = Array.from({ length: n }, (_, r) => Math.floor(r / perHost));
const hybrid = await HybridTransport.connect(new PrefixStore("hybrid/", store), {
  rank,
  hosts,
  hostname,
  timeoutMs: 60_000,
});
await using pg = await init({ timeoutMs: 60_000 });

// Bare sockets: every rank listens and publishes its address; the higher of each pair connects.
const listener = Deno.listen({ hostname: "0.0.0.0", port: 0 });
await store.set(`bare/${rank}`, `${hostname}:${(listener.addr as Deno.NetAddr).port}`);
const conns = await bareMesh(rank, n, listener, async (j) => {
  const [host, port] = new TextDecoder().decode(await store.get(`bare/${j}`, { timeoutMs: 60_000 })).split(
    ":",
  );
  return { hostname: host, port: Number(port) };
});

/** Kept buffers, as the engine keeps its scratch: a fresh 128 KiB per call costs page faults here. */
const kept = [new Uint8Array(0), new Uint8Array(0)];
const keep = (i: number, size: number): Uint8Array =>
  (kept[i].length >= size ? kept[i] : (kept[i] = new Uint8Array(size))).subarray(0, size);

const world = Array.from({ length: n }, (_, r) => r);
const bareRing = (buf: Uint8Array): Promise<void> =>
  bareRingAllReduce(conns, buf, world, rank, keep(0, buf.length / n));
const context = (comm: CollectiveContext["comm"]): CollectiveContext => ({
  comm,
  elemSize: 4,
  reduce: addFloat32,
  reduceMany: () => {
    throw new Error("not used by the ring");
  },
  scratch: (size) => keep(1, size),
  chunkBytes: 1 << 20,
});
const desc = new Uint8Array(DESC_BYTES);
const overBare = context({
  rank,
  size: n,
  send: (peer, data) => writeAll(conns[peer], data),
  recv: (peer, into) => readExact(conns[peer], into),
});
/** A communicator over one of dcomm's transports, every message with the same empty descriptor. */
const over = (t: Transport): CollectiveContext =>
  context({
    rank,
    size: n,
    send: (peer, data) => t.pair(peer).send(desc, data),
    recv: async (peer, into) => {
      await t.pair(peer).recv(into);
    },
  });
const overTcp = over(transport), overHybrid = over(hybrid);
const reducer = new Reducer(await kernels(), n);
const overHybridWasm: CollectiveContext = {
  ...overHybrid,
  reduce: (dst, src) => reducer.reduce("float32", "sum", dst, src),
};
const f32 = new Float32Array(bytes / 4);
// A Worker that answers at once, and the engine's calls split into their time in the Worker and out of it.
const echo = new Worker(new URL("./_echo_worker.ts", import.meta.url), { type: "module" });
const echoWords = new Int32Array(new SharedArrayBuffer(8));
echo.postMessage(echoWords.buffer);
let calls = 0;
const handOff = async (): Promise<void> => {
  Atomics.store(echoWords, 0, ++calls);
  Atomics.notify(echoWords, 0);
  for (let answered = Atomics.load(echoWords, 1); answered !== calls; answered = Atomics.load(echoWords, 1)) {
    const wait = Atomics.waitAsync(echoWords, 1, answered);
    if (wait.async) await wait.value;
  }
};
const inWorker: number[] = [], outside: number[] = [];
const echoTimes: number[] = [];
const arms: [string, (buf: Uint8Array) => Promise<void>][] = [
  ["bare", bareRing],
  ["plan+bare", (buf) => ringAllReduce(overBare, buf)],
  ["plan+tcp", (buf) => ringAllReduce(overTcp, buf)],
  ["plan+hybrid", (buf) => ringAllReduce(overHybrid, buf)],
  ["+wasm sum", (buf) => ringAllReduce(overHybridWasm, buf)],
  ["tcp+hand-off", async (buf) => {
    const h0 = performance.now();
    await handOff();
    echoTimes.push(performance.now() - h0);
    await ringAllReduce(overTcp, buf);
  }],
  ["engine", async () => {
    const t0 = performance.now();
    const report = await pg.allReduce(f32, { algorithm: "ring" }).wait();
    inWorker.push(report?.timeMs ?? NaN);
    outside.push(performance.now() - t0 - (report?.timeMs ?? NaN));
  }],
];

const buf = new Uint8Array(bytes);
const times = arms.map((): number[] => []);
const cpu = arms.map((): BlockCpu => ({ busy: 0, total: 0, seconds: 0 }));
for (let b = -2; b < 15; b++) {
  for (const [j, [, run]] of arms.entries()) {
    await bareRing(new Uint8Array(4 * n)); // every rank here before the block starts
    // The first two rounds warm up, untimed.
    await timedBlock(() => run(buf), 8, b >= 0 ? times[j] : [], b >= 0 ? cpu[j] : undefined);
  }
}
const median = (a: number[]): number => a.sort((x, y) => x - y)[a.length >> 1];
const medians = new Float32Array((arms.length + 3) * n);
arms.forEach((_, j) => medians[j * n + rank] = median(times[j]));
// (The engine's first two blocks warm up, as the timed blocks' do: their calls are left out.)
medians[arms.length * n + rank] = median(inWorker.slice(16)) / 1e3;
medians[(arms.length + 1) * n + rank] = median(outside.slice(16)) / 1e3;
medians[(arms.length + 2) * n + rank] = median(echoTimes.slice(16)) / 1e3;
await bareRing(new Uint8Array(medians.buffer));
if (rank === 0) {
  console.log(`ring all-reduce of ${bytes} bytes on ${n} ranks, the slowest rank's median call:`);
  const slowest = (j: number): number => Math.max(...medians.subarray(j * n, (j + 1) * n)) * 1e3;
  arms.forEach(([name], j) => {
    const { busy, cpuSeconds } = cpuPerCall(cpu[j], times[j].length);
    console.log(
      `  ${name.padEnd(12)} ${slowest(j).toFixed(2)} ms   CPUs ${Math.round(busy * 100)}% busy   ` +
        `${(cpuSeconds * 1e3).toFixed(1)} ms of CPU`,
    );
  });
  console.log(
    `  engine: ${slowest(arms.length).toFixed(2)} ms in its Worker, ` +
      `${slowest(arms.length + 1).toFixed(2)} ms outside it (the hand-offs); ` +
      `a bare round trip to a Worker: ${slowest(arms.length + 2).toFixed(2)} ms`,
  );
}
Atomics.store(echoWords, 0, -1);
Atomics.notify(echoWords, 0);
await transport.close();
await hybrid.close();
for (const conn of conns) conn?.close();
await client[Symbol.asyncDispose]();
