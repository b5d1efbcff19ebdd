/**
 * A rank of the object collectives' tests: each collective with objects of every kind structured clone
 * takes (nested objects, Maps, bigints, TypedArrays, a 1 MiB string), roots 0 and size − 1, and the
 * error cases; then `split` (colours, keys, ranks without a group). Runs as a thread (`main`) or a
 * launched process (prints `RESULT {json}`; `mpi` as its argument: the mpi backend).
 *
 * @module
 */
import assert from "node:assert/strict";
import type { P2POp, ProcessGroup } from "../../../backend/process_group.ts";

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
