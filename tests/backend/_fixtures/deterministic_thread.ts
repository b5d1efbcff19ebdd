/**
 * `deterministic_rank.ts`'s cases on a thread of `spawnThreads` (the in-process transport): the same
 * hashes, made by the ordered algorithms with 64-byte chunks.
 *
 * @module
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { runCases } from "./deterministic_cases.ts";

/** Runs the cases on this thread's group. */
export async function main(pg: ProcessGroup): Promise<unknown> {
  return { rank: pg.rank, hashes: await runCases(pg, "det") };
}
