/**
 * A rank's side of the mpi backend tests, run under `mpiexec -n N deno run -A mpi_rank.ts <suite>` (or, for
 * the `compare` suite, also as a cpu-backend rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set and
 * `--backend cpu`). Every rank computes every other rank's seeded input (`../_reference.ts`), checks its
 * own results against the formula, and prints one line `RESULT {json}`: the cases it ran, what went wrong,
 * and the results the test compares across ranks or backends.
 *
 * Suites:
 * - `collectives`: every collective × dtype × op × a few counts and roots, one 4 MiB all-reduce.
 * - `groups`: sub-groups by `newGroup` (members, non-members, nested, interleaved with the world).
 * - `p2p`: send/recv in a ring for every dtype, a large message, length mismatches both ways.
 * - `overlap`: Work not awaited while the rank computes; the event loop keeps turning while a peer is late.
 * - `args`: bad arguments throw TypeError/RangeError/UnsupportedError before anything is sent.
 * - `timeout`: a receive that times out is cancelled and the group goes on; a collective that times out
 *   makes the backend unusable.
 * - `compare`: a fixed list of seeded calls whose results the test compares between the cpu and mpi
 *   backends.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import {
  type DType,
  DTYPES,
  isFloat,
  type ReduceOp,
  reduceOpsFor,
  type TypedArray,
} from "../../../core/dtype.ts";
import { DistError, MismatchError, TimeoutError, UnsupportedError } from "../../../core/errors.ts";
import { init } from "../../../backend/init.ts";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { checkReduction, get, hashBytes, input, makeArray, rankFactor } from "../_reference.ts";

/** What a rank prints. */
export interface MpiRankResult {
  /** The rank in the world. */
  rank: number;
  /** The world size. */
  size: number;
  /** The suite. */
  suite: string;
  /** How many cases ran. */
  ran: number;
  /** What went wrong, one line each. */
  failures: string[];
  /** Hashes of all-reduce results, by case, to compare across ranks. */
  hashes: Record<string, string>;
  /** For `compare`: each case's result (integers as a hash, floats as numbers). */
  results: Record<string, { dtype: DType; hash?: string; values?: number[] }>;
  /** Free-form measurements (e.g. event-loop turns while waiting). */
  notes: Record<string, number | string | boolean>;
}

const { values: flags, positionals } = parseArgs({
  args: Deno.args,
  options: { backend: { type: "string", default: "mpi" } },
  allowPositionals: true,
});
const suite = positionals[0] ?? "collectives";
const backend = flags.backend as "mpi" | "cpu";

const pg = await init({ backend, timeoutMs: 60_000 });
const me = pg.rank;
const size = pg.size;
const result: MpiRankResult = {
  rank: me,
  size,
  suite,
  ran: 0,
  failures: [],
  hashes: {},
  results: {},
  notes: {},
};

function fail(name: string, what: string): void {
  result.failures.push(`rank ${me}: ${name}: ${what}`);
}

function firstDiff(a: ArrayBufferView, b: ArrayBufferView): number {
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (x.length !== y.length) return 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

function concat(dtype: DType, parts: readonly TypedArray[], each: number): TypedArray {
  const out = makeArray(dtype, parts.length * each);
  parts.forEach((p, r) =>
    (out as unknown as { set(a: ArrayLike<unknown>, o: number): void }).set(p, r * each)
  );
  return out;
}

/** Every rank's seeded input of a case. */
function inputs(dtype: DType, op: ReduceOp, n: number, seed: number, ranks = size): TypedArray[] {
  return Array.from({ length: ranks }, (_, r) => input(dtype, op, n, seed, r));
}

function checkReduced(
  name: string,
  dtype: DType,
  op: ReduceOp,
  all: TypedArray[],
  got: TypedArray,
  offset = 0,
): void {
  const bad = checkReduction(dtype, op, all, got, offset);
  if (bad) fail(name, `element ${bad.index}: expected ${bad.expected}, got ${bad.got}`);
}

function record(name: string, dtype: DType, out: TypedArray): void {
  if (isFloat(dtype)) {
    result.results[name] = {
      dtype,
      values: Array.from({ length: out.length }, (_, i) => get(dtype, out, i) as number),
    };
  } else {
    result.results[name] = { dtype, hash: hashBytes(out) };
  }
}

/** premulSum's factor on this rank (each rank its own), none for any other op. */
function factorOf(op: ReduceOp, rank: number): number | undefined {
  return op === "premulSum" ? rankFactor(rank) : undefined;
}

/** The ops that apply to `dtype` among `ops`. */
function applying(dtype: DType, ops: readonly ReduceOp[]): ReduceOp[] {
  return ops.filter((op) => reduceOpsFor(dtype).includes(op));
}

/** One seeded call of every collective; `record` keeps the results for the backend comparison. */
async function collectives(g: ProcessGroup, counts: readonly number[], keep: boolean): Promise<void> {
  let seed = 1;
  const roots = [...new Set([0, g.size - 1])];
  for (const count of counts) {
    for (const dtype of DTYPES) {
      for (const op of reduceOpsFor(dtype)) {
        const name = `allReduce ${count} ${dtype} ${op}`;
        const all = inputs(dtype, op, count, ++seed);
        const out = all[me].slice();
        await g.allReduce(out, { op, dtype, factor: factorOf(op, g.rank) });
        checkReduced(name, dtype, op, all, out);
        result.hashes[name] = hashBytes(out);
        if (keep) record(name, dtype, out);
        result.ran++;
      }
      for (const root of roots) {
        const name = `broadcast ${count} ${dtype} root ${root}`;
        const want = input(dtype, "sum", count, ++seed, root);
        const out = me === root ? want.slice() : input(dtype, "sum", count, seed + 1000, me);
        await g.broadcast(out, { root, dtype });
        if (firstDiff(out, want) >= 0) fail(name, `byte ${firstDiff(out, want)} differs from the root's`);
        result.ran++;
      }
      for (const root of roots) {
        const op: ReduceOp = isFloat(dtype) ? "sum" : "max";
        for (const o of applying(dtype, [op, "avg", isFloat(dtype) ? "premulSum" : "band"])) {
          const name = `reduce ${count} ${dtype} ${o} root ${root}`;
          const all = inputs(dtype, o, count, ++seed);
          const out = all[me].slice();
          await g.reduce(out, { op: o, root, dtype, factor: factorOf(o, g.rank) });
          if (me === root) {
            checkReduced(name, dtype, o, all, out);
            if (keep) record(name, dtype, out);
          } else if (firstDiff(out, all[me]) >= 0) fail(name, "a non-root tensor changed");
          result.ran++;
        }
      }
      {
        const name = `allGather ${count} ${dtype}`;
        const all = inputs(dtype, "sum", count, ++seed);
        const out = makeArray(dtype, count * g.size);
        await g.allGather(out, all[me], { dtype });
        const i = firstDiff(out, concat(dtype, all, count));
        if (i >= 0) fail(name, `byte ${i} differs from the concatenation`);
        result.ran++;
      }
      const scattering: ReduceOp[] = ["sum", "avg", isFloat(dtype) ? "max" : "prod"];
      for (const op of applying(dtype, [...scattering, isFloat(dtype) ? "premulSum" : "bor"])) {
        const name = `reduceScatter ${count} ${dtype} ${op}`;
        const all = inputs(dtype, op, count * g.size, ++seed);
        const out = makeArray(dtype, count);
        await g.reduceScatter(out, all[me], { op, dtype, factor: factorOf(op, g.rank) });
        checkReduced(name, dtype, op, all, out, me * count);
        if (keep) record(name, dtype, out);
        result.ran++;
      }
      for (const root of roots) {
        const name = `gather ${count} ${dtype} root ${root}`;
        const all = inputs(dtype, "sum", count, ++seed);
        const out = me === root ? makeArray(dtype, count * g.size) : null;
        await g.gather(out, all[me], { root, dtype });
        if (out) {
          const i = firstDiff(out, concat(dtype, all, count));
          if (i >= 0) fail(name, `byte ${i} differs from the concatenation`);
        }
        result.ran++;
      }
      for (const root of roots) {
        const name = `scatter ${count} ${dtype} root ${root}`;
        const all = inputs(dtype, "sum", count * g.size, ++seed);
        const out = makeArray(dtype, count);
        await g.scatter(out, me === root ? all[me] : null, { root, dtype });
        const i = firstDiff(out, all[root].subarray(me * count, (me + 1) * count) as TypedArray);
        if (i >= 0) fail(name, `byte ${i} differs from block ${me} of the root's input`);
        result.ran++;
      }
      {
        // The v-forms: rank r's block (r·count + 3) mod (2·count + 1) elements (zeros among them).
        const counts = Array.from({ length: g.size }, (_, r) => (r * count + 3) % (2 * count + 1));
        const total = counts.reduce((a, b) => a + b, 0);
        const offset = counts.slice(0, me).reduce((a, b) => a + b, 0);
        const own = (r: number, salt: number) => inputs(dtype, "sum", counts[r], salt)[r];
        {
          const name = `allGather v ${counts} ${dtype}`;
          const salt = ++seed;
          const out = makeArray(dtype, total);
          await g.allGather(out, own(me, salt), { dtype, counts });
          const want = makeArray(dtype, total);
          counts.forEach((_, r) =>
            (want as unknown as { set(a: ArrayLike<unknown>, o: number): void }).set(
              own(r, salt) as unknown as ArrayLike<unknown>,
              counts.slice(0, r).reduce((a, b) => a + b, 0),
            )
          );
          const i = firstDiff(out, want);
          if (i >= 0) fail(name, `byte ${i} differs from the concatenation`);
          const root = roots[roots.length - 1];
          const gathered = me === root ? makeArray(dtype, total) : null;
          await g.gather(gathered, own(me, salt), { dtype, counts, root });
          if (gathered && firstDiff(gathered, want) >= 0) fail(`gather v ${counts} ${dtype}`, "differs");
          const scattered = makeArray(dtype, counts[me]);
          await g.scatter(scattered, me === root ? want : null, { dtype, counts, root });
          if (firstDiff(scattered, want.subarray(offset, offset + counts[me]) as TypedArray) >= 0) {
            fail(`scatter v ${counts} ${dtype}`, "differs");
          }
          result.ran += 3;
        }
        {
          const name = `reduceScatter v ${counts} ${dtype}`;
          const all = inputs(dtype, "sum", total, ++seed);
          const out = makeArray(dtype, counts[me]);
          await g.reduceScatter(out, all[me], { dtype, counts });
          checkReduced(name, dtype, "sum", all, out, offset);
          result.ran++;
        }
        {
          // Rank i sends rank j (i + 2j) mod 3 elements.
          const name = `allToAll v ${dtype}`;
          const m = (i: number, j: number) => (i + 2 * j) % 3;
          const sendCounts = Array.from({ length: g.size }, (_, j) => m(me, j));
          const recvCounts = Array.from({ length: g.size }, (_, i) => m(i, me));
          const value = (i: number, j: number, k: number) => (i * 16 + j * 4 + k) % 100;
          const mine = makeArray(dtype, sendCounts.reduce((a, b) => a + b, 0));
          const wanted = makeArray(dtype, recvCounts.reduce((a, b) => a + b, 0));
          const put = (t: unknown, at: number, v: number) =>
            (t as { [i: number]: unknown })[at] = typeof (t as { [i: number]: unknown })[0] === "bigint"
              ? BigInt(v)
              : v;
          let at = 0;
          sendCounts.forEach((n, j) => {
            for (let k = 0; k < n; k++) put(mine, at++, value(me, j, k));
          });
          at = 0;
          recvCounts.forEach((n, i) => {
            for (let k = 0; k < n; k++) put(wanted, at++, value(i, me, k));
          });
          const out = makeArray(dtype, wanted.length);
          await g.allToAll(out, mine, { dtype, sendCounts, recvCounts });
          const i = firstDiff(out, wanted);
          if (i >= 0) fail(name, `byte ${i} differs from the expected blocks`);
          result.ran++;
        }
      }
      {
        const name = `allToAll ${count} ${dtype}`;
        const all = inputs(dtype, "sum", count * g.size, ++seed);
        const out = makeArray(dtype, count * g.size);
        await g.allToAll(out, all[me], { dtype });
        const blocks = all.map((a) => a.subarray(me * count, (me + 1) * count) as TypedArray);
        const i = firstDiff(out, concat(dtype, blocks, count));
        if (i >= 0) fail(name, `byte ${i} differs from the expected blocks`);
        result.ran++;
      }
    }
  }
  await g.barrier();
  result.ran++;
}

async function suiteCollectives(): Promise<void> {
  await collectives(pg, [0, 1, 7, 1025], false);
  // A 4 MiB float32 all-reduce takes many rounds of MPI progress.
  const big = 1 << 20;
  const all = inputs("float32", "sum", big, 99);
  const out = all[me].slice();
  await pg.allReduce(out);
  checkReduced("allReduce 4 MiB float32", "float32", "sum", all, out);
  result.hashes["allReduce 4 MiB float32"] = hashBytes(out);
  // In place on views at odd offsets into one buffer (allGather's input inside its output: copied first).
  const buffer = new ArrayBuffer(8 * (size + 2));
  const output = new Int32Array(buffer, 4, 2 * size);
  output.set(input("int32", "sum", 2, 5, me) as Int32Array, 2 * me);
  const inside = output.subarray(2 * me, 2 * me + 2);
  await pg.allGather(output, inside);
  const i = firstDiff(output, concat("int32", inputs("int32", "sum", 2, 5), 2));
  if (i >= 0) fail("allGather in place", `byte ${i} differs`);
  result.ran += 2;
}

async function suiteGroups(): Promise<void> {
  assert(size >= 3, "the groups suite needs at least 3 ranks");
  // The first and last rank.
  const ends = await pg.newGroup([size - 1, 0]);
  const inEnds = me === 0 || me === size - 1;
  if (ends.rank !== (me === 0 ? 0 : me === size - 1 ? 1 : -1)) fail("newGroup ends", `rank ${ends.rank}`);
  if (ends.size !== 2 || ends.ranks.join() !== `0,${size - 1}`) fail("newGroup ends", `ranks ${ends.ranks}`);
  if (inEnds) {
    const all = inputs("float64", "sum", 9, 11, 2);
    const out = all[ends.rank].slice();
    await ends.allReduce(out);
    checkReduced("ends allReduce", "float64", "sum", all, out);
    const b = ends.rank === 1 ? new Int32Array([4, 5, 6]) : new Int32Array(3);
    await ends.broadcast(b, { root: 1 });
    if (b.join() !== "4,5,6") fail("ends broadcast root 1", `got ${b}`);
  } else {
    try {
      ends.allReduce(new Float32Array(1));
      fail("non-member allReduce", "did not throw");
    } catch (e) {
      if (!(e instanceof RangeError)) fail("non-member allReduce", `threw ${e}`);
    }
  }
  result.ran += 2;
  // The odd ranks, then a nested group inside the world's complement, interleaved with world calls.
  const odd = await pg.newGroup(pg.ranks.filter((r) => r % 2 === 1));
  const even = await pg.newGroup(pg.ranks.filter((r) => r % 2 === 0));
  const mine = me % 2 === 1 ? odd : even;
  const members = pg.ranks.filter((r) => r % 2 === me % 2);
  const groupInputs = members.map((r) => input("int64", "sum", 5, 21, r));
  const groupOut = groupInputs[mine.rank].slice();
  const pending = mine.allReduce(groupOut); // not awaited: the world call below runs meanwhile
  const worldAll = inputs("int32", "max", 6, 22);
  const worldOut = worldAll[me].slice();
  await pg.allReduce(worldOut, { op: "max" });
  await pending;
  checkReduced("odd/even allReduce", "int64", "sum", groupInputs, groupOut);
  checkReduced("world allReduce between", "int32", "max", worldAll, worldOut);
  const nested = await mine.newGroup([0]);
  if (nested.size !== 1 || nested.ranks[0] !== members[0]) fail("nested newGroup", `ranks ${nested.ranks}`);
  if (nested.rank === 0) {
    const x = new Float32Array([1.5]);
    await nested.allReduce(x, { op: "avg" });
    if (x[0] !== 1.5) fail("nested allReduce", `got ${x[0]}`);
  }
  await nested.close();
  await ends.close();
  await odd.close();
  await even.close();
  // The world still works after its sub-groups closed.
  const after = inputs("uint8", "sum", 3, 23);
  const afterOut = after[me].slice();
  await pg.allReduce(afterOut);
  checkReduced("allReduce after closing groups", "uint8", "sum", after, afterOut);
  result.ran += 4;
}

async function suiteP2p(): Promise<void> {
  const next = (me + 1) % size;
  const prev = (me + size - 1) % size;
  let seed = 300;
  for (const dtype of DTYPES) {
    for (const count of [0, 3, 4099]) {
      const name = `send/recv ${count} ${dtype}`;
      const mine = input(dtype, "sum", count, ++seed, me);
      const out = makeArray(dtype, count);
      await Promise.all([pg.send(mine, next, { dtype }), pg.recv(out, prev, { dtype })]);
      const i = firstDiff(out, input(dtype, "sum", count, seed, prev));
      if (i >= 0) fail(name, `byte ${i} differs from what rank ${prev} sent`);
      result.ran++;
    }
  }
  {
    const big = 3 << 20; // 12 MiB: MPICH's rendezvous protocol
    const mine = input("float32", "sum", big, 400, me);
    const out = new Float32Array(big);
    await Promise.all([pg.send(mine, next), pg.recv(out, prev)]);
    if (firstDiff(out, input("float32", "sum", big, 400, prev)) >= 0) fail("send/recv 12 MiB", "differs");
    result.ran++;
  }
  // A message longer than the tensor, then one shorter: MismatchError on the receiver, both sides go on.
  if (size >= 2 && me < 2) {
    const peer = 1 - me;
    for (const [sent, room] of [[5, 3], [3, 5]]) {
      const name = `recv of ${sent} into ${room}`;
      if (me === 0) await pg.send(new Int32Array(sent).fill(7), peer);
      else {
        try {
          await pg.recv(new Int32Array(room), peer);
          fail(name, "did not fail");
        } catch (e) {
          if (!(e instanceof MismatchError)) fail(name, `expected a MismatchError, found ${e}`);
        }
      }
      result.ran++;
    }
  }
  await pg.barrier();
}

async function suiteOverlap(): Promise<void> {
  // 1. Not awaited: the rank computes while a 16 MiB all-reduce runs; the result is right afterwards.
  const n = 4 << 20;
  const all = inputs("float32", "sum", n, 500);
  const out = all[me].slice();
  const work = pg.allReduce(out);
  let turns = 0;
  let acc = 0;
  while (!work.completed) {
    for (let i = 0; i < 20_000; i++) acc += Math.sqrt(i);
    turns++;
    await new Promise((r) => setTimeout(r, 0));
  }
  await work;
  checkReduced("allReduce while computing", "float32", "sum", all, out);
  result.notes.computeTurns = turns;
  result.notes.acc = acc > 0;
  // 2. Several calls in flight at once, awaited out of order.
  const seeds = [501, 502, 503];
  const many = seeds.map((s) => inputs("int32", "sum", 1000 + s, s));
  const outs = many.map((a) => a[me].slice());
  const works = outs.map((o) => pg.allReduce(o));
  await works[2];
  await works[0];
  await works[1];
  outs.forEach((o, j) => checkReduced(`allReduce in flight #${j}`, "int32", "sum", many[j], o));
  // 3. The event loop keeps turning while rank 0 waits for late peers.
  const late = 400;
  if (me !== 0) await new Promise((r) => setTimeout(r, late));
  let ticks = 0;
  const timer = setInterval(() => ticks++, 5);
  const t0 = performance.now();
  const w = pg.allReduce(new Float64Array([me]));
  const wasDone = w.completed;
  await w;
  const waited = performance.now() - t0;
  clearInterval(timer);
  if (me === 0) {
    result.notes.lateWaitMs = Math.round(waited);
    result.notes.lateTicks = ticks;
    if (wasDone) fail("late peers", "completed before the peers joined");
    // A blocked event loop would give 0 ticks; allow for a loaded machine.
    if (waited > late / 2 && ticks < 5) {
      fail("late peers", `only ${ticks} timer ticks in ${Math.round(waited)} ms`);
    }
  }
  result.ran += 5;
}

function expectThrow(
  name: string,
  kind: ErrorConstructor | typeof UnsupportedError,
  fn: () => unknown,
): void {
  try {
    fn();
    fail(name, `expected ${kind.name}, nothing was thrown`);
  } catch (e) {
    if (!(e instanceof kind)) fail(name, `expected ${kind.name}, found ${e}`);
  }
  result.ran++;
}

async function suiteArgs(): Promise<void> {
  const f32 = new Float32Array(4);
  expectThrow("Int16Array", TypeError, () => pg.allReduce(new Int16Array(4) as unknown as Float32Array));
  expectThrow("Uint16Array without dtype", TypeError, () => pg.allReduce(new Uint16Array(4)));
  expectThrow("unknown op", TypeError, () => pg.allReduce(f32, { op: "xor" as ReduceOp }));
  expectThrow("dtype mismatch", TypeError, () => pg.allReduce(f32, { dtype: "float64" }));
  expectThrow("not a tensor", TypeError, () => pg.allReduce([1, 2] as unknown as Float32Array));
  expectThrow("root = size", RangeError, () => pg.broadcast(f32, { root: size }));
  expectThrow("root -1", RangeError, () => pg.reduce(f32, { root: -1 }));
  expectThrow("root 0.5", RangeError, () => pg.broadcast(f32, { root: 0.5 }));
  expectThrow("allGather length", RangeError, () => pg.allGather(new Float32Array(4 * size + 1), f32));
  expectThrow("allGather dtypes", TypeError, () => pg.allGather(new Float64Array(4 * size), f32));
  expectThrow(
    "reduceScatter length",
    RangeError,
    () => pg.reduceScatter(f32, new Float32Array(4 * size - 1)),
  );
  expectThrow(
    "allToAll length",
    RangeError,
    () => pg.allToAll(new Float32Array(size), new Float32Array(size + 1)),
  );
  expectThrow("send to self", RangeError, () => pg.send(f32, me));
  expectThrow("recv from size", RangeError, () => pg.recv(f32, size));
  expectThrow("timeoutMs 0", RangeError, () => pg.allReduce(f32, { timeoutMs: 0 }));
  expectThrow("timeoutMs -5", RangeError, () => pg.barrier({ timeoutMs: -5 }));
  expectThrow("algorithm ring", UnsupportedError, () => pg.allReduce(f32, { algorithm: "ring" }));
  expectThrow(
    "resizable buffer",
    TypeError,
    () => pg.allReduce(new Float32Array(new ArrayBuffer(16, { maxByteLength: 64 }))),
  );
  for (const [name, ranks] of [["empty", []], ["duplicate", [0, 0]], ["out of range", [size]]] as const) {
    await assert.rejects(() => pg.newGroup(ranks), RangeError, `newGroup ${name}`);
    result.ran++;
  }
  const aborted = AbortSignal.abort("stop");
  await assert.rejects(async () => await pg.allReduce(f32, { signal: aborted }), DistError);
  result.ran++;
  // Nothing above reached MPI: the next collective still matches across ranks.
  const all = inputs("int32", "sum", 8, 600);
  const out = all[me].slice();
  await pg.allReduce(out);
  checkReduced("allReduce after bad arguments", "int32", "sum", all, out);
  result.ran++;
}

async function suiteTimeout(): Promise<void> {
  // A receive nobody sends to: cancelled, and the group goes on.
  if (me === 0) {
    const t0 = performance.now();
    await assert.rejects(() => pg.recv(new Int32Array(4), 1, { timeoutMs: 300 }).wait(), TimeoutError);
    result.notes.recvTimeoutMs = Math.round(performance.now() - t0);
  }
  result.ran++;
  const all = inputs("float64", "sum", 4, 700);
  const out = all[me].slice();
  await pg.allReduce(out);
  checkReduced("allReduce after a cancelled recv", "float64", "sum", all, out);
  result.ran++;
  // A collective only rank 0 enters: it times out and the backend stops.
  if (me === 0) {
    await assert.rejects(() => pg.barrier({ timeoutMs: 300 }).wait(), TimeoutError);
    await assert.rejects(
      () => pg.allReduce(new Float32Array(1)).wait(),
      (e: unknown) => e instanceof DistError && e.code === "MPI_BROKEN",
    );
    // This rank will exit without MPI_Finalize (a broken backend skips it). If it went while rank 1 were
    // still finalising, mpiexec would kill rank 1 (exit 9): give rank 1, which is done, time to leave.
    await new Promise((resolve) => setTimeout(resolve, 3000));
  }
  result.ran++;
}

async function suiteCompare(): Promise<void> {
  await collectives(pg, [33], true);
}

const suites: Record<string, () => Promise<void>> = {
  collectives: suiteCollectives,
  groups: suiteGroups,
  p2p: suiteP2p,
  overlap: suiteOverlap,
  args: suiteArgs,
  timeout: suiteTimeout,
  compare: suiteCompare,
};

try {
  const run = suites[suite];
  if (!run) throw new Error(`Unknown suite ${suite}: expected one of ${Object.keys(suites).join(", ")}`);
  await run();
} catch (e) {
  fail(suite, `threw ${e instanceof Error ? e.stack : e}`);
}
console.log("RESULT " + JSON.stringify(result));
await pg.close();
