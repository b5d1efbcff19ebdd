/**
 * A rank of the object collectives' tests: each collective with objects of every kind structured clone
 * takes (nested objects, Maps, bigints, TypedArrays, a 1 MiB string), roots 0 and size − 1, and the
 * error cases; then `split` (colours, keys, ranks without a group), batches and receives from any rank. Runs as a thread (`main`) or a
 * launched process (prints `RESULT {json}`; `mpi` as its argument: the mpi backend).
 *
 * @module
 */
import assert from "node:assert/strict";
import { ANY_SOURCE, type P2POp, type ProcessGroup } from "../../../backend/process_group.ts";

/** What a rank reports. */
export interface ObjectsResult {
  rank: number;
  failures: string[];
  ran: number;
}

/** Rank r's object: of a different size on every rank (some empty). */
function objectOf(r: number): unknown {
  return {
    rank: r,
    name: "x".repeat(r * 3),
    tags: new Set(Array.from({ length: r }, (_, i) => `t${i}`)),
    weights: new Float32Array(r).fill(r / 2),
    big: BigInt(r) ** 20n,
    nested: { map: new Map([[r, [r, r + 1]]]), when: new Date(r * 1000) },
  };
}

/** Runs every case on this rank. */
export async function main(pg: ProcessGroup): Promise<ObjectsResult> {
  const result: ObjectsResult = { rank: pg.rank, failures: [], ran: 0 };
  const check = async (name: string, body: () => Promise<void>): Promise<void> => {
    try {
      await body();
    } catch (e) {
      result.failures.push(`rank ${pg.rank}: ${name}: ${(e as Error).message}`);
    }
    result.ran++;
  };
  const n = pg.size, me = pg.rank;
  for (const root of new Set([0, n - 1])) {
    await check(`broadcastObject root ${root}`, async () => {
      const got = await pg.broadcastObject(me === root ? objectOf(root) : null, { root });
      assert.deepEqual(got, objectOf(root));
    });
    await check(`gatherObject root ${root}`, async () => {
      const got = await pg.gatherObject(objectOf(me), { root });
      if (me === root) assert.deepEqual(got, Array.from({ length: n }, (_, r) => objectOf(r)));
      else assert.equal(got, null);
    });
    await check(`scatterObject root ${root}`, async () => {
      const all = me === root ? Array.from({ length: n }, (_, r) => objectOf(r)) : null;
      assert.deepEqual(await pg.scatterObject(all, { root }), objectOf(me));
    });
  }
  await check("allGatherObject", async () => {
    assert.deepEqual(
      await pg.allGatherObject(objectOf(me)),
      Array.from({ length: n }, (_, r) => objectOf(r)),
    );
  });
  await check("broadcastObject of 1 MiB", async () => {
    const big = "ab".repeat(1 << 19);
    assert.equal(await pg.broadcastObject(me === 0 ? big : ""), big);
  });
  await check("an object that cannot be serialised fails every rank alike", async () => {
    const bad = me === n - 1 ? { f: () => 1 } : { ok: true };
    await assert.rejects(pg.allGatherObject(bad), (e: Error) => {
      assert.equal(e.name, "TypeError");
      assert.match(e.message, /^Cannot allGatherObject: /);
      assert.match(
        e.message,
        new RegExp(me === n - 1 ? "cannot be serialised \\(structured clone\\)" : `rank ${n - 1}'s object`),
      );
      return true;
    });
  });
  await check("the root's unserialisable object fails every rank of a broadcast", async () => {
    await assert.rejects(
      pg.broadcastObject(me === 0 ? Symbol("no") : null),
      /^TypeError: Cannot broadcastObject: /,
    );
  });
  await check("scatterObject's root needs one object per rank", async () => {
    if (me !== 0) return;
    await assert.rejects(
      pg.scatterObject([1, 2, 3, 4, 5, 6, 7, 8, 9].slice(0, n + 1)),
      /one object per rank/,
    );
  });
  // The group still works after the errors.
  await check("after the errors", async () => {
    assert.deepEqual(await pg.allGatherObject(me), Array.from({ length: n }, (_, r) => r));
  });
  await check("split by parity, keys descending, the last rank without a group", async () => {
    const color = me === n - 1 && n > 2 ? null : me % 2;
    const g = await pg.split(color, { key: -me });
    if (color === null) {
      assert.equal(g, null);
      return;
    }
    assert.ok(g);
    const want = Array.from({ length: n }, (_, r) => r)
      .filter((r) => !(r === n - 1 && n > 2) && r % 2 === color)
      .sort((a, b) => b - a)
      .map((r) => pg.ranks[r]);
    assert.deepEqual(g.ranks, want);
    assert.equal(g.rank, want.indexOf(pg.ranks[me]));
    // A collective in each group: the sum of its members' global ranks, and a gather in key order.
    const t = new Float64Array([pg.ranks[me]]);
    await g.allReduce(t);
    assert.equal(t[0], want.reduce((a, b) => a + b, 0));
    assert.deepEqual(await g.allGatherObject(pg.ranks[me]), want);
    await g.close();
  });
  await check(
    "batchIsendIrecv: every rank sends to and receives from every other, both ways at once",
    async () => {
      if (n === 1) return;
      const ops: P2POp[] = [];
      const got = new Map<number, Float64Array>();
      for (let p = 0; p < n; p++) {
        if (p === me) continue;
        const buf = new Float64Array(1000);
        got.set(p, buf);
        ops.push({ op: "send", tensor: new Float64Array(1000).fill(me * 100 + p), peer: p });
        ops.push({ op: "recv", tensor: buf, peer: p });
      }
      const works = pg.batchIsendIrecv(ops);
      assert.equal(works.length, ops.length);
      await Promise.all(works.map((w) => w.wait()));
      for (const [p, buf] of got) assert.ok(buf.every((x) => x === p * 100 + me), `from rank ${p}`);
    },
  );
  await check(
    "recv from ANY_SOURCE: one message from each other rank, the report names each sender",
    async () => {
      if (n === 1) {
        assert.throws(
          () => pg.recv(new Float32Array(1), ANY_SOURCE),
          /^RangeError: Cannot recv from ANY_SOURCE: the group has no rank but this one$/,
        );
        return;
      }
      // 300,000 float64s (2.4 MB): more than a shared-memory ring holds, so it arrives in parts.
      const count = 300_000;
      for (const root of new Set([0, n - 1])) {
        // A receive from any rank takes any send to this rank: the barrier keeps the next sends apart.
        if (me !== root) {
          const report = await pg.send(new Float64Array(count).fill(me), root).wait();
          assert.equal(report?.peer, root);
          await pg.barrier();
          continue;
        }
        const from: number[] = [];
        for (let i = 1; i < n; i++) {
          const got = new Float64Array(count);
          const report = await pg.recv(got, ANY_SOURCE).wait();
          assert.equal(report?.collective, "recv");
          assert.equal(typeof report?.peer, "number");
          assert.ok(got.every((x) => x === report?.peer), `the data of rank ${report?.peer}`);
          from.push(report?.peer as number);
        }
        assert.deepEqual(
          from.sort((a, b) => a - b),
          Array.from({ length: n }, (_, r) => r).filter((r) => r !== me),
        );
        await pg.barrier();
      }
    },
  );
  await check("recv from ANY_SOURCE passes over a rank whose next message is a collective", async () => {
    if (n < 3) return;
    // Rank 1 sends to rank 0; the others go straight on to an all-reduce, whose messages reach rank 0
    // while it waits for any sender.
    const got = new Int32Array(64);
    if (me === 1) await pg.send(new Int32Array(64).fill(41), 0);
    if (me === 0) {
      const report = await pg.recv(got, ANY_SOURCE).wait();
      assert.equal(report?.peer, 1);
      assert.ok(got.every((x) => x === 41));
    }
    const t = new Float32Array(1000).fill(me);
    await pg.allReduce(t);
    assert.ok(t.every((x) => x === (n * (n - 1)) / 2));
  });
  await check("batchIsendIrecv with receives from ANY_SOURCE", async () => {
    if (n === 1) return;
    if (me !== 0) {
      await Promise.all(pg.batchIsendIrecv([{ op: "send", tensor: new Uint8Array(10).fill(me), peer: 0 }]));
      return await pg.barrier();
    }
    const bufs = Array.from({ length: n - 1 }, () => new Uint8Array(10));
    const works = pg.batchIsendIrecv(bufs.map((tensor) => ({ op: "recv", tensor, peer: ANY_SOURCE })));
    const peers = [];
    for (const [i, w] of works.entries()) {
      const report = await w.wait();
      assert.ok(bufs[i].every((x) => x === report?.peer));
      peers.push(report?.peer);
    }
    assert.deepEqual(peers.sort(), Array.from({ length: n - 1 }, (_, r) => r + 1));
    await pg.barrier();
  });
  await check("sendObject/recvObject around a ring", async () => {
    if (n === 1) return;
    const next = (me + 1) % n, prev = (me + n - 1) % n;
    const [, got] = await Promise.all([pg.sendObject(objectOf(me), next), pg.recvObject(prev)]);
    assert.deepEqual(got, objectOf(prev));
  });
  await check("batchIsendIrecv refuses a bad op before sending any", () => {
    if (n === 1) return Promise.resolve();
    const t = new Float32Array(4);
    assert.throws(
      () => pg.batchIsendIrecv([]),
      /^TypeError: Cannot batchIsendIrecv: expected a non-empty array/,
    );
    assert.throws(
      () =>
        pg.batchIsendIrecv([{ op: "send", tensor: t, peer: (me + 1) % n }, {
          op: "put" as never,
          tensor: t,
          peer: 0,
        }]),
      /expected ops\[1\] to be \{ op: "send" \| "recv", tensor, peer \}, found "put"/,
    );
    assert.throws(() => pg.batchIsendIrecv([{ op: "recv", tensor: t, peer: n }]), RangeError);
    return Promise.resolve();
  });
  await check("split's bad colours and keys", async () => {
    await assert.rejects(pg.split(1.5), /^RangeError: Cannot split: expected color to be an integer >= 0/);
    await assert.rejects(
      pg.split(0, { key: 0.5 }),
      /^RangeError: Cannot split: expected key to be an integer/,
    );
  });
  return result;
}

if (import.meta.main) {
  const { init } = await import("../../../backend/init.ts");
  const pg = await init(Deno.args[0] === "mpi" ? { backend: "mpi" } : {});
  const result = await main(pg);
  console.log("RESULT " + JSON.stringify(result));
  await pg.close();
}
