/**
 * A rank of the fault tests, started directly (not by the launcher, which would stop the others itself).
 * Modes (first argument):
 * - `loop`: all-reduce 16 MiB forever (1 KiB with a second argument `small`; DistributedDataParallel
 *   steps of three buckets with `ddp`, the same through the 1-bit hook with `ddp-1bit`, ZeRO stage 3's
 *   gathers and reduce-scatters with `zero3`; sends to rank 0,
 *   which receives from `ANY_SOURCE`, with `anySource`), printing `STARTED` once; the test kills one rank.
 * - `mismatch`: rank 1 makes a different call than the others (second argument: count | op | dtype |
 *   collective | algorithm | root | reduceRoot; rootEach: every rank names another root), with algorithm `FAULT_ALGORITHM` (default "ring"; "auto" runs
 *   through the host segment over shared memory).
 * - `closed`: rank 1 closes its group (and lives on) before a call of the others' (its second argument:
 *   small | big | gather | barrier).
 * - `skip`: rank 1 skips the collective the others make (they time out); with `anySource`, rank 0
 *   waits for a message from any rank that none sends.
 * Every rank prints `FAILED <name> <ms> <message>` when its call fails, or `DONE`.
 */
import { init } from "../../../backend/init.ts";
import { ANY_SOURCE } from "../../../backend/process_group.ts";
import { applyHostOf } from "../../_util/launched.ts";
import { DistributedDataParallel, signCompressHook } from "../../../ddp/mod.ts";
import { ShardedDataParallel } from "../../../zero/mod.ts";

const [mode, variant = "count"] = Deno.args;
// Hosts told apart by DCOMM_HOST_ID ("a,a,b,b": rank r's host), for the hybrid transport's case.
applyHostOf();
const algorithm = Deno.env.get("FAULT_ALGORITHM") ?? "ring";
const pg = await init({ timeoutMs: Number(Deno.env.get("FAULT_TIMEOUT_MS") ?? 60_000) });
const t0 = performance.now();
try {
  if (mode === "loop" && (variant === "ddp" || variant === "ddp-1bit")) {
    // DistributedDataParallel steps forever: three buckets, launched as the "backward pass" marks them
    // (with `ddp-1bit`, each compressed on the communication thread by the 1-bit hook).
    const params = [new Float32Array(2 << 20), new Float32Array(1 << 20), new Float32Array(1024)];
    const ddp = await DistributedDataParallel.create(pg, params, {
      bucketMb: 4,
      firstBucketMb: 0.001,
      hook: variant === "ddp-1bit" ? signCompressHook() : undefined,
    });
    for (let step = 0;; step++) {
      for (const i of [2, 1, 0]) {
        ddp.grads[i].fill(1);
        ddp.gradReady(i);
      }
      await ddp.synchronize();
      if (step === 0) console.log("STARTED");
    }
  } else if (mode === "loop" && variant === "zero3") {
    // ZeRO stage 3: every step gathers two layers of 1M parameters (the forward), then reduces them.
    const sdp = await ShardedDataParallel.create(pg, [new Float32Array(1 << 20), new Float32Array(1 << 20)], {
      stage: 3,
      optimizer: { type: "sgd", lr: 0.1 },
      layers: [[0], [1]],
    });
    for (let step = 0;; step++) {
      for (const layer of [0, 1]) await sdp.gather(layer);
      for (const layer of [1, 0]) {
        sdp.grads(layer)[0].fill(1);
        sdp.gradReady(layer);
        sdp.release(layer);
      }
      await sdp.step();
      if (step === 0) console.log("STARTED");
    }
  } else if (mode === "loop" && (variant === "gather" || variant === "allGatherv")) {
    // A gather to rank 0, or an all-gather of uneven blocks, again and again.
    const counts = Array.from({ length: pg.size }, (_, r) => (r + 1) << 18);
    const total = counts.reduce((a, b) => a + b, 0);
    const input = new Float32Array(variant === "gather" ? 1 << 20 : counts[pg.rank]).fill(1);
    const output = new Float32Array(variant === "gather" ? (1 << 20) * pg.size : total);
    const call = () =>
      variant === "gather"
        ? pg.gather(pg.rank === 0 ? output : null, input, { root: 0 })
        : pg.allGather(output, input, { counts });
    await call();
    console.log("STARTED");
    for (;;) await call();
  } else if (mode === "loop" && variant === "anySource") {
    // Every other rank sends 256 KiB to rank 0 again and again; rank 0 receives from whichever sends.
    const t = new Float32Array(1 << 16);
    const step = () => pg.rank === 0 ? pg.recv(t, ANY_SOURCE) : pg.send(t, 0);
    await step();
    console.log("STARTED");
    for (;;) await step();
  } else if (mode === "loop" && variant === "batch") {
    // Every rank exchanges 1 MiB with every other in one batch, again and again.
    const peers = Array.from({ length: pg.size }, (_, r) => r).filter((r) => r !== pg.rank);
    const ops = peers.flatMap((peer) => [
      { op: "send" as const, tensor: new Float32Array(1 << 18), peer },
      { op: "recv" as const, tensor: new Float32Array(1 << 18), peer },
    ]);
    const batch = () => Promise.all(pg.batchIsendIrecv(ops).map((w) => w.wait()));
    await batch();
    console.log("STARTED");
    for (;;) await batch();
  } else if (mode === "loop") {
    const t = new Float32Array(variant === "small" ? 256 : 4 << 20).fill(1);
    await pg.allReduce(t);
    console.log("STARTED");
    for (;;) await pg.allReduce(t);
  } else if (mode === "mismatch") {
    const odd = pg.rank === 1;
    const n = odd && variant === "count" ? 4096 : 1024;
    const t = odd && variant === "dtype" ? new Int32Array(n) : new Float32Array(n);
    if (variant === "counts") {
      // Rank 1 lists other counts (the same total): the v-forms' descriptors carry their counts.
      const counts = odd ? [2, 1, 1] : [1, 2, 1];
      const all = new Float32Array(4);
      await pg.allGather(all, new Float32Array(counts[pg.rank]), {
        counts,
        algorithm: algorithm === "auto" ? "auto" : "ring",
      });
    } else if (variant === "gatherRoot") {
      const root = odd ? 1 : 0;
      await pg.gather(pg.rank === root ? new Float32Array(3 * n) : null, t, {
        root,
        algorithm: algorithm === "ring" ? "linear" : algorithm,
      });
    } else if (odd && variant === "collective") await pg.broadcast(t, { root: 0 });
    else if (variant === "root") {
      await pg.broadcast(t, { root: odd ? 1 : 0, algorithm: algorithm === "ring" ? "binomial" : algorithm });
    } else if (variant === "rootEach") {
      // Every rank names the next as the root: each waits for a parent that never sends.
      const root = (pg.rank + 1) % pg.size;
      await pg.broadcast(t, { root, algorithm: algorithm === "ring" ? "chain" : algorithm });
    } else if (variant === "reduceRoot") {
      await pg.reduce(t, { root: odd ? 1 : 0, algorithm: algorithm === "ring" ? "binomial" : algorithm });
    } else {
      await pg.allReduce(t, {
        op: odd && variant === "op" ? "max" : "sum",
        algorithm: odd && variant === "algorithm" ? (algorithm === "tree" ? "ring" : "tree") : algorithm,
      });
    }
    console.log("DONE");
  } else if (mode === "closed") {
    // Rank 1 closes its group and stays alive; the others make one call it never joins.
    if (pg.rank === 1) {
      await pg.close();
      await new Promise((r) => setTimeout(r, 8000));
    } else if (variant === "gather") {
      await pg.gather(pg.rank === 0 ? new Float32Array(3 << 18) : null, new Float32Array(1 << 18));
    } else if (variant === "barrier") await pg.barrier();
    else await pg.allReduce(new Float32Array(variant === "small" ? 256 : 1 << 20));
    console.log("DONE");
  } else if (mode === "skip" && variant === "anySource") {
    if (pg.rank === 0) await pg.recv(new Float32Array(1024), ANY_SOURCE);
    else await new Promise((r) => setTimeout(r, 4000));
    console.log("DONE");
  } else if (mode === "skip") {
    if (pg.rank !== 1) await pg.allReduce(new Float32Array(1024));
    else await new Promise((r) => setTimeout(r, 4000));
    console.log("DONE");
  }
} catch (e) {
  console.log(`FAILED ${(e as Error).name} ${Math.round(performance.now() - t0)} ${(e as Error).message}`);
}
await pg.close().catch(() => {});
