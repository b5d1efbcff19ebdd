/**
 * The test matrix every algorithm runs through: world sizes × element counts × dtypes × ops, each run on
 * a fresh {@linkcode runWorld} with seeded inputs, checked against a sequential reference computed here.
 *
 * @module
 */
import type { CollectiveContext } from "../../collectives/comm.ts";
import {
  assertBytesEqual,
  assertReduced,
  assertSameBits,
  bytes,
  copyBytes,
  COUNTS,
  ELEM_SIZE,
  newArray,
  randomInputs,
  runWorld,
  SIZES,
  type TestArray,
  type TestDType,
  type TestOp,
  type WorldOptions,
} from "./_harness.ts";

/** A dtype and op pair. */
export interface Flavor {
  /** The element type. */
  dtype: TestDType;
  /** The reduction. */
  op: TestOp;
}

/** Two flavors, for the runs that repeat the matrix under another delivery mode. */
export const FEW_FLAVORS: readonly Flavor[] = [{ dtype: "int32", op: "sum" }, {
  dtype: "float32",
  op: "sum",
}];

/** The dtype/op pairs reductions are tested with: exact int32 sum and max, float sums, a float max. */
export const FLAVORS: readonly Flavor[] = [
  { dtype: "int32", op: "sum" },
  { dtype: "int32", op: "max" },
  { dtype: "float32", op: "sum" },
  { dtype: "float64", op: "sum" },
  { dtype: "float32", op: "max" },
];

/** Which combinations to run. */
export interface Matrix {
  /** @default SIZES */
  sizes?: readonly number[];
  /** @default COUNTS */
  counts?: readonly number[];
  /** @default FLAVORS */
  flavors?: readonly Flavor[];
  /**
   * The context's chunk size for counts below 16 elements: 12 bytes is 3 int32/float32 or, rounded down
   * to a whole element, 1 float64, so that even 7 elements split unevenly.
   * @default 12
   */
  smallChunkBytes?: number;
  /** The context's chunk size for counts of 16 elements and more. @default 64 */
  chunkBytes?: number;
  /** @default "rendezvous" */
  delivery?: WorldOptions["delivery"];
  /** The host of each rank, given the world size (for the topology-aware algorithms). @default none */
  hosts?: (size: number) => readonly number[];
}

interface Case {
  size: number;
  count: number;
  flavor: Flavor;
  seed: number;
  what: string;
  world: WorldOptions;
}

function* cases(name: string, matrix: Matrix): Generator<Case> {
  const { sizes = SIZES, counts = COUNTS, flavors = FLAVORS, delivery } = matrix;
  let seed = 1;
  for (const size of sizes) {
    for (const count of counts) {
      const chunkBytes = count < 16 ? matrix.smallChunkBytes ?? 12 : matrix.chunkBytes ?? 64;
      for (const flavor of flavors) {
        seed++;
        yield {
          size,
          count,
          flavor,
          seed,
          what:
            `${name} n=${size} count=${count} ${flavor.dtype} ${flavor.op} chunk=${chunkBytes} seed=${seed}`,
          world: {
            size,
            dtype: flavor.dtype,
            op: flavor.op,
            chunkBytes,
            delivery,
            hosts: matrix.hosts?.(size),
          },
        };
      }
    }
  }
}

/** An all-reduce under test: in place on `buf`. */
export type AllReduceUnderTest = (ctx: CollectiveContext, buf: Uint8Array) => Promise<void>;

/** Runs an all-reduce over the matrix: every rank must hold the reduction, with the same bits. */
export async function checkAllReduce(
  name: string,
  fn: AllReduceUnderTest,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    const inputs = randomInputs({ dtype: c.flavor.dtype, count: c.count, size: c.size, seed: c.seed });
    const bufs = inputs.map(copyBytes);
    await runWorld(c.world, (ctx) => fn(ctx, bufs[ctx.comm.rank]));
    bufs.forEach((buf, r) => assertReduced(buf, inputs, { ...c.flavor, what: `${c.what} rank ${r}` }));
    assertSameBits(bufs, c.what);
  }
}

/** Runs a reduce-scatter over the matrix (count = elements per output block). */
export async function checkReduceScatter(
  name: string,
  fn: (ctx: CollectiveContext, input: Uint8Array, output: Uint8Array) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    const inputs = randomInputs({
      dtype: c.flavor.dtype,
      count: c.count * c.size,
      size: c.size,
      seed: c.seed,
    });
    const originals = inputs.map(copyBytes);
    const outputs = inputs.map(() => bytes(newArray(c.flavor.dtype, c.count)));
    await runWorld(c.world, (ctx) => fn(ctx, bytes(inputs[ctx.comm.rank]), outputs[ctx.comm.rank]));
    outputs.forEach((out, r) => {
      const blocks = inputs.map((a) => a.subarray(r * c.count, (r + 1) * c.count) as TestArray);
      assertReduced(out, blocks, { ...c.flavor, what: `${c.what} rank ${r}` });
      assertBytesEqual(bytes(inputs[r]), originals[r], `${c.what}: rank ${r}'s input changed`);
    });
  }
}

/** Runs an all-gather over the matrix (count = elements per input block). */
export async function checkAllGather(
  name: string,
  fn: (ctx: CollectiveContext, input: Uint8Array, output: Uint8Array) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    const inputs = randomInputs({ dtype: c.flavor.dtype, count: c.count, size: c.size, seed: c.seed });
    const want = new Uint8Array(c.count * c.size * ELEM_SIZE[c.flavor.dtype]);
    inputs.forEach((a, r) => want.set(bytes(a), r * a.byteLength));
    const outputs = inputs.map(() => bytes(newArray(c.flavor.dtype, c.count * c.size)));
    await runWorld(c.world, (ctx) => fn(ctx, bytes(inputs[ctx.comm.rank]), outputs[ctx.comm.rank]));
    outputs.forEach((out, r) => assertBytesEqual(out, want, `${c.what} rank ${r}`));
  }
}

/** Runs a broadcast from every root over the matrix. */
export async function checkBroadcast(
  name: string,
  fn: (ctx: CollectiveContext, buf: Uint8Array, root: number) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    for (let root = 0; root < c.size; root++) {
      const inputs = randomInputs({
        dtype: c.flavor.dtype,
        count: c.count,
        size: c.size,
        seed: c.seed + root,
      });
      const want = copyBytes(inputs[root]);
      const bufs = inputs.map(copyBytes);
      await runWorld(c.world, (ctx) => fn(ctx, bufs[ctx.comm.rank], root));
      bufs.forEach((buf, r) => assertBytesEqual(buf, want, `${c.what} root ${root} rank ${r}`));
    }
  }
}

/**
 * Runs a gather to every root over the matrix: the root's output is every input in rank order; no rank's
 * input changes; the other ranks are given no output.
 */
export async function checkGather(
  name: string,
  fn: (
    ctx: CollectiveContext,
    input: Uint8Array,
    output: Uint8Array | undefined,
    root: number,
  ) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    for (let root = 0; root < c.size; root++) {
      const inputs = randomInputs({
        dtype: c.flavor.dtype,
        count: c.count,
        size: c.size,
        seed: c.seed + root,
      });
      const kept = inputs.map(copyBytes);
      const want = new Uint8Array(c.count * c.size * ELEM_SIZE[c.flavor.dtype]);
      inputs.forEach((a, r) => want.set(bytes(a), r * a.byteLength));
      const output = bytes(newArray(c.flavor.dtype, c.count * c.size));
      await runWorld(
        c.world,
        (ctx) => fn(ctx, bytes(inputs[ctx.comm.rank]), ctx.comm.rank === root ? output : undefined, root),
      );
      assertBytesEqual(output, want, `${c.what} root ${root}`);
      inputs.forEach((a, r) =>
        assertBytesEqual(bytes(a), kept[r], `${c.what} root ${root} rank ${r}'s input`)
      );
    }
  }
}

/** Runs a scatter from every root over the matrix: rank r's output is block r of the root's input. */
export async function checkScatter(
  name: string,
  fn: (
    ctx: CollectiveContext,
    input: Uint8Array | undefined,
    output: Uint8Array,
    root: number,
  ) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    for (let root = 0; root < c.size; root++) {
      const [all] = randomInputs({
        dtype: c.flavor.dtype,
        count: c.count * c.size,
        size: 1,
        seed: c.seed + root,
      });
      const kept = copyBytes(all);
      const b = c.count * ELEM_SIZE[c.flavor.dtype];
      const outputs = Array.from({ length: c.size }, () => bytes(newArray(c.flavor.dtype, c.count)));
      await runWorld(
        c.world,
        (ctx) => fn(ctx, ctx.comm.rank === root ? bytes(all) : undefined, outputs[ctx.comm.rank], root),
      );
      outputs.forEach((out, r) =>
        assertBytesEqual(out, kept.subarray(r * b, (r + 1) * b), `${c.what} root ${root} rank ${r}`)
      );
      assertBytesEqual(bytes(all), kept, `${c.what} root ${root}: the root's input`);
    }
  }
}

/** Runs a reduce to every root over the matrix; non-root buffers must come back unchanged. */
export async function checkReduce(
  name: string,
  fn: (ctx: CollectiveContext, buf: Uint8Array, root: number) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    for (let root = 0; root < c.size; root++) {
      const inputs = randomInputs({
        dtype: c.flavor.dtype,
        count: c.count,
        size: c.size,
        seed: c.seed + root,
      });
      const bufs = inputs.map(copyBytes);
      await runWorld(c.world, (ctx) => fn(ctx, bufs[ctx.comm.rank], root));
      bufs.forEach((buf, r) => {
        if (r === root) assertReduced(buf, inputs, { ...c.flavor, what: `${c.what} root ${root}` });
        else assertBytesEqual(buf, bytes(inputs[r]), `${c.what} root ${root}: rank ${r}'s buffer changed`);
      });
    }
  }
}

/** Runs an all-to-all over the matrix (count = elements per block). */
export async function checkAllToAll(
  name: string,
  fn: (ctx: CollectiveContext, input: Uint8Array, output: Uint8Array) => Promise<void>,
  matrix: Matrix = {},
): Promise<void> {
  for (const c of cases(name, matrix)) {
    const inputs = randomInputs({
      dtype: c.flavor.dtype,
      count: c.count * c.size,
      size: c.size,
      seed: c.seed,
    });
    const outputs = inputs.map(() => bytes(newArray(c.flavor.dtype, c.count * c.size)));
    await runWorld(c.world, (ctx) => fn(ctx, bytes(inputs[ctx.comm.rank]), outputs[ctx.comm.rank]));
    const b = c.count * ELEM_SIZE[c.flavor.dtype];
    outputs.forEach((out, j) => {
      for (let i = 0; i < c.size; i++) {
        const want = bytes(inputs[i]).subarray(j * b, (j + 1) * b);
        assertBytesEqual(out.subarray(i * b, (i + 1) * b), want, `${c.what}: rank ${j} block ${i}`);
      }
    });
  }
}
