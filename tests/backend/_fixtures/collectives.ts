/**
 * A rank's side of the backend correctness tests: runs a list of seeded cases (every collective ×
 * algorithm × count × dtype × op the profile names), checks each result against the formula in
 * `../_reference.ts`, and returns what went wrong plus a hash of every result so the test can check that
 * all ranks got the same bits. Runs as a thread (`main`) or as a launched process (prints `RESULT {json}`).
 *
 * @module
 */
import { type DType, DTYPES, type ReduceOp, reduceOpsFor } from "../../../core/dtype.ts";
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { ALGORITHMS as ALL_ALGORITHMS, UNEVEN_ALGORITHMS } from "../../../collectives/mod.ts";
import { checkReduction, hashBytes, input, makeArray, rankFactor } from "../_reference.ts";

/** One seeded call. */
export interface Case {
  id: number;
  collective:
    | "allReduce"
    | "broadcast"
    | "reduce"
    | "allGather"
    | "reduceScatter"
    | "allToAll"
    | "barrier"
    | "gather"
    | "scatter"
    | "allGatherv"
    | "reduceScatterv"
    | "gatherv"
    | "scatterv"
    | "allToAllv"
    | "sendrecv";
  algorithm: string;
  dtype: DType;
  op: ReduceOp;
  count: number;
  root: number;
  servers?: number;
}

/** What a rank reports. */
export interface RankResult {
  rank: number;
  ran: number;
  failures: string[];
  hashes: Record<number, string>;
  algorithms: Record<string, number>;
}

/**
 * The cases of a profile for a world of `size` ranks: `"sweep"` adds every dtype × op of allReduce (the
 * ops that apply to the dtype: bitwise ones of integers and bools, premulSum of floats),
 * `"big"` adds calls of about a million elements; `"sweep,big"` both. The `"segment"` algorithms join
 * only where the ranks share a host segment (`segment`).
 */
export function cases(size: number, profile: string, segment = false): Case[] {
  const ALGORITHMS = available(segment);
  const sweep = profile.includes("sweep");
  const withBig = profile.includes("big");
  const out: Case[] = [];
  let id = 0;
  const add = (c: Omit<Case, "id">): void => {
    out.push({ id: id++, ...c });
  };
  const counts = [0, 1, 7, 1024];
  const big = 1_000_003;
  const roots = [...new Set([0, size - 1])];
  // allReduce: every dtype × op through "auto"; every algorithm with a few dtype/op pairs; one big tensor
  // per algorithm.
  for (const count of counts) {
    if (sweep) {
      for (const dtype of DTYPES) {
        for (const op of reduceOpsFor(dtype)) {
          add({ collective: "allReduce", algorithm: "auto", dtype, op, count, root: 0 });
        }
      }
    }
    for (const algorithm of ALGORITHMS.allReduce) {
      for (
        const [dtype, op] of [
          ["float32", "sum"],
          ["int32", "max"],
          ["bfloat16", "avg"],
          ["uint32", "bxor"],
          ["bool", "sum"],
          ["float32", "premulSum"],
        ] as const
      ) {
        add({ collective: "allReduce", algorithm, dtype, op, count, root: 0 });
      }
    }
    add({ collective: "allReduce", algorithm: "ps", dtype: "int64", op: "sum", count, root: 0, servers: 1 });
  }
  if (withBig) {
    for (const algorithm of ALGORITHMS.allReduce) {
      add({ collective: "allReduce", algorithm, dtype: "float32", op: "sum", count: big, root: 0 });
    }
    add({ collective: "allReduce", algorithm: "auto", dtype: "int32", op: "sum", count: big, root: 0 });
  }
  for (const count of withBig ? [...counts, big] : counts) {
    for (const algorithm of ALGORITHMS.broadcast) {
      for (const root of roots) {
        for (const dtype of ["int8", "float16", "float64"] as const) {
          if (count === big && dtype !== "float64") continue;
          add({ collective: "broadcast", algorithm, dtype, op: "sum", count, root });
        }
      }
    }
    for (const root of roots) {
      for (
        const [dtype, op] of [
          ["float32", "sum"],
          ["uint8", "prod"],
          ["int64", "min"],
          ["float16", "avg"],
          ["int64", "band"],
          ["bool", "prod"],
          ["float64", "premulSum"],
          ["float16", "premulSum"],
        ] as const
      ) {
        if (count === big && dtype !== "float32") continue;
        for (const algorithm of ALGORITHMS.reduce) {
          add({ collective: "reduce", algorithm, dtype, op, count, root });
        }
      }
    }
    const block = count === big ? Math.ceil(big / size) | 1 : count;
    for (const algorithm of ALGORITHMS.allGather) {
      for (const dtype of ["uint8", "int64", "float32"] as const) {
        if (count === big && dtype !== "float32") continue;
        add({ collective: "allGather", algorithm, dtype, op: "sum", count: block, root: 0 });
      }
    }
    for (const algorithm of ALGORITHMS.reduceScatter) {
      for (
        const [dtype, op] of [
          ["float32", "sum"],
          ["int32", "avg"],
          ["float16", "max"],
          ["uint64", "prod"],
          ["int8", "bor"],
          ["bool", "bxor"],
          ["float16", "premulSum"],
        ] as const
      ) {
        if (count === big && dtype !== "float32") continue;
        add({ collective: "reduceScatter", algorithm, dtype, op, count: block, root: 0 });
      }
    }
    for (const dtype of ["int32", "float64"] as const) {
      if (count === big && dtype !== "float64") continue;
      for (const algorithm of ALGORITHMS.allToAll) {
        add({ collective: "allToAll", algorithm, dtype, op: "sum", count: block, root: 0 });
      }
    }
    for (const collective of ["gather", "scatter"] as const) {
      for (const algorithm of ALGORITHMS[collective]) {
        for (const root of roots) {
          for (const dtype of ["int8", "float32"] as const) {
            if (count === big && dtype !== "float32") continue;
            add({ collective, algorithm, dtype, op: "sum", count: block, root });
          }
        }
      }
    }
    // The v-forms: every rank's block its own length (zeros among them), by "auto" and by each algorithm
    // that takes uneven blocks.
    for (const collective of ["allGatherv", "reduceScatterv", "gatherv", "scatterv", "allToAllv"] as const) {
      const base = collective.slice(0, -1) as
        | "allGather"
        | "reduceScatter"
        | "gather"
        | "scatter"
        | "allToAll";
      for (const algorithm of ["auto", ...UNEVEN_ALGORITHMS[base]]) {
        for (const root of base === "gather" || base === "scatter" ? roots : [0]) {
          if (count === big && algorithm !== "auto") continue;
          const op = collective === "reduceScatterv" ? "sum" : "sum";
          add({ collective, algorithm, dtype: count === big ? "float32" : "int32", op, count: block, root });
        }
      }
    }
    for (const dtype of ["uint32", "bfloat16"] as const) {
      if (count === big && dtype !== "uint32") continue;
      add({ collective: "sendrecv", algorithm: "", dtype, op: "sum", count, root: 0 });
    }
  }
  for (const algorithm of ALGORITHMS.barrier) {
    add({ collective: "barrier", algorithm, dtype: "uint8", op: "sum", count: 0, root: 0 });
  }
  return out;
}

/** Every algorithm of every collective, without `"segment"` where there is no segment. */
function available(segment: boolean): { [C in keyof typeof ALL_ALGORITHMS]: readonly string[] } {
  const drop = (names: readonly string[]): readonly string[] =>
    segment ? names : names.filter((n) => n !== "segment");
  return {
    allReduce: drop(ALL_ALGORITHMS.allReduce),
    allGather: drop(ALL_ALGORITHMS.allGather),
    reduceScatter: drop(ALL_ALGORITHMS.reduceScatter),
    broadcast: drop(ALL_ALGORITHMS.broadcast),
    reduce: drop(ALL_ALGORITHMS.reduce),
    allToAll: drop(ALL_ALGORITHMS.allToAll),
    barrier: drop(ALL_ALGORITHMS.barrier),
    gather: drop(ALL_ALGORITHMS.gather),
    scatter: drop(ALL_ALGORITHMS.scatter),
  };
}

function concat(dtype: DType, parts: readonly ArrayLike<unknown>[], each: number): ArrayBufferView {
  const out = makeArray(dtype, parts.length * each);
  parts.forEach((p, r) =>
    (out as unknown as { set(a: ArrayLike<unknown>, o: number): void }).set(p, r * each)
  );
  return out;
}

/**
 * A v-form case's counts, the same on every rank: rank r's block of about `count` elements (0 to 2·count,
 * a zero among them when there are 3 ranks or more).
 */
export function unevenCounts(id: number, size: number, count: number): number[] {
  return Array.from(
    { length: size },
    (_, r) => r === 1 && size > 2 ? 0 : (id * 7 + r * 13) % (2 * count + 1),
  );
}

/** An uneven all-to-all's counts: `send[i][j]` elements from rank i to rank j. */
export function unevenMatrix(id: number, size: number, count: number): number[][] {
  return Array.from(
    { length: size },
    (_, i) =>
      Array.from(
        { length: size },
        (_, j) => (i + j) % 3 === 1 ? 0 : (id * 5 + i * 11 + j * 3) % (2 * count + 1),
      ),
  );
}

/** Concatenates views of one dtype. */
function joined(dtype: DType, parts: readonly ArrayBufferView[]): ArrayBufferView {
  const total = parts.reduce((a, p) => a + (p as unknown as { length: number }).length, 0);
  const out = makeArray(dtype, total);
  let at = 0;
  for (const p of parts) {
    (out as unknown as { set(a: ArrayLike<unknown>, o: number): void }).set(
      p as unknown as ArrayLike<unknown>,
      at,
    );
    at += (p as unknown as { length: number }).length;
  }
  return out;
}

function sameBits(a: ArrayBufferView, b: ArrayBufferView): number {
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (x.length !== y.length) return 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

/** Runs the profile's cases on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<RankResult> {
  const { profile = "" } = (ctx.args ?? {}) as { profile?: string };
  const size = pg.size;
  const me = pg.rank;
  const result: RankResult = { rank: me, ran: 0, failures: [], hashes: {}, algorithms: {} };
  const all = (c: Case, n: number) =>
    Array.from({ length: size }, (_, r) => input(c.dtype, c.op, n, c.id, r));
  // The ranks share a host segment when they run over shared memory (unless it was turned off).
  const segment = (pg as { transport?: string }).transport === "shm" && Deno.env.get("DCOMM_SEGMENT") !== "0";
  for (const c of cases(size, profile, segment)) {
    const name = `#${c.id} ${c.collective}(${c.count} × ${c.dtype}, ${c.op}, ${
      c.algorithm || "p2p"
    }, root ${c.root})`;
    const fail = (what: string): void => {
      result.failures.push(`rank ${me}: ${name}: ${what}`);
    };
    const opts = { dtype: c.dtype, algorithm: c.algorithm || undefined };
    // premulSum: each rank its own factor (a weighted sum), as checkReduction expects.
    const factor = c.op === "premulSum" ? rankFactor(me) : undefined;
    let lastAlgorithm: string | undefined;
    let out;
    const t0 = performance.now();
    switch (c.collective) {
      case "allReduce": {
        const inputs = all(c, c.count);
        out = inputs[me].slice();
        const report = await pg.allReduce(out, { ...opts, op: c.op, factor, servers: c.servers }).wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        const bad = checkReduction(c.dtype, c.op, inputs, out);
        if (bad) fail(`element ${bad.index}: expected ${bad.expected}, got ${bad.got}`);
        break;
      }
      case "broadcast": {
        const want = input(c.dtype, c.op, c.count, c.id, c.root);
        out = me === c.root ? want.slice() : input(c.dtype, c.op, c.count, c.id + 77, me);
        await pg.broadcast(out, { ...opts, root: c.root });
        const i = sameBits(out, want);
        if (i >= 0) fail(`byte ${i} differs from the root's`);
        break;
      }
      case "reduce": {
        const inputs = all(c, c.count);
        out = inputs[me].slice();
        const report = await pg.reduce(out, { ...opts, op: c.op, factor, root: c.root }).wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        if (me === c.root) {
          const bad = checkReduction(c.dtype, c.op, inputs, out);
          if (bad) fail(`element ${bad.index}: expected ${bad.expected}, got ${bad.got}`);
        } else if (sameBits(out, inputs[me]) >= 0) fail("a non-root tensor changed");
        break;
      }
      case "allGather": {
        const inputs = all(c, c.count);
        out = makeArray(c.dtype, c.count * size);
        await pg.allGather(out, inputs[me], opts);
        const i = sameBits(out, concat(c.dtype, inputs, c.count));
        if (i >= 0) fail(`byte ${i} differs from the concatenation`);
        break;
      }
      case "reduceScatter": {
        const inputs = all(c, c.count * size);
        out = makeArray(c.dtype, c.count);
        const before = inputs[me].slice();
        await pg.reduceScatter(out, inputs[me], { ...opts, op: c.op, factor });
        if (sameBits(inputs[me], before) >= 0) fail("the input changed");
        const bad = checkReduction(c.dtype, c.op, inputs, out, me * c.count);
        if (bad) fail(`element ${bad.index}: expected ${bad.expected}, got ${bad.got}`);
        break;
      }
      case "allToAll": {
        const inputs = all(c, c.count * size);
        out = makeArray(c.dtype, c.count * size);
        await pg.allToAll(out, inputs[me], opts);
        const blocks = inputs.map((a) => a.subarray(me * c.count, (me + 1) * c.count));
        const i = sameBits(out, concat(c.dtype, blocks, c.count));
        if (i >= 0) fail(`byte ${i} differs from the expected blocks`);
        break;
      }
      case "gather": {
        const inputs = all(c, c.count);
        const root = me === c.root;
        const before = inputs[me].slice();
        out = root ? makeArray(c.dtype, c.count * size) : undefined;
        const report = await pg.gather(out ?? null, inputs[me], { ...opts, root: c.root }).wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        if (out) {
          const i = sameBits(out, concat(c.dtype, inputs, c.count));
          if (i >= 0) fail(`byte ${i} differs from the concatenation`);
        }
        if (sameBits(inputs[me], before) >= 0) fail("the input changed");
        break;
      }
      case "scatter": {
        const inputs = all(c, c.count * size);
        out = makeArray(c.dtype, c.count);
        const report = await pg.scatter(out, me === c.root ? inputs[me] : null, { ...opts, root: c.root })
          .wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        const i = sameBits(out, inputs[c.root].subarray(me * c.count, (me + 1) * c.count));
        if (i >= 0) fail(`byte ${i} differs from block ${me} of the root's input`);
        break;
      }
      case "allGatherv":
      case "gatherv": {
        const counts = unevenCounts(c.id, size, c.count);
        const inputs = counts.map((n, r) => input(c.dtype, c.op, n, c.id, r));
        const total = counts.reduce((a, b) => a + b, 0);
        const root = c.collective === "allGatherv" || me === c.root;
        out = root ? makeArray(c.dtype, total) : undefined;
        const options = { ...opts, counts, root: c.root };
        const report = c.collective === "allGatherv"
          ? await pg.allGather(out as ArrayBufferView as never, inputs[me], options).wait()
          : await pg.gather(out ?? null, inputs[me], options).wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        if (out) {
          const i = sameBits(out, joined(c.dtype, inputs));
          if (i >= 0) fail(`byte ${i} differs from the concatenation (counts ${counts})`);
        }
        break;
      }
      case "scatterv": {
        const counts = unevenCounts(c.id, size, c.count);
        const total = counts.reduce((a, b) => a + b, 0);
        const all = input(c.dtype, c.op, total, c.id, c.root);
        out = makeArray(c.dtype, counts[me]);
        const at = counts.slice(0, me).reduce((a, b) => a + b, 0);
        const report = await pg.scatter(out, me === c.root ? all : null, { ...opts, counts, root: c.root })
          .wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        const i = sameBits(out, all.subarray(at, at + counts[me]));
        if (i >= 0) fail(`byte ${i} differs from block ${me} of the root's input (counts ${counts})`);
        break;
      }
      case "reduceScatterv": {
        const counts = unevenCounts(c.id, size, c.count);
        const total = counts.reduce((a, b) => a + b, 0);
        const inputs = all(c, total);
        out = makeArray(c.dtype, counts[me]);
        const at = counts.slice(0, me).reduce((a, b) => a + b, 0);
        const report = await pg.reduceScatter(out, inputs[me], { ...opts, op: c.op, counts }).wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        const bad = checkReduction(c.dtype, c.op, inputs, out, at);
        if (bad) fail(`element ${bad.index}: expected ${bad.expected}, got ${bad.got} (counts ${counts})`);
        break;
      }
      case "allToAllv": {
        const m = unevenMatrix(c.id, size, c.count);
        const sendCounts = m[me], recvCounts = m.map((row) => row[me]);
        // Rank i's input: its block for rank j is input(…, seed id + 100·j, rank i).
        const blockFrom = (i: number, j: number) => input(c.dtype, c.op, m[i][j], c.id + 100 * j, i);
        const mine = joined(c.dtype, sendCounts.map((_, j) => blockFrom(me, j)));
        out = makeArray(c.dtype, recvCounts.reduce((a, b) => a + b, 0));
        const report = await pg.allToAll(out as never, mine as never, { ...opts, sendCounts, recvCounts })
          .wait();
        if (report) result.algorithms[report.algorithm] = (result.algorithms[report.algorithm] ?? 0) + 1;
        lastAlgorithm = report?.algorithm;
        const i = sameBits(out, joined(c.dtype, recvCounts.map((_, from) => blockFrom(from, me))));
        if (i >= 0) fail(`byte ${i} differs from the expected blocks (counts ${JSON.stringify(m)})`);
        break;
      }
      case "barrier":
        await pg.barrier();
        break;
      case "sendrecv": {
        if (size === 1) break;
        const next = (me + 1) % size;
        const prev = (me + size - 1) % size;
        const mine = input(c.dtype, c.op, c.count, c.id, me);
        out = makeArray(c.dtype, c.count);
        await Promise.all([pg.send(mine, next, opts), pg.recv(out, prev, opts)]);
        const i = sameBits(out, input(c.dtype, c.op, c.count, c.id, prev));
        if (i >= 0) fail(`byte ${i} differs from what rank ${prev} sent`);
        break;
      }
    }
    if (Deno.env.get("DCOMM_TRACE_CASES") && me === 0) console.log(name, Math.round(performance.now() - t0));
    // The v-forms through "auto": the host segment's plans where the ranks share one (but the uneven
    // all-to-all, which no rank could plan alone), messages elsewhere.
    if (c.collective.endsWith("v") && c.algorithm === "auto" && size > 1) {
      const onSegment = (lastAlgorithm ?? "") === "segment";
      if (onSegment !== (segment && c.collective !== "allToAllv")) fail(`ran ${lastAlgorithm}`);
    }
    // Results every rank must share bit for bit (the others are rank-specific by definition).
    if (out && ["allReduce", "broadcast", "allGather"].includes(c.collective)) {
      result.hashes[c.id] = hashBytes(out);
    }
    result.ran++;
  }
  return result;
}

if (import.meta.main) {
  const { init } = await import("../../../backend/init.ts");
  const pg = await init();
  const result = await main(pg, { args: { profile: Deno.args[0] ?? "" } });
  console.log("RESULT " + JSON.stringify(result));
  await pg.close();
}
