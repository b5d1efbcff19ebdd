/**
 * Dissemination barrier (Hensgen, Finkel and Manber; MPICH's barrier).
 *
 * Steps: in round k = 0..⌈log2 n⌉−1, rank r sends an empty message to (r + 2^k) mod n and waits for one
 * from (r − 2^k) mod n; the message of round k+1 leaves only once those of rounds 0..k have arrived. After the last round
 * every rank has heard, directly or through others, from every rank, so none leaves before all arrived.
 *
 * Bytes each rank sends: none, in ⌈log2 n⌉ messages.
 *
 * Cost (sim/cost_model.ts `disseminationBarrierCost`): T = ⌈log2 n⌉·α
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { EMPTY, mod } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";

/**
 * Resolves once every rank of the group has called it.
 *
 * @param ctx The group's context.
 * @returns When every rank has entered the barrier.
 */
export async function disseminationBarrier(ctx: CollectiveContext): Promise<void> {
  argChecks(ctx, "barrier");
  const { rank, size } = ctx.comm;
  if (size === 1) return;
  const plan = new Plan(ctx);
  // Round k's message must carry everything heard in all earlier rounds, not just the last: receives from
  // different peers may complete out of order.
  let heard: Step = plan.join([]);
  for (let d = 1; d < size; d *= 2) {
    plan.send(mod(rank + d, size), EMPTY, { after: [heard] });
    heard = plan.join([heard, plan.recv(mod(rank - d, size), EMPTY)]);
  }
  await plan.run();
}
