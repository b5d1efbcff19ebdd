/**
 * Thread bodies for the API tests (run by `spawnThreads`); `args.scenario` names which.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { DistError, MismatchError, TransportError } from "../../../core/errors.ts";

function thrown(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    return `${(e as Error).name}: ${(e as Error).message}`;
  }
  return "no error";
}

/** Runs the scenario on this rank. */
export async function main(pg: ProcessGroup, ctx: { args: unknown }): Promise<unknown> {
  const { scenario } = ctx.args as { scenario: string };
  if (scenario === "bad-arguments") {
    const f = new Float32Array(8);
    const errors = {
      root: thrown(() => pg.broadcast(f, { root: pg.size })),
      negativeRoot: thrown(() => pg.reduce(f, { root: -1 })),
      gatherLength: thrown(() => pg.allGather(new Float32Array(8), f)),
      scatterLength: thrown(() => pg.reduceScatter(new Float32Array(3), f)),
      allToAllLength: thrown(() => pg.allToAll(new Float32Array(7), new Float32Array(7))),
      dtypes: thrown(() => pg.allGather(new Int32Array(16), f)),
      op: thrown(() => pg.allReduce(f, { op: "median" as never })),
      uint16: thrown(() => pg.allReduce(new Uint16Array(4))),
      clamped: thrown(() => pg.allReduce(new Uint8ClampedArray(4) as never)),
      algorithm: thrown(() => pg.allReduce(f, { algorithm: "butterfly" })),
      peerSelf: thrown(() => pg.send(f, pg.rank)),
      peerRange: thrown(() => pg.recv(f, 99)),
      timeout: thrown(() => pg.barrier({ timeoutMs: 0 })),
      servers: thrown(() => pg.allReduce(f, { algorithm: "ps", servers: 0 })),
      // A tensor shaped like a DeviceBuffer: the cpu backend takes host memory only.
      device: thrown(() =>
        pg.allReduce({ dtype: "float32", length: 4, byteLength: 16, device: 0, pointer: null })
      ),
    };
    // Nothing above reached the wire: the group still works.
    const t = new Float32Array([pg.rank]);
    await pg.allReduce(t);
    return { errors, sum: t[0] };
  }
  if (scenario === "groups") {
    const even = await pg.newGroup([0, 2]);
    const odd = await pg.newGroup([3, 1]);
    const t = new Int32Array([pg.rank + 1]);
    let notMember = "";
    if (even.rank >= 0) await even.allReduce(t);
    else notMember = thrown(() => even.allReduce(t));
    const u = new Int32Array([10 * (pg.rank + 1)]);
    if (odd.rank >= 0) await odd.allReduce(u, { op: "max" });
    const w = new Int32Array([1]);
    await pg.allReduce(w);
    const b = new Float64Array([pg.rank === 2 ? 42 : 0]);
    if (even.rank >= 0) await even.broadcast(b, { root: 1 });
    return {
      evenRank: even.rank,
      oddRank: odd.rank,
      oddRanks: odd.ranks,
      t: t[0],
      u: u[0],
      w: w[0],
      b: b[0],
      notMember,
    };
  }
  if (scenario === "async") {
    // Several calls in flight at once complete in order, each with its report.
    const ts = Array.from({ length: 5 }, (_, i) => new Float64Array(1000).fill(i + pg.rank));
    const works = ts.map((t) => pg.allReduce(t, { op: "sum" }));
    const completedEarly = works.map((w) => w.completed);
    await Promise.all(works);
    const reports = works.map((w) => w.report);
    return {
      completedEarly,
      values: ts.map((t) => t[999]),
      algorithms: reports.map((r) => r?.algorithm),
      bytes: reports.map((r) => r?.bytes),
      sent: reports.map((r) => (r?.bytesSent ?? 0) > 0),
    };
  }
  if (scenario === "signal") {
    const controller = new AbortController();
    controller.abort("stop");
    const before = await pg.allReduce(new Float32Array(4), { signal: controller.signal }).then(
      () => "resolved",
      (e) => `${(e as Error).name}: ${(e as Error).message}`,
    );
    const t = new Float32Array([1]);
    await pg.allReduce(t);
    return { before, sum: t[0] };
  }
  if (scenario === "holes") {
    // A signal that is not an AbortSignal, and a detached buffer, throw before anything is sent...
    const notSignal = thrown(() => pg.allReduce(new Float32Array(4), { signal: {} as never }));
    const buffer = new ArrayBuffer(16);
    const view = new Float32Array(buffer);
    structuredClone(buffer, { transfer: [buffer] });
    const detached = thrown(() => pg.allReduce(view));
    // ...and leave the group usable: the next call completes, within its timeout.
    const t = new Float32Array([1]);
    await pg.allReduce(t, { timeoutMs: 30_000 });
    await pg.close();
    // After close, every call rejects at once with an error that says so; close again is a no-op.
    const started = performance.now();
    const settle = (p: PromiseLike<unknown>) =>
      Promise.resolve(p).then(() => "resolved", (e) => `${(e as Error).name}: ${(e as Error).message}`);
    const afterClose = {
      allReduce: await settle(pg.allReduce(new Float32Array(4))),
      barrier: await settle(pg.barrier()),
      newGroup: await settle(pg.newGroup([0])),
    };
    await pg.close();
    return { notSignal, detached, sum: t[0], afterClose, afterCloseMs: performance.now() - started };
  }
  if (scenario === "mismatch") {
    // Rank 1 all-reduces another count over messages: the error reaches this thread from the
    // communication thread with its class intact.
    const t = new Float32Array(pg.rank === 1 ? 16 : 8);
    try {
      await pg.allReduce(t, { algorithm: "ring", timeoutMs: 20_000 });
      return { caught: "no error" };
    } catch (e) {
      return {
        caught: `${(e as Error).name}: ${(e as Error).message}`,
        mismatch: e instanceof MismatchError,
        transport: e instanceof TransportError,
        dist: e instanceof DistError,
        code: (e as DistError).code,
      };
    }
  }
  throw new Error(`unknown scenario ${scenario}`);
}
