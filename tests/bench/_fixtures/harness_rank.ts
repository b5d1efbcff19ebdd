/**
 * A rank of tests/bench/harness_test.ts (run by `spawnThreads`): the harness's sweep of one collective on
 * this world, on host tensors whose device counts what happens while calls are timed, with the collective
 * optionally broken on purpose so that the test can see `#wrong` count it.
 *
 * @module
 */
import type { DType, ReduceOp } from "../../../core/dtype.ts";
import type { AnyTensor, ProcessGroup } from "../../../backend/process_group.ts";
import type { ThreadContext } from "../../../backend/threads.ts";
import { collective, type CollectiveDescriptor, unevenMatrix } from "../../../bench/_descriptors.ts";
import { type BenchDevice, type BenchTensor, hostDevice, runSweep } from "../../../bench/_harness.ts";
import type { BenchRow } from "../../../bench/_rows.ts";

/** What the test asks of each rank. */
export interface HarnessArgs {
  collective: string;
  sizes: number[];
  dtype?: DType;
  op?: ReduceOp;
  root?: number;
  iters?: number;
  warmup?: number;
  rounds?: number;
  /**
   * How the collective is broken: `"none"`; `"skip"` (no call at all); `"corrupt"` (the real call, then
   * one output element changed on rank 0); `"late"` (as `"corrupt"`, on the fourth and fifth calls only:
   * the last timed ones, with the defaults); `"swapped"` (a call that succeeds with the wrong layout:
   * allToAllv with its traffic matrix transposed, sendRecv around the ring the other way).
   */
  broken?: "none" | "skip" | "corrupt" | "late" | "swapped";
}

/** What each rank reports. */
export interface HarnessResult {
  rows: BenchRow[];
  /** Calls of the collective, all sizes. */
  calls: number;
  /** Input writes per size. */
  writes: number[];
  /** Input writes and calls of anything but the collective made while a run of calls was timed. */
  duringTiming: number;
}

/** The descriptor with its `run` broken as asked. */
function broken(
  d: CollectiveDescriptor,
  how: HarnessArgs["broken"],
  count: { calls: number },
): CollectiveDescriptor {
  return {
    ...d,
    run: async (pg, input, output, args) => {
      count.calls++;
      const n = count.calls;
      if (how === "skip") return;
      if (how === "swapped") return await swapped(d, pg, input, output);
      await d.run(pg, input, output, args);
      if ((how === "corrupt" || (how === "late" && (n === 4 || n === 5))) && pg.rank === 0) {
        const out = (d.inPlace ? input : output) as Float32Array;
        out[out.length - 1] += 1;
      }
    },
  };
}

/** allToAllv with the matrix transposed (every rank agrees, so the call succeeds), or sendRecv reversed. */
async function swapped(
  d: CollectiveDescriptor,
  pg: ProcessGroup,
  input: AnyTensor,
  output: AnyTensor,
): Promise<void> {
  const n = pg.size, me = pg.rank;
  if (d.name === "allToAllv") {
    const m = unevenMatrix(input.length, n);
    await pg.allToAll(output, input, { sendCounts: m.map((row) => row[me]), recvCounts: m[me] });
  } else if (d.name === "sendRecv") {
    await Promise.all([pg.send(input, (me + n - 1) % n), pg.recv(output, (me + 1) % n)]);
  } else {
    throw new RangeError(`No swapped form of ${d.name}`);
  }
}

/** Runs the sweep; returns the rows and what the counting device saw. */
export async function main(pg: ProcessGroup, ctx: ThreadContext): Promise<HarnessResult> {
  const args = ctx.args as HarnessArgs;
  const count = { calls: 0 };
  const descriptor = broken(collective(args.collective), args.broken ?? "none", count);
  const host = hostDevice(pg);
  const writes: number[] = [];
  let timing = false;
  let duringTiming = 0;
  const device: BenchDevice = {
    tensor(n, dtype): BenchTensor {
      const t = host.tensor(n, dtype);
      writes.push(0);
      const size = writes.length - 1;
      return {
        tensor: t.tensor,
        write: (h) => {
          if (timing) duringTiming++;
          writes[size]++;
          t.write(h);
        },
        read: () => t.read(),
        [Symbol.dispose]: () => t[Symbol.dispose](),
      };
    },
    async time(iters, call): Promise<number> {
      timing = true;
      try {
        return await host.time(iters, call);
      } finally {
        timing = false;
      }
    },
    reduceScalars: (values, op) => {
      if (timing) duringTiming++;
      return host.reduceScalars(values, op);
    },
  };
  const results = await runSweep(pg, descriptor, {
    sizes: args.sizes,
    dtype: args.dtype,
    op: args.op,
    root: args.root,
    iters: args.iters ?? 4,
    warmup: args.warmup ?? 1,
    rounds: args.rounds ?? 1,
    device,
  });
  // Only the input tensor is written: out-of-place outputs are counted as sizes of their own with 0 writes.
  return {
    rows: results.map(([row]) => row),
    calls: count.calls,
    writes: writes.filter((w) => w > 0),
    duringTiming,
  };
}
