/**
 * The segment algorithms (`collectives/segment_*.ts`) and their pipeline, in one thread: every member of
 * a world has its buffers and counters in plain memory, and a seeded scheduler calls the members'
 * `progress()` in random order until all are done (the pipeline never waits, so any interleaving is one
 * a real world could run). Worlds of 1–8 members run sequences of calls back to back, so counters wrap
 * across calls and buffers are reused; half-way through some calls a member's pipeline is rebuilt from its
 * state, as a thread hands a call to another. Results are checked against a sequential reference.
 */
import assert from "node:assert/strict";
import {
  type SegmentContext,
  SegmentPipeline,
  type SegmentPlan,
  type SegmentState,
} from "../../collectives/segment_context.ts";
import { segmentAllReduce, segmentAllReducePooled } from "../../collectives/segment_allreduce.ts";
import { segmentBroadcast } from "../../collectives/segment_broadcast.ts";
import { segmentReduce } from "../../collectives/segment_reduce.ts";
import { segmentAllGather } from "../../collectives/segment_allgather.ts";
import { segmentReduceScatter } from "../../collectives/segment_reduce_scatter.ts";
import { segmentAllToAll } from "../../collectives/segment_alltoall.ts";
import { segmentGather } from "../../collectives/segment_gather.ts";
import { segmentScatter } from "../../collectives/segment_scatter.ts";
import { blocksOf } from "../../collectives/_blocks.ts";
import { segmentBarrier } from "../../collectives/segment_barrier.ts";
import {
  assertBytesEqual,
  assertReduced,
  assertSameBits,
  bytes,
  ELEM_SIZE,
  makeReducer,
  newArray,
  randomInputs,
  type Reducer,
  Rng,
  type TestArray,
  type TestDType,
  type TestOp,
} from "./_harness.ts";

type Counter = "called" | "posted" | "reduced" | "consumed";

/** Every member's buffers and counters, in plain memory. */
class World {
  readonly size: number;
  readonly buffers: number;
  readonly bufferBytes: number;
  readonly memory: Uint8Array[][];
  readonly counters: Record<Counter, number>[];
  readonly calls: string[][];
  /** Each member's tensor of the running call, for plans on pool tensors. */
  tensors: Uint8Array[] = [];

  constructor(size: number, buffers: number, bufferBytes: number, start: number) {
    this.size = size;
    this.buffers = buffers;
    this.bufferBytes = bufferBytes;
    this.memory = Array.from(
      { length: size },
      () => Array.from({ length: buffers }, () => new Uint8Array(bufferBytes)),
    );
    // Counters start near 2^31 so that they wrap during the tests.
    this.counters = Array.from(
      { length: size },
      () => ({ called: start, posted: start, reduced: start, consumed: start }),
    );
    this.calls = Array.from({ length: size }, () => []);
  }

  context(member: number, reducer: Reducer, elemSize: number, what: string): SegmentContext {
    const { memory, counters, calls } = this;
    const world = { size: this.size, memory, counters, calls, tensors: () => this.tensors };
    const call = (world.counters[member].called + 1) | 0;
    world.counters[member].called = call;
    world.calls[member][call >>> 0] = what;
    return {
      rank: member,
      size: world.size,
      elemSize,
      buffers: this.buffers,
      bufferBytes: this.bufferBytes,
      call,
      buffer: (q, b) => world.memory[q][b],
      reduceToBuffer(b: number, offset: number, n: number): void {
        const srcs = world.memory.map((m) => m[b].slice(offset, offset + n));
        reducer.reduceMany(world.memory[member][b].subarray(offset, offset + n), srcs);
      },
      reduceToOutput(out: Uint8Array, b: number, offset: number): void {
        reducer.reduceMany(out, world.memory.map((m) => m[b].subarray(offset, offset + out.length)));
      },
      reduceWithOwn(out: Uint8Array, own: Uint8Array, b: number, offset: number): void {
        const srcs = world.memory.map((
          m,
          q,
        ) => (q === member ? own.slice() : m[b].slice(offset, offset + own.length)));
        const mine = world.memory[member][b].subarray(offset, offset + own.length);
        reducer.reduceMany(mine, srcs);
        out.set(mine);
      },
      tensor: (q) => world.tensors()[q],
      reduceTensors(offset: number, n: number): void {
        const ts = world.tensors();
        const srcs = ts.map((t) => t.slice(offset, offset + n));
        reducer.reduceMany(ts[member].subarray(offset, offset + n), srcs);
      },
      counter: (q, name) => world.counters[q][name],
      publish(name: "posted" | "reduced" | "consumed", value: number): void {
        world.counters[member][name] = value;
      },
      checkCall(): boolean {
        let all = true;
        for (let q = 0; q < world.size; q++) {
          if (((world.counters[q].called - call) | 0) < 0) all = false;
          else if (world.calls[q][call >>> 0] !== what) {
            throw new Error(
              `mismatch: member ${q} runs ${world.calls[q][call >>> 0]}, member ${member} ${what}`,
            );
          }
        }
        return all;
      },
    };
  }

  /** Runs one call on every member, interleaved by `rng`; rebuilds some pipelines from their state. */
  run(rng: Rng, make: (member: number) => { ctx: SegmentContext; plan: SegmentPlan }, what: string): void {
    const members = Array.from({ length: this.size }, (_, q) => {
      const { ctx, plan } = make(q);
      const state: SegmentState = {
        base: this.counters[q].posted,
        posted: 0,
        reduced: 0,
        finished: 0,
        checked: false,
      };
      return { ctx, plan, pipeline: new SegmentPipeline(ctx, plan, state), handed: false };
    });
    let idle = 0;
    while (members.some((m) => !m.pipeline.done)) {
      const m = members[Math.floor(rng.next() * this.size)];
      if (m.pipeline.done) continue;
      if (m.pipeline.progress()) idle = 0;
      // A member done with a plan that lends its tensor must not return while a peer still reads it.
      if (m.pipeline.done && m.plan.lends) {
        const last = (m.pipeline.state.base + m.plan.chunks) | 0;
        for (let q = 0; q < this.size; q++) {
          if (((this.counters[q].consumed - last) | 0) < 0) {
            throw new Error(`${what}: member ${q} still reads a tensor lent by a member that is done`);
          }
        }
      } else if (++idle > 50 * this.size) {
        throw new Error(
          `${what}: no member can move (waiting on ${members.map((x) => x.pipeline.waitingOn())})`,
        );
      }
      if (!m.handed && rng.next() < 0.125) {
        // Another thread of the member goes on from where this one stands.
        m.pipeline = new SegmentPipeline(m.ctx, m.plan, m.pipeline.state);
        m.handed = true;
      }
    }
  }
}

interface Flavor {
  dtype: TestDType;
  op: TestOp;
}

const FLAVORS: readonly Flavor[] = [
  { dtype: "int32", op: "sum" },
  { dtype: "float32", op: "sum" },
  { dtype: "float64", op: "max" },
];

function view(dtype: TestDType, b: Uint8Array): TestArray {
  const copy = b.slice();
  if (dtype === "int32") return new Int32Array(copy.buffer);
  if (dtype === "float32") return new Float32Array(copy.buffer);
  return new Float64Array(copy.buffer);
}

async function runMatrix(size: number, seed: number): Promise<number> {
  const rng = new Rng(seed);
  let ran = 0;
  for (const [buffers, bufferBytes] of [[2, 16], [4, 64], [2, 4096]] as const) {
    const world = new World(size, buffers, bufferBytes, 0x7fff_fff0 - seed);
    for (const count of [0, 1, 7, 64, 1001]) {
      for (const { dtype, op } of FLAVORS) {
        const es = ELEM_SIZE[dtype];
        if (bufferBytes / size < es && size > 1) continue; // the block collectives need a piece per member
        const reducer = await makeReducer({ dtype, op });
        const tag = `n=${size} count=${count} ${dtype} ${op} buffers=${buffers}x${bufferBytes}`;
        const ctxOf = (q: number, what: string): SegmentContext => world.context(q, reducer, es, what);

        for (const twoPhase of [false, true]) {
          const inputs = randomInputs({ dtype, count, size, seed: ++seed });
          const bufs = inputs.map((a) => bytes(a).slice());
          const what = `allReduce ${twoPhase ? "two-phase" : "one-shot"} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentAllReduce(ctx, bufs[q], { twoPhase }) };
          }, what);
          for (const b of bufs) assertReduced(b, inputs, { dtype, op, what });
          assertSameBits(bufs, what);

          if (twoPhase) {
            // The same on pool tensors: in place in every member's own tensor, which the others read.
            const pinputs = randomInputs({ dtype, count, size, seed: ++seed });
            world.tensors = pinputs.map((a) => bytes(a).slice());
            const pwhat = `allReduce pooled ${tag}`;
            world.run(rng, (q) => {
              const ctx = ctxOf(q, pwhat);
              return { ctx, plan: segmentAllReducePooled(ctx, count * es) };
            }, pwhat);
            for (const t of world.tensors) assertReduced(t, pinputs, { dtype, op, what: pwhat });
            assertSameBits(world.tensors, pwhat);
          }

          for (const root of new Set([0, size - 1])) {
            const rinputs = randomInputs({ dtype, count, size, seed: ++seed });
            const rbufs = rinputs.map((a) => bytes(a).slice());
            const rwhat = `reduce root ${root} ${twoPhase ? "two-phase" : "one-shot"} ${tag}`;
            world.run(rng, (q) => {
              const ctx = ctxOf(q, rwhat);
              return { ctx, plan: segmentReduce(ctx, rbufs[q], root, { twoPhase }) };
            }, rwhat);
            assertReduced(rbufs[root], rinputs, { dtype, op, what: rwhat });
            for (let q = 0; q < size; q++) {
              if (q !== root) assertBytesEqual(rbufs[q], bytes(rinputs[q]), rwhat);
            }
          }
          ran += 2;
        }

        for (const root of new Set([0, size - 1])) {
          const inputs = randomInputs({ dtype, count, size, seed: ++seed });
          const bufs = inputs.map((a, q) => (q === root ? bytes(a).slice() : new Uint8Array(a.byteLength)));
          const what = `broadcast root ${root} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentBroadcast(ctx, bufs[q], root) };
          }, what);
          for (const b of bufs) assertBytesEqual(b, bytes(inputs[root]), what);
        }

        {
          const inputs = randomInputs({ dtype, count, size, seed: ++seed });
          const outs = inputs.map(() => new Uint8Array(count * es * size));
          const what = `allGather ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentAllGather(ctx, bytes(inputs[q]), outs[q]) };
          }, what);
          const want = new Uint8Array(count * es * size);
          inputs.forEach((a, q) => want.set(bytes(a), q * count * es));
          for (const o of outs) assertBytesEqual(o, want, what);
        }

        {
          const inputs = randomInputs({ dtype, count: count * size, size, seed: ++seed });
          const outs = inputs.map(() => new Uint8Array(count * es));
          const what = `reduceScatter ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentReduceScatter(ctx, bytes(inputs[q]), outs[q]) };
          }, what);
          for (let q = 0; q < size; q++) {
            const blocks = inputs.map((a) => a.subarray(q * count, (q + 1) * count) as TestArray);
            assertReduced(outs[q], blocks, { dtype, op, what: `${what} member ${q}` });
          }
        }

        for (const inPlace of [false, true]) {
          const inputs = randomInputs({ dtype, count: count * size, size, seed: ++seed });
          const ins = inputs.map((a) => bytes(a).slice());
          const outs = inPlace ? ins : inputs.map(() => new Uint8Array(count * es * size));
          const what = `allToAll${inPlace ? " in place" : ""} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentAllToAll(ctx, ins[q], outs[q]) };
          }, what);
          for (let q = 0; q < size; q++) {
            const want = new Uint8Array(count * es * size);
            for (let p = 0; p < size; p++) {
              want.set(bytes(inputs[p]).subarray(q * count * es, (q + 1) * count * es), p * count * es);
            }
            assertBytesEqual(outs[q], want, `${what} member ${q}`);
          }
        }

        for (const root of new Set([0, size - 1])) {
          const inputs = randomInputs({ dtype, count, size, seed: ++seed });
          const out = new Uint8Array(count * es * size);
          const what = `gather root ${root} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentGather(ctx, bytes(inputs[q]), q === root ? out : undefined, root) };
          }, what);
          const want = new Uint8Array(count * es * size);
          inputs.forEach((a, q) => want.set(bytes(a), q * count * es));
          assertBytesEqual(out, want, what);
        }

        for (const root of new Set([0, size - 1])) {
          const [all] = randomInputs({ dtype, count: count * size, size: 1, seed: ++seed });
          const outs = Array.from({ length: size }, () => new Uint8Array(count * es));
          const what = `scatter root ${root} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentScatter(ctx, q === root ? bytes(all) : undefined, outs[q], root) };
          }, what);
          for (let q = 0; q < size; q++) {
            assertBytesEqual(
              outs[q],
              bytes(all).subarray(q * count * es, (q + 1) * count * es),
              `${what} member ${q}`,
            );
          }
        }

        {
          // The v-forms: member q's block (q·count + 5) mod (2·count + 1) elements, zeros among them.
          const counts = Array.from({ length: size }, (_, q) => (q * count + 5) % (2 * count + 1));
          const layout = blocksOf(counts, es), total = layout.total;
          const parts = counts.map((c, q) =>
            bytes(randomInputs({ dtype, count: c, size: 1, seed: ++seed + q })[0])
          );
          const want = new Uint8Array(total);
          parts.forEach((part, q) => want.set(part, layout.offsets[q]));
          const outs = parts.map(() => new Uint8Array(total));
          const what = `allGather v ${counts} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, what);
            return { ctx, plan: segmentAllGather(ctx, parts[q], outs[q], layout) };
          }, what);
          for (const o of outs) assertBytesEqual(o, want, what);
          const root = size - 1, gathered = new Uint8Array(total);
          const gwhat = `gather v ${counts} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, gwhat);
            return {
              ctx,
              plan: segmentGather(ctx, parts[q], q === root ? gathered : undefined, root, layout),
            };
          }, gwhat);
          assertBytesEqual(gathered, want, gwhat);
          const scattered = counts.map((c) => new Uint8Array(c * es));
          const swhat = `scatter v ${counts} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, swhat);
            return { ctx, plan: segmentScatter(ctx, q === 0 ? want : undefined, scattered[q], 0, layout) };
          }, swhat);
          scattered.forEach((o, q) => assertBytesEqual(o, parts[q], `${swhat} member ${q}`));
          const inputs = randomInputs({ dtype, count: total / es, size, seed: ++seed });
          const reduced = counts.map((c) => new Uint8Array(c * es));
          const rwhat = `reduceScatter v ${counts} ${tag}`;
          world.run(rng, (q) => {
            const ctx = ctxOf(q, rwhat);
            return { ctx, plan: segmentReduceScatter(ctx, bytes(inputs[q]), reduced[q], layout) };
          }, rwhat);
          for (let q = 0; q < size; q++) {
            const at = layout.offsets[q] / es;
            const blocks = inputs.map((a) => a.subarray(at, at + counts[q]) as TestArray);
            assertReduced(reduced[q], blocks, { dtype, op, what: `${rwhat} member ${q}` });
          }
        }

        world.run(rng, (q) => {
          const ctx = ctxOf(q, `barrier ${tag}`);
          return { ctx, plan: segmentBarrier(ctx) };
        }, `barrier ${tag}`);
        ran += 12;
      }
    }
  }
  return ran;
}

for (const size of [1, 2, 3, 4, 5, 8]) {
  Deno.test(`segment algorithms run every collective on ${size} members in any interleaving`, async () => {
    const ran = await runMatrix(size, 1000 + size);
    assert.ok(ran > 0);
  });
}

Deno.test("SegmentPipeline reads no member's buffer before that member began the same call", async () => {
  const reducer = await makeReducer({ dtype: "int32", op: "sum" });
  const world = new World(2, 2, 64, 0);
  const a = world.context(0, reducer, 4, "allReduce(4 × int32)");
  const buf = new Uint8Array(16);
  const pipeline = new SegmentPipeline(a, segmentAllReduce(a, buf), {
    base: 0,
    posted: 0,
    reduced: 0,
    finished: 0,
    checked: false,
  });
  // Member 1 has not begun: member 0 may post its chunk, but not finish it.
  assert.equal(pipeline.progress(), true);
  assert.equal(pipeline.done, false);
  assert.deepEqual(pipeline.waitingOn(), [1]);
  assert.equal(world.counters[0].posted, 1);
  assert.equal(world.counters[0].consumed, 0);
  // Member 1 begins another call at the same number: member 0 refuses it.
  world.context(1, reducer, 4, "broadcast(4 × int32, root 0)");
  assert.throws(() => pipeline.progress(), /mismatch: member 1 runs broadcast/);
});

Deno.test("SegmentPipeline posts at most `buffers` chunks ahead of the slowest member", async () => {
  const reducer = await makeReducer({ dtype: "int32", op: "sum" });
  const world = new World(2, 4, 16, 0);
  const bufs = [new Uint8Array(16 * 10), new Uint8Array(16 * 10)];
  const ctx0 = world.context(0, reducer, 4, "allReduce");
  const ctx1 = world.context(1, reducer, 4, "allReduce");
  const state = { base: 0, posted: 0, reduced: 0, finished: 0, checked: false };
  const p0 = new SegmentPipeline(ctx0, segmentAllReduce(ctx0, bufs[0]), state);
  const p1 = new SegmentPipeline(ctx1, segmentAllReduce(ctx1, bufs[1]), state);
  while (p0.progress());
  // Member 1 posted nothing: member 0 posted 4 chunks (its buffers) and finished none.
  assert.equal(p0.state.posted, 4);
  assert.equal(p0.state.finished, 0);
  while (!p0.done || !p1.done) {
    p1.progress();
    p0.progress();
  }
  assert.deepEqual(bufs[0], bufs[1]);
  assert.equal(world.counters[0].consumed, 10);
});

// A float32 reduction the checks accept only if the world summed every member exactly once.
Deno.test("segment all-reduce plans agree bit for bit across members with float32 sums", async () => {
  const reducer = await makeReducer({ dtype: "float32", op: "sum" });
  for (const twoPhase of [false, true]) {
    const world = new World(3, 2, 64, 5);
    const inputs = randomInputs({ dtype: "float32", count: 333, size: 3, seed: 9 });
    const bufs = inputs.map((a) => bytes(a).slice());
    world.run(new Rng(3), (q) => {
      const ctx = world.context(q, reducer, 4, "allReduce");
      return { ctx, plan: segmentAllReduce(ctx, bufs[q], { twoPhase }) };
    }, "allReduce");
    assertSameBits(bufs, `twoPhase=${twoPhase}`);
    assertReduced(bufs[0], inputs, { dtype: "float32", op: "sum", what: `twoPhase=${twoPhase}` });
    assert.equal(view("float32", bufs[0]).length, 333);
    assert.equal(newArray("float32", 1).length, 1);
  }
});
