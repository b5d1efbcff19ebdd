/**
 * Tree all-reduce: a pipelined reduce up a binary tree followed by a broadcast down it (NCCL's tree), and
 * NCCL's double binary tree, where two trees each carry half of the buffer.
 *
 * Steps (one tree, see `_trees.ts` for its shape, height D = ⌈log2 n⌉): the buffer moves in chunks of at
 * most `ctx.chunkBytes`. For each chunk a rank reduces its children's chunks into its own (lower child
 * first), sends the result to its parent, receives the final chunk back from the parent and forwards it
 * to its children. The root turns the reduction around. Chunks stream: chunk c+1 climbs while chunk c
 * descends.
 *
 * Bytes each rank sends: m to its parent (none at the root) plus m to each child (≤ 2); an interior rank
 * receives 3m and reduces 2m. Double tree: each tree carries m/2, and each rank is interior in at most
 * one of them, so an interior rank sends and receives 2m and reduces m, as the ring does.
 *
 * Cost (sim/cost_model.ts `treeAllReduceCost`, `doubleTreeAllReduceCost`, priced on the trees of
 * `sim/trees.ts`), c = chunk bytes, k chunks, D the height, F = the first chunk's way up on the busiest
 * link of each level, summed (2 where a parent takes two children's chunks, 1 at the root's single child:
 * 3 for n = 4, 5 for n = 8), S = the busiest link's chunks each way once the pipeline is full (3 for an
 * interior rank; 4 in the double tree, interior in one tree and a leaf of the other), w = the most messages
 * of a rank per chunk, f = the most children it reduces; with hosts, a host's ranks share its link and
 * messages within a host take the intra constants:
 *   tree:        T = 2D·α + 2F·cβ + D·cγ + (k−1)·(w·α + S·cβ + f·cγ),  c = min(chunkBytes, m), k = ⌈m/chunkBytes⌉
 *   double tree: the same with m/2 on each tree and both trees' messages on the links
 *
 * The root of each tree computes every element once and the others copy it, so all ranks end with the
 * same bits.
 *
 * @module
 */
import type { CollectiveContext } from "./comm.ts";
import { argChecks } from "./_checks.ts";
import { ceilLog2, chunks, partition } from "./_layout.ts";
import { Plan, type Step } from "./_schedule.ts";
import { binaryTree, doubleBinaryTree, type TreeLinks } from "./_trees.ts";

/** Adds one tree's reduce-then-broadcast of `parts` to `plan`; `key` orders the wire per pair. */
function planTree(
  plan: Plan,
  tree: TreeLinks,
  job: { parts: readonly Uint8Array[]; key: (phase: 0 | 1, chunk: number) => number },
): void {
  const { parts, key } = job;
  parts.forEach((chunk, c) => {
    let reduced: Step[] = [];
    for (const child of tree.children) {
      reduced = [plan.recvReduce(child, chunk, { after: reduced, key: key(0, c) })];
    }
    let final = reduced;
    if (tree.parent >= 0) {
      const up = plan.send(tree.parent, chunk, { after: reduced, key: key(0, c) });
      // The final chunk overwrites ours only after ours has left.
      final = [plan.recv(tree.parent, chunk, { after: [up], key: key(1, c) })];
    }
    for (const child of tree.children) plan.send(child, chunk, { after: final, key: key(1, c) });
  });
}

/**
 * All-reduces `buf` in place with a pipelined reduce and broadcast on one binary tree rooted at rank 0.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function treeAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const plan = new Plan(ctx);
  // One tree never sends both ways between two ranks, so insertion order is the wire order.
  planTree(plan, binaryTree(rank, size), { parts: chunks(ctx, buf), key: () => 0 });
  await plan.run();
}

/**
 * All-reduces `buf` in place on NCCL's double binary tree: the first half of the buffer on one tree, the
 * second half on its mirror, both at once.
 *
 * @param ctx The group's context; every rank calls with the same length.
 * @param buf The local contribution; holds the reduction afterwards.
 * @returns When this rank's result is complete.
 * @throws {RangeError} If `buf` is not a whole number of elements.
 */
export async function doubleTreeAllReduce(ctx: CollectiveContext, buf: Uint8Array): Promise<void> {
  argChecks(ctx, "all-reduce").buffer(buf);
  const { rank, size } = ctx.comm;
  if (size === 1 || buf.length === 0) return;
  const plan = new Plan(ctx);
  const half = partition(buf.length, { parts: 2, elemSize: ctx.elemSize });
  // Two ranks can be linked in both trees, in either direction, so both ends order each pair's messages
  // by (chunk, phase, tree). Broadcast chunks are keyed `lag` chunks later than reduce chunks so that the
  // reduce stream is not held up behind a broadcast that still waits for its round trip to the root.
  const lag = 2 * ceilLog2(size);
  doubleBinaryTree(rank, size).forEach((tree, t) => {
    const parts = chunks(ctx, buf.subarray(half[t], half[t + 1]));
    planTree(plan, tree, { parts, key: (phase, c) => ((c + phase * lag) * 2 + phase) * 2 + t });
  });
  await plan.run();
}
