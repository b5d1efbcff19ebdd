/** A rank of threads trying to shrink: refused (one in-process mesh cannot connect anew). */
import type { ProcessGroup } from "../../../backend/process_group.ts";

/** Returns shrink's error. */
export async function main(pg: ProcessGroup): Promise<string> {
  return await pg.shrink().then(() => "no error", (e) => `${(e as Error).name}: ${(e as Error).message}`);
}
