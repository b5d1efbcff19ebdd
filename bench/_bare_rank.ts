/**
 * A rank of `bench/hierarchical.ts --bare`: the flat ring all-reduce and the 2D hierarchical one written
 * on bare Deno TCP sockets, nothing of dcomm (no engine, no Worker, no transport, no shared memory: the
 * ranks of a host talk over TCP too, the sum is a JavaScript loop), to measure what the two schedules cost
 * this machine with the least software between them and the links: the floor dcomm's own runs are held to.
 * Same protocol as `_interleaved_rank.ts` (blocks of calls alternating between the two, the CPUs' busy
 * share read around each), same `RESULT` line.
 *
 * The hierarchical schedule is the 2D scheme unpipelined: reduce-scatter within the host, a ring all-reduce
 * of each rank's shard among the ranks of its index across the hosts, all-gather within the host (or, with
 * `--scheme leaders`, one leader per host). Every step sends to one peer and receives from another at once;
 * messages have no headers (every rank knows every size).
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  addFloat32,
  bareMesh,
  bareRingAllReduce,
  type BlockCpu,
  cpuPerCall,
  exchange,
  mod,
  readExact,
  timedBlock,
  writeAll,
} from "./_bare.ts";

const { values: flags } = parseArgs({
  args: Deno.args,
  options: {
    addresses: { type: "string" },
    sizes: { type: "string", default: "512K,1M,2M,4M,16M" },
    blocks: { type: "string", default: "12" },
    calls: { type: "string", default: "8" },
    /** The hierarchical schedule: `2d` (the default, as dcomm runs on even hosts) or `leaders`. */
    scheme: { type: "string", default: "2d" },
  },
});
if (flags.scheme !== "2d" && flags.scheme !== "leaders") {
  throw new Error(`Expected --scheme 2d or leaders, found "${flags.scheme}"`);
}
const env = (name: string): number => {
  const value = Deno.env.get(name);
  if (value === undefined) throw new Error(`Expected ${name} in the environment (run under the launcher)`);
  return Number(value);
};
const rank = env("RANK"), n = env("WORLD_SIZE"), L = env("LOCAL_WORLD_SIZE");
const H = n / L, host = Math.floor(rank / L), local = rank % L;
const addresses = (flags.addresses ?? "").split(",");
if (addresses.length !== H) throw new Error(`Expected ${H} addresses, found "${flags.addresses}"`);
const port = env("MASTER_PORT") + 100;

// A socket to every other rank.
const conns = await bareMesh(
  rank,
  n,
  Deno.listen({ hostname: "0.0.0.0", port: port + local }),
  (j) => Promise.resolve({ hostname: addresses[Math.floor(j / L)], port: port + (j % L) }),
);

const bytes = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
/** Ring all-reduce of `buf` among `ring` (ranks, this one among them at `me`). */
const ringAllReduce = (buf: Float32Array, ring: readonly number[], me: number): Promise<void> =>
  bareRingAllReduce(conns, bytes(buf), ring, me);

/** The 2D scheme: within the host, across the hosts on this rank's shard, within the host. */
async function hierarchical(buf: Float32Array): Promise<void> {
  const mine = Array.from({ length: L }, (_, i) => host * L + i);
  const across = Array.from({ length: H }, (_, h) => h * L + local);
  const shard = buf.length / L;
  const part = (i: number): Uint8Array => bytes(buf.subarray(i * shard, (i + 1) * shard));
  const tmp = bytes(new Float32Array(shard));
  const right = mine[mod(local + 1, L)], left = mine[mod(local - 1, L)];
  for (let s = 0; s < L - 1; s++) {
    await exchange(conns, right, part(mod(local - s - 1, L)), left, tmp);
    addFloat32(part(mod(local - s - 2, L)), tmp);
  }
  await bareRingAllReduce(conns, part(local), across, host);
  for (let s = 0; s < L - 1; s++) {
    await exchange(conns, right, part(mod(local - s, L)), left, part(mod(local - s - 1, L)));
  }
}

/**
 * One leader per host (`--scheme leaders`): the others send it their buffers whole, it sums them, the
 * leaders run a ring all-reduce of the whole buffer, and each leader sends the result back whole.
 */
async function leaders(buf: Float32Array): Promise<void> {
  const leader = host * L;
  if (rank !== leader) {
    await writeAll(conns[leader], bytes(buf));
    await readExact(conns[leader], bytes(buf));
    return;
  }
  const tmp = new Float32Array(buf.length);
  for (let i = 1; i < L; i++) {
    await readExact(conns[leader + i], bytes(tmp));
    addFloat32(bytes(buf), bytes(tmp));
  }
  await ringAllReduce(buf, Array.from({ length: H }, (_, h) => h * L), host);
  await Promise.all(Array.from({ length: L - 1 }, (_, i) => writeAll(conns[leader + 1 + i], bytes(buf))));
}

const world = Array.from({ length: n }, (_, r) => r);
const barrier = (): Promise<void> => ringAllReduce(new Float32Array(n), world, rank);
const bytesOf = (s: string): number => Number(s.slice(0, -1)) * (s.endsWith("M") ? 1 << 20 : 1024);
const schedules: [string, (buf: Float32Array) => Promise<void>][] = [
  ["ring", (buf) => ringAllReduce(buf, world, rank)],
  ["hierarchical", flags.scheme === "leaders" ? leaders : hierarchical],
];
const blocks = Number(flags.blocks), calls = Number(flags.calls);
const rows: { bytes: number; algorithm: string; seconds: number; busy: number; cpuSeconds: number }[] = [];
for (const size of flags.sizes.split(",")) {
  const bytes = bytesOf(size);
  const buf = new Float32Array(bytes / 4).fill(1);
  for (const [, run] of schedules) for (let i = 0; i < 10; i++) await run(buf);
  const times = schedules.map((): number[] => []);
  const cpu = schedules.map((): BlockCpu => ({ busy: 0, total: 0, seconds: 0 }));
  for (let b = 0; b < blocks; b++) {
    for (const [j, [, run]] of schedules.entries()) {
      await barrier();
      await run(buf);
      await timedBlock(() => run(buf), calls, times[j], rank === 0 ? cpu[j] : undefined);
    }
  }
  // The slowest rank's median: every rank's medians summed into a vector of n slots per schedule.
  const medians = new Float32Array(schedules.length * n);
  schedules.forEach((_, j) => medians[j * n + rank] = times[j].sort((a, b) => a - b)[times[j].length >> 1]);
  await ringAllReduce(medians, world, rank);
  schedules.forEach(([algorithm], j) => {
    const seconds = Math.max(...medians.subarray(j * n, (j + 1) * n));
    rows.push({ bytes, algorithm, seconds, ...cpuPerCall(cpu[j], blocks * calls) });
  });
}
if (rank === 0) console.log(`RESULT ${JSON.stringify({ size: n, rows })}`);
for (const conn of conns) conn?.close();
