/**
 * `bench/objects.ts` (`deno task bench:objects`): the objects it sends are the sizes asked for, its check
 * tells a wrong result, and a short run on 2 ranks prints every object collective at each size with no wrong
 * call and writes its rows.
 */
import assert from "node:assert/strict";
import { serialize } from "node:v8";
import { makeObject, type ObjectRow, same } from "../../bench/_objects_rank.ts";

Deno.test("makeObject() serialises to the size asked for, each rank's its own", () => {
  for (const bytes of [1024, 1 << 20, 200, 5000]) {
    for (const rank of [0, 1, 3]) {
      assert.equal(serialize(makeObject(rank, bytes)).byteLength, bytes, `${bytes} B, rank ${rank}`);
    }
  }
  const a = makeObject(0, 1024), b = makeObject(1, 1024);
  assert.ok(a.values instanceof Float32Array && typeof a.note === "string");
  assert.ok(same(structuredClone(a), a));
  assert.ok(!same(b, a), "another rank's object");
  const changed = structuredClone(a);
  (changed.values as Float32Array)[100] += 1;
  assert.ok(!same(changed, a), "one element off");
  assert.ok(!same({ ...a, values: Array.from(a.values as Float32Array) }, a), "not a Float32Array");
  assert.ok(!same(null, a));
});

Deno.test("bench:objects times every object collective on 2 ranks, checked, and writes its rows", async () => {
  const out = await Deno.makeTempFile({ suffix: ".json" });
  try {
    const run = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../../bench/objects.ts", import.meta.url).pathname,
        ...["--ranks", "2", "--sizes", "1K,64K", "-n", "3", "-w", "1", "-r", "1", "--out", out],
      ],
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const text = new TextDecoder().decode(run.stdout) + new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 0, text.slice(-2000));
    assert.match(text, /# object collectives on 2 ranks/);
    assert.match(text, /# 8 rows, 0 wrong calls/);
    const rows = JSON.parse(Deno.readTextFileSync(out)) as ObjectRow[];
    assert.deepEqual(rows.map((r) => [r.call, r.ranks, r.root, r.objectBytes, r.calls, r.wrong]), [
      ...[1024, 65536].flatMap((bytes) => [
        ["broadcastObject", 2, 1, bytes, 3, 0],
        ["allGatherObject", 2, -1, bytes, 3, 0],
        ["gatherObject", 2, 1, bytes, 3, 0],
        ["scatterObject", 2, 1, bytes, 3, 0],
      ]),
    ]);
    for (const r of rows) assert.ok(r.minUs > 0 && r.medianUs >= r.minUs && r.tensorMedianUs > 0, r.call);
  } finally {
    await Deno.remove(out);
  }
});
