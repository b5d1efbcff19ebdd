/**
 * `compression`: float32 all-reduces encoded and decoded on the communication thread (int8 with block
 * scales, 1-bit with error feedback on both sides, top-k with error feedback, PowerSGD), on threads (the
 * in-process transport), on processes through the host segment and over TCP: each against float64
 * references computed from every rank's inputs with the bounds the fixture derives, the error-feedback
 * identity after several steps (and what is lost without it), the same bits on every rank, the bytes the
 * reports count; ranks that disagree on the codec fail naming both calls; bad options are refused.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import { init } from "../../backend/init.ts";
import { launchedResults } from "../_util/launched.ts";
import type { CaseResult } from "./_fixtures/compressed_rank.ts";

const FIXTURE = new URL("./_fixtures/compressed_rank.ts", import.meta.url);

function check(results: CaseResult[][], transport: string): void {
  const n = results.length;
  for (const [i, first] of results[0].entries()) {
    const name = first.name;
    for (const r of results) {
      assert.deepEqual(r[i].failures, [], `${name}: ${r[i].failures.join("; ")}`);
      assert.deepEqual(r[i].hashes, first.hashes, `${name}: every rank ends with the same bits`);
      for (const rep of r[i].reports) {
        assert.equal(rep.compression, name.split(" ")[0], name);
        if (transport === "segment") assert.equal(rep.algorithm, "segment", name);
      }
    }
    if (name.endsWith(" ef") || name.endsWith(" ef interhost") || name === "sign big") {
      // Error feedback: the outputs plus the residuals add up to the sum of the averages.
      assert.ok((first.identity as number) < 1e-6, `${name}: identity off by ${first.identity}`);
    }
    if (name.endsWith(" none")) {
      // Without it, what each step lost is gone: the same sum is far off.
      assert.ok((first.identity as number) > 0.1, `${name}: identity ${first.identity}`);
    }
    // Bytes: posted through the segment, each codec's own formula (see collectives/compressed_*.ts).
    if (transport === "segment") {
      const rep = first.reports[0];
      const ratio = rep.bytes / rep.bytesSent;
      if (name === "sign big") assert.ok(ratio >= 16, `1-bit sends ≥ 16× fewer bytes, found ${ratio}`);
      if (name === "int8 big") assert.ok(ratio >= 3, `int8 sends ≥ 3× fewer bytes, found ${ratio}`);
      if (name.startsWith("topk")) assert.equal(rep.bytesSent, 8 * 40, "top-k posts k indices and values");
    }
  }
  assert.ok(n >= 2);
}

for (const ranks of [2, 3, 4]) {
  Deno.test(`compressed all-reduce on ${ranks} threads: every codec within its bound, error feedback carried`, async () => {
    const results = (await spawnThreads(FIXTURE, { worldSize: ranks, timeoutMs: 60_000 })) as CaseResult[][];
    check(results, "inproc");
  });
}

for (const [transport, ranks] of [["shm", 4], ["tcp", 3], ["hybrid", 5]] as const) {
  const what = transport === "hybrid"
    ? "between hosts only (interHost), hosts a,a,a,b,b"
    : `over ${transport}`;
  Deno.test(`compressed all-reduce on ${ranks} processes ${what}`, async () => {
    const env: Record<string, string> = transport === "hybrid"
      ? { DCOMM_HOST_OF: "a,a,a,b,b" }
      : { DCOMM_TRANSPORT: transport };
    const results = await launchedResults<CaseResult[]>(FIXTURE.pathname, ranks, env, 180_000);
    check(results, transport === "shm" ? "segment" : transport);
    if (transport === "hybrid") {
      for (const r of results) {
        assert.ok(r.every((c) => c.name.endsWith(" interhost")), "the between-hosts cases ran");
      }
    }
  });
}

Deno.test("ranks that compress with different codecs fail every rank, naming both calls", async () => {
  const results = (await spawnThreads(FIXTURE, {
    worldSize: 3,
    args: { scenario: "mismatch" },
    timeoutMs: 30_000,
  })) as { caught: string; mismatch: boolean }[];
  for (const r of results) assert.notEqual(r.caught, "no error");
  const detail = results.find((r) => r.mismatch);
  assert.ok(detail, results.map((r) => r.caught).join("\n"));
  assert.match(
    detail.caught,
    /called allToAll\(.*\(stage 1 of a compressed allReduce, codec (sign|int8)\) but rank \d called allToAll\(.*\(stage 1 of a compressed allReduce, codec (sign|int8)\)/,
  );
  assert.match(detail.caught, /codec sign/);
  assert.match(detail.caught, /codec int8/);
});

Deno.test("compression is refused where it does not apply, naming what was expected", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  const t = new Float32Array(8);
  const bad: [unknown, RegExp][] = [
    [
      { codec: "zip" },
      /^TypeError: Cannot all-reduce with compression: codec must be one of int8, sign, topk, powersgd, found "zip"/,
    ],
    [null, /expected an object with a codec, found null/],
    [{ codec: "int8", k: 3 }, /k is not an option of the int8 codec \(it takes blockSize\)/],
    [
      { codec: "int8", blockSize: 0 },
      /^RangeError: .*blockSize must be an integer in 1\.\.16777216, found 0/,
    ],
    [{ codec: "topk" }, /k must be an integer in 1\.\.8, found undefined/],
    [{ codec: "topk", k: 9 }, /k must be an integer in 1\.\.8, found 9/],
    [{ codec: "sign", residual: new Float32Array(7) }, /residual must have 8 elements, found 7/],
    [
      { codec: "sign", residual: new Float64Array(8) },
      /residual must be a Float32Array, found a Float64Array/,
    ],
    [{ codec: "sign", residual: t }, /residual shares memory with the tensor/],
    [{ codec: "powersgd", q: new Float32Array(2) }, /powersgd needs matrices/],
    [{ codec: "powersgd", matrices: [{ offset: 0, rows: 2, cols: 2 }] }, /powersgd needs q/],
    [
      { codec: "powersgd", matrices: [{ offset: 0, rows: 2, cols: 2 }], q: new Float32Array(3) },
      /q must have 2 elements, found 3/,
    ],
    [
      {
        codec: "powersgd",
        matrices: [{ offset: 0, rows: 3, cols: 2 }, { offset: 5, rows: 1, cols: 1 }],
        q: new Float32Array(3),
      },
      /matrices\[1\] starts at 5, inside the matrix before it \(ends at 6\)/,
    ],
    [
      { codec: "powersgd", matrices: [{ offset: 4, rows: 3, cols: 2 }], q: new Float32Array(2) },
      /matrices\[0\] ends at 10, past the tensor's 8 elements/,
    ],
  ];
  for (const [compression, pattern] of bad) {
    assert.throws(
      () => pg.allReduce(t, { compression: compression as never }),
      pattern,
      JSON.stringify(compression),
    );
  }
  assert.throws(
    () => pg.allReduce(new Float64Array(4), { compression: { codec: "int8" } }),
    /it takes float32 tensors, found a float64 tensor/,
  );
  assert.throws(
    () => pg.allReduce(t, { op: "max", compression: { codec: "int8" } }),
    /op must be sum or avg, found max/,
  );
  assert.throws(
    () => pg.allReduce(t, { commDtype: "float16", compression: { codec: "int8" } }),
    /commDtype and compression exclude each other/,
  );
  assert.throws(
    () => pg.allReduce(t, { algorithm: "ring", compression: { codec: "int8" } }),
    /algorithm must be "auto", found "ring"/,
  );
  assert.throws(
    () => pg.reduce(t, { compression: { codec: "int8" } } as never),
    /Cannot reduce: compression is an option of allReduce only/,
  );
  // The group is still usable.
  await pg.allReduce(t, { compression: { codec: "int8" } });
});
