/**
 * One rank of `deno task bench:calibrate` (two ranks, started by the launcher): a ping-pong over the
 * transport itself (no process group, no communication thread), so the fitted α and β are the per-message
 * costs an algorithm's steps pay; and, on rank 0, the engine's reduction throughput for γ.
 *
 * With a second argument `ring` (`bench/network.ts`, on the emulated cluster: hosts of `LOCAL_WORLD_SIZE`
 * ranks each, numbered host by host as the launcher does): the ranks run the transport the process group
 * would (TCP, or shared memory within a host and TCP between), and time steps as the algorithms take them:
 * every rank sends to its ring neighbour on the next host (the rank of its local index there) while it
 * receives from the previous one, each step's send waiting for the previous step's receive, every link
 * carrying its host's ranks at once, as in the inter-host stage of an all-reduce. With several ranks per
 * host, the same again within each host (every host at once): the constants of the shared-memory hops under
 * the same load. A sample is the median of 15 runs of 8 to 40 steps each (the mean step of a run), on the
 * slowest rank.
 *
 * @module
 */
import { TcpStore } from "../store/tcp_store.ts";
import { PrefixStore } from "../store/prefix_store.ts";
import { TcpTransport } from "../transport/tcp.ts";
import { ShmTransport } from "../transport/shm.ts";
import { HybridTransport } from "../transport/hybrid.ts";
import { Plan, type Step } from "../collectives/_schedule.ts";
import type { CollectiveContext } from "../collectives/comm.ts";
import type { Transport } from "../transport/transport.ts";
import { DESC_BYTES } from "../transport/transport.ts";
import { kernels } from "../wasm/kernels.ts";
import { Reducer } from "../backend/cpu/_reducer.ts";
import { defaultHostname, rankInfo } from "../backend/env.ts";

const kind = Deno.args[0];
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
const n = info.worldSize;
const perHost = ring ? Number(Deno.env.get("LOCAL_WORLD_SIZE") ?? 1) : 1;
const hosts = Array.from({ length: n }, (_, r) => Math.floor(r / perHost));
const transport: Transport = kind !== "tcp"
  ? await ShmTransport.connect(store, common)
  : perHost > 1
  ? await HybridTransport.connect(store, { rank: info.rank, hosts, hostname, timeoutMs: 60_000 })
  : await TcpTransport.connect(store, { ...common, hostname });
const desc = new Uint8Array(DESC_BYTES);
const SIZES = [0, 1024, 16384, 65536, 262144, 1 << 20, 4 << 20];

/** Mean seconds per step of `steps` ring steps to `right` from `left`, each send after the last receive. */
async function ringSteps(right: number, left: number, bytes: number, steps: number): Promise<number> {
  const comm = {
    rank: info.rank,
    size: n,
    send: (peer: number, data: Uint8Array) => transport.pair(peer).send(desc, data),
    recv: async (peer: number, into: Uint8Array) => void await transport.pair(peer).recv(into),
  };
  const ctx = { comm, elemSize: 1, chunkBytes: 1 << 30 } as unknown as CollectiveContext;
  const out = new Uint8Array(bytes), into = new Uint8Array(bytes);
  const plan = new Plan(ctx);
  let got: Step | undefined;
  for (let t = 0; t < steps; t++) {
    plan.send(right, out, { after: got ? [got] : [] });
    got = plan.recv(left, into);
  }
  const t0 = performance.now();
  await plan.run();
  return (performance.now() - t0) / 1000 / steps;
}

/** Samples of mean step time by size, between the ranks `right` and `left` of this one. */
async function stepSamples(right: number, left: number): Promise<{ bytes: number; seconds: number }[]> {
  const samples: { bytes: number; seconds: number }[] = [];
  // From 1 KiB (empty messages take longer than 1 KiB ones here: 535-583 µs a step against 365-374 on 8
  // hosts at 1 Gb/s, and no all-reduce sends them) up to the engine's chunk (1 MiB): no algorithm sends a
  // larger message.
  for (const bytes of SIZES.filter((b) => b > 0 && b <= 1 << 20)) {
    const steps = bytes <= 65536 ? 40 : 8;
    await ringSteps(right, left, bytes, 4);
    const runs: number[] = [];
    for (let i = 0; i < 15; i++) runs.push(await ringSteps(right, left, bytes, steps));
    runs.sort((a, b) => a - b);
    samples.push({ bytes, seconds: runs[7] });
  }
  return samples;
}

/**
 * Every rank's samples, the slowest per size: with several ranks per host each link carries several rings,
 * which need not share it fairly, and a step of the algorithms waits for the slowest.
 */
async function slowest(
  mine: { bytes: number; seconds: number }[],
  name: string,
): Promise<{ bytes: number; seconds: number }[]> {
  await store.set(`${name}/${info.rank}`, new TextEncoder().encode(JSON.stringify(mine)));
  const all = await Promise.all(
    Array.from(
      { length: n },
      async (_, r) => JSON.parse(new TextDecoder().decode(await store.get(`${name}/${r}`))),
    ),
  );
  return mine.map((s, i) => ({ bytes: s.bytes, seconds: Math.max(...all.map((a) => a[i].seconds)) }));
}

let samples: { bytes: number; seconds: number }[] = [];
let intra: { bytes: number; seconds: number }[] | undefined;
if (ring) {
  // Between hosts: the same local index on the next and previous host.
  samples = await slowest(
    await stepSamples((info.rank + perHost) % n, (info.rank - perHost + n) % n),
    "between",
  );
  if (perHost > 1) {
    const base = info.rank - (info.rank % perHost), local = info.rank % perHost;
    intra = await slowest(
      await stepSamples(base + (local + 1) % perHost, base + (local - 1 + perHost) % perHost),
      "within",
    );
  }
} else {
  const pair = transport.pair(1 - info.rank);
  for (const bytes of SIZES) {
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
  console.log(`CALIBRATION ${JSON.stringify({ kind: transport.kind, samples, intra, gamma })}`);
}
await transport.close();
await client[Symbol.asyncDispose]();
