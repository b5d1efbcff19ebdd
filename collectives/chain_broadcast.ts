/**
 * Pipelined chain broadcast (MPICH's and NCCL's pipelined ring broadcast).
 *
 * Steps: ranks form a chain from the root, v = (r − root) mod n; rank v receives each chunk (at most
 * `ctx.chunkBytes`) from v − 1 and forwards it to v + 1 at once, so after the chain fills every link
 * carries a chunk at the same time.
 *
 * Bytes each rank sends: m (none at the end of the chain).
 *
 * Cost (sim/cost_model.ts `chainBroadcastCost`), c = min(chunkBytes, m), k = ⌈m/chunkBytes⌉:
 *   T = (n − 2 + k)·(α + c·β)
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { chunks, mod } from "./_layout.ts";
import { Plan } from "./_schedule.ts";

/**
 * Broadcasts the root's `buf` to every rank's `buf` down a pipelined chain.
 *
 * @param ctx The group's context; every rank calls with the same length and root.
 * @param buf The data at the root; overwritten with it elsewhere.
 * @param root The group rank that holds the data.
 * @returns When this rank's `buf` holds the data (and has been forwarded).
 * @throws {RangeError} If `buf` is not whole elements or `root` is not a rank.
 */
export async function chainBroadcast(ctx: CollectiveContext, buf: Uint8Array, root: number): Promise<void> {
  const check = argChecks(ctx, "broadcast");
  check.buffer(buf);
  check.root(root);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const v = mod(rank - root, size);
  const plan = new Plan(ctx);
  for (const chunk of chunks(ctx, buf)) {
    const got = v > 0 ? [plan.recv(mod(rank - 1, size), chunk)] : [];
    if (v < size - 1) plan.send(mod(rank + 1, size), chunk, { after: got });
  }
  await plan.run();
}
