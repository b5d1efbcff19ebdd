import assert from "node:assert/strict";
import { hierarchicalAllReduce, hostGroups } from "../../collectives/hierarchical_allreduce.ts";
import { ringAllReduce } from "../../collectives/ring_allreduce.ts";
import {
  binomialBroadcastCost,
  binomialReduceCost,
  hierarchicalAllReduceCost,
  ringAllReduceCost,
} from "../../sim/cost_model.ts";
import type { CollectiveContext } from "../../collectives/comm.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, runWorld } from "./_harness.ts";

/** Host maps: even (the 2D scheme), uneven (through leaders, pipelined), interleaved, one host, one rank per host. */
const MAPS: readonly (readonly number[])[] = [
  [0, 0, 1, 1],
  [0, 0, 0, 1, 1, 1, 2, 2, 2],
  [0, 0, 1, 1, 2, 2, 3, 3],
  [0, 0, 0, 1],
  [0, 1, 1, 2, 2, 2],
  [1, 0, 1, 0, 2, 2],
  [0, 0, 0],
  [0, 1, 2],
];

for (const map of MAPS) {
  Deno.test(`hierarchicalAllReduce() on hosts [${map}] reduces exactly (int32) and within rounding, the same bits on every rank`, async () => {
    await checkAllReduce("hierarchicalAllReduce", hierarchicalAllReduce, {
      sizes: [map.length],
      counts: [1, 5, 64, 1000],
      hosts: () => map,
    });
  });
}

Deno.test("hierarchicalAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("hierarchicalAllReduce", hierarchicalAllReduce, {
    sizes: [6],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
    hosts: () => [0, 0, 0, 1, 1, 1],
  });
});

/** Bytes each rank sent to ranks of other hosts, by rank, for `fn` on `hosts`. */
async function crossHostBytes(
  fn: (ctx: CollectiveContext, buf: Uint8Array) => Promise<void>,
  hosts: readonly number[],
  count: number,
): Promise<number> {
  const n = hosts.length;
  const bufs = Array.from({ length: n }, () => bytes(new Float32Array(count)));
  let across = 0;
  await runWorld({ size: n, dtype: "float32", chunkBytes: 1 << 20, hosts }, (ctx) => {
    const comm = ctx.comm;
    const counted = {
      ...ctx,
      comm: {
        ...comm,
        rank: comm.rank,
        size: comm.size,
        send: (peer: number, data: Uint8Array) => {
          if (hosts[peer] !== hosts[comm.rank]) across += data.length;
          return comm.send(peer, data);
        },
        recv: comm.recv.bind(comm),
      },
    };
    return fn(counted, bufs[ctx.comm.rank]);
  });
  return across;
}

Deno.test("4 hosts × 2 ranks: the network carries 2(H−1)/H·m per host against the flat ring's 2(n−1)/n·m", async () => {
  const hosts = [0, 0, 1, 1, 2, 2, 3, 3];
  const count = 4096, m = count * 4;
  const hierarchical = await crossHostBytes(hierarchicalAllReduce, hosts, count);
  const ring = await crossHostBytes(ringAllReduce, hosts, count);
  // Hierarchical: each of the 8 ranks sends its shard (m/2) around a ring of 4 hosts: 2·3/4·m/2 each.
  assert.equal(hierarchical, 8 * (2 * 3 / 4) * (m / 2));
  // The flat ring crosses a host boundary at every other rank: 4 ranks send 2·7/8·m each.
  assert.equal(ring, 4 * (2 * 7 / 8) * m);
  assert.ok(hierarchical < ring);
});

Deno.test("uneven hosts: only the leaders cross, each sending 2(H−1)/H·m as in a ring of H", async () => {
  const hosts = [0, 0, 0, 1, 1, 2];
  const count = 3000, m = count * 4;
  // 3 leaders in a ring of 3 on all of m; the other ranks talk only to their leader.
  assert.equal(await crossHostBytes(hierarchicalAllReduce, hosts, count), 3 * (2 * 2 / 3) * m);
});

Deno.test("hostGroups() groups ranks by host in order of their first rank, each host's ranks in order", () => {
  assert.deepEqual(hostGroups([1, 0, 1, 0, 2], 5), [[0, 2], [1, 3], [4]]);
  assert.deepEqual(hostGroups(undefined, 3), [[0], [1], [2]]);
  assert.throws(() => hostGroups([0, 0], 3), /Expected a host for each of 3 ranks, found 2/);
});

Deno.test("the model: hierarchical is the ring without hosts, and cheaper than it across slow links with several ranks per host", () => {
  const tcp = { alpha: 50e-6, beta: 8e-9, gamma: 3e-10 };
  const shm = { alpha: 5e-6, beta: 1.5e-10, gamma: 3e-10 };
  const flat = { size: 8, bytes: 4 << 20 };
  assert.equal(hierarchicalAllReduceCost(flat, tcp), ringAllReduceCost(flat, tcp));
  const hosts = [0, 0, 1, 1, 2, 2, 3, 3];
  const h = hierarchicalAllReduceCost({ ...flat, hosts, intra: shm }, tcp);
  const r = ringAllReduceCost(flat, tcp);
  assert.ok(h < r, `${h} < ${r}`);
  // Uneven hosts go through leaders: more than the 2D scheme's, still below the flat ring here.
  const uneven = hierarchicalAllReduceCost({
    size: 7,
    bytes: 4 << 20,
    hosts: [0, 0, 0, 1, 1, 2, 2],
    intra: shm,
  }, tcp);
  assert.ok(uneven > 0 && uneven < ringAllReduceCost({ size: 7, bytes: 4 << 20 }, tcp));
  // Pipelined: less than gathering into the leaders, their ring, and returning, one after the other.
  const m = { bytes: 4 << 20, chunkBytes: 1 << 20 };
  const serial = binomialReduceCost({ size: 3, ...m }, shm) + ringAllReduceCost({ size: 3, ...m }, tcp) +
    binomialBroadcastCost({ size: 3, ...m }, shm);
  assert.ok(uneven < serial, `${uneven} < ${serial}`);
});
