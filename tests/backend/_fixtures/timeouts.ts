/**
 * A rank of the per-call timeout test (run by `spawnThreads`): calls with the group's long timeout, then,
 * on rank 0 only, a call with a short one that no other rank joins. Returns how that call ended.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";

/** What rank 0 saw. */
export interface TimeoutResult {
  /** The short call's error message, or "" if it did not fail. */
  message: string;
  /** How long the short call took, in ms. */
  ms: number;
}

export async function main(pg: ProcessGroup): Promise<TimeoutResult | undefined> {
  const x = new Float32Array(16);
  // Calls with the default (long) timeout arm the engine's one timer far ahead.
  for (let i = 0; i < 20; i++) await pg.allReduce(x);
  if (pg.rank !== 0) {
    // Stay (without joining) until rank 0's short call has timed out: closing would fail it otherwise.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    return undefined;
  }
  const t0 = performance.now();
  try {
    await pg.allReduce(x, { timeoutMs: 400 });
    return { message: "", ms: performance.now() - t0 };
  } catch (e) {
    return { message: (e as Error).message, ms: performance.now() - t0 };
  }
}
