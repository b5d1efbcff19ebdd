/**
 * One rank of `deno task bench:objects` (started by bench/objects.ts under dcomm's launcher): the latency of
 * the object collectives (`broadcastObject`, `allGatherObject`, `gatherObject`, `scatterObject`) for each
 * object size, beside the same collective of a tensor holding as many bytes as the object serialises to
 * (what the object path adds: serialising, the lengths' round, deserialising). Each call runs after a
 * barrier and is timed alone; a call's time is the slowest rank's; a row gives the median and the fastest of
 * `iters` calls after `warmup` untimed ones. Every result is checked against the objects the ranks sent
 * (outside the timing): `#wrong` counts the calls, summed over ranks, whose result differs. Rank 0 prints
 * the table and a `RESULTS` line of the JSON rows ({@linkcode ObjectRow}).
 *
 * @module
 */
import { serialize } from "node:v8";
import { init } from "../backend/init.ts";
import type { ProcessGroup } from "../backend/process_group.ts";

/** What bench/objects.ts hands each rank, as JSON on its command line. */
export interface ObjectsConfig {
  /** Object sizes, in serialised bytes ({@linkcode makeObject}). */
  sizes: number[];
  /** Timed calls per collective and size. */
  iters: number;
  /** Untimed calls before them. */
  warmup: number;
  /** The root of the rooted ones. */
  root: number;
}

/** One row of `bench/results/objects.json`. */
export interface ObjectRow {
  /** The call: `broadcastObject`, `allGatherObject`, `gatherObject` or `scatterObject`. */
  call: string;
  /** The world size. */
  ranks: number;
  /** The group's transport. */
  transport: string;
  /** The root (-1 for allGatherObject). */
  root: number;
  /** The size asked for, in bytes. */
  targetBytes: number;
  /** The bytes one rank's object serialises to (structured clone). */
  objectBytes: number;
  /** Timed calls. */
  calls: number;
  /** The median call's microseconds (each call: the slowest rank's). */
  medianUs: number;
  /** The fastest call's. */
  minUs: number;
  /** The median of the same collective on a Uint8Array of `objectBytes` per rank. */
  tensorMedianUs: number;
  /** Calls whose result was not what the ranks sent, summed over ranks. */
  wrong: number;
}

/**
 * The object a rank sends: a plain object with a string and a Float32Array, `bytes` serialised (the string
 * padded to the last byte, bar the array's alignment on some sizes: up to 3 more; 1 KiB and 1 MiB are exact;
 * a size below the empty object's gives that).
 */
export function makeObject(rank: number, bytes: number): Record<string, unknown> {
  const note = `rank ${rank}: eval metrics`;
  const empty = serialize({ rank, step: 1000 + rank, note, values: new Float32Array(0) }).byteLength;
  const values = new Float32Array(Math.max(0, Math.floor((bytes - empty) / 4)));
  for (let j = 0; j < values.length; j++) values[j] = (j + 5 * rank) % 13;
  let object = { rank, step: 1000 + rank, note, values };
  // A few more characters fill the rest (a length's varint or the array's alignment may take one more).
  for (let pad = 0; pad < 8; pad++) {
    const missing = bytes - serialize(object).byteLength;
    if (missing <= 0) break;
    object = { ...object, note: object.note + ".".repeat(missing) };
  }
  return object;
}

/** Whether `got` equals `want` (an object of {@linkcode makeObject}), element for element. */
export function same(got: unknown, want: Record<string, unknown>): boolean {
  const o = got as Record<string, unknown> | null;
  if (o === null || typeof o !== "object") return false;
  if (o.rank !== want.rank || o.step !== want.step || o.note !== want.note) return false;
  const a = o.values, b = want.values as Float32Array;
  if (!(a instanceof Float32Array) || a.length !== b.length) return false;
  for (let j = 0; j < a.length; j++) if (a[j] !== b[j]) return false;
  return true;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** One object collective at one size: a call, and whether its result is right on this rank. */
interface Case {
  call: string;
  rooted: boolean;
  /** One call of the object collective. */
  object(): Promise<unknown>;
  /** Whether a result is right on this rank. */
  check(result: unknown): boolean;
  /** One call of the same collective on a tensor of as many bytes. */
  tensor(): PromiseLike<unknown>;
}

function cases(pg: ProcessGroup, bytes: number, root: number): Case[] {
  const n = pg.size, me = pg.rank, mine = me === root;
  // What is sent, made before the calls (not timed), apart from what the results are checked against.
  const object = makeObject(me, bytes);
  const rootObject = mine ? makeObject(root, bytes) : null;
  const shards = mine ? Array.from({ length: n }, (_, r) => makeObject(r, bytes)) : null;
  const want = Array.from({ length: n }, (_, r) => makeObject(r, bytes));
  const everyRank = (got: unknown): boolean =>
    Array.isArray(got) && got.length === n && want.every((w, r) => same(got[r], w));
  const len = serialize(object).byteLength;
  const block = new Uint8Array(len), whole = new Uint8Array(len * n);
  return [
    {
      call: "broadcastObject",
      rooted: true,
      object: () => pg.broadcastObject(rootObject, { root }),
      check: (got) => same(got, want[root]),
      tensor: () => pg.broadcast(block, { root }),
    },
    {
      call: "allGatherObject",
      rooted: false,
      object: () => pg.allGatherObject(object),
      check: everyRank,
      tensor: () => pg.allGather(whole, block),
    },
    {
      call: "gatherObject",
      rooted: true,
      object: () => pg.gatherObject(object, { root }),
      check: (got) => mine ? everyRank(got) : got === null,
      tensor: () => pg.gather(mine ? whole : null, block, { root }),
    },
    {
      call: "scatterObject",
      rooted: true,
      object: () => pg.scatterObject(shards, { root }),
      check: (got) => same(got, want[me]),
      tensor: () => pg.scatter(block, mine ? whole : null, { root }),
    },
  ];
}

/** Microseconds of each of `iters` calls, each after a barrier, the slowest rank's; and wrong results. */
async function timeCalls(
  pg: ProcessGroup,
  iters: number,
  warmup: number,
  call: () => PromiseLike<unknown>,
  check?: (result: unknown) => boolean,
): Promise<{ us: number[]; wrong: number }> {
  let wrong = 0;
  for (let i = 0; i < warmup; i++) if (check && !check(await call())) wrong++;
  const times = new Float64Array(iters);
  for (let i = 0; i < iters; i++) {
    await pg.barrier();
    const t0 = performance.now();
    const result = await call();
    times[i] = (performance.now() - t0) * 1000;
    if (check && !check(result)) wrong++;
  }
  await pg.allReduce(times, { op: "max" });
  const total = new Float64Array([wrong]);
  await pg.allReduce(total, { op: "sum" });
  return { us: [...times], wrong: total[0] };
}

/** Runs every case at every size on this rank; returns the rows (the same on every rank). */
export async function run(pg: ProcessGroup, config: ObjectsConfig): Promise<ObjectRow[]> {
  const transport = (pg as { transport?: string }).transport ?? pg.backend;
  const rows: ObjectRow[] = [];
  for (const bytes of config.sizes) {
    for (const c of cases(pg, bytes, config.root)) {
      const objects = await timeCalls(pg, config.iters, config.warmup, c.object, c.check);
      const tensors = await timeCalls(pg, config.iters, config.warmup, c.tensor);
      rows.push({
        call: c.call,
        ranks: pg.size,
        transport,
        root: c.rooted ? config.root : -1,
        targetBytes: bytes,
        objectBytes: serialize(makeObject(pg.rank, bytes)).byteLength,
        calls: config.iters,
        medianUs: median(objects.us),
        minUs: Math.min(...objects.us),
        tensorMedianUs: median(tensors.us),
        wrong: objects.wrong,
      });
    }
  }
  return rows;
}

/** The table's header line. */
export function header(): string {
  return "#            call   ranks  root    object B   median us   fastest us   tensor us   object/tensor  #wrong";
}

/** One line of the table. */
export function line(r: ObjectRow): string {
  return [
    r.call.padStart(17),
    String(r.ranks).padStart(7),
    String(r.root).padStart(5),
    String(r.objectBytes).padStart(11),
    r.medianUs.toFixed(1).padStart(11),
    r.minUs.toFixed(1).padStart(12),
    r.tensorMedianUs.toFixed(1).padStart(11),
    `${(r.medianUs / r.tensorMedianUs).toFixed(2)}×`.padStart(15),
    String(r.wrong).padStart(7),
  ].join(" ");
}

if (import.meta.main) {
  const config = JSON.parse(Deno.args[0]) as ObjectsConfig;
  await using pg = await init();
  const rows = await run(pg, config);
  if (pg.rank === 0) {
    console.log(
      `# object collectives on ${pg.size} ranks (${
        rows[0]?.transport
      }): median and fastest of ${config.iters} ` +
        `calls, each after a barrier, the slowest rank's; tensor: the same collective of as many bytes`,
    );
    console.log(header());
    for (const r of rows) console.log(line(r));
    console.log("RESULTS " + JSON.stringify(rows));
  }
  if (rows.some((r) => r.wrong > 0)) Deno.exitCode = 1;
}
