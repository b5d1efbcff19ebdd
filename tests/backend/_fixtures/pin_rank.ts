/**
 * A rank of the pinning test: an all-reduce large enough to run on the communication thread (cpu) or as
 * MPI's non-blocking call (mpi), reaching the tensor by address, and, while it runs, attempts to detach
 * the tensor's buffer. Runs as a thread (`main`) or a launched process (`RESULT {json}`; `mpi` as its
 * argument: the mpi backend).
 *
 * @module
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";

/** What a rank saw. */
export interface PinResult {
  /** How `buffer.transfer()` ended while the call ran: the error's name, or "transferred". */
  transfer: string;
  /** The same for `structuredClone` with the buffer in its transfer list. */
  clone: string;
  /** The same for `postMessage` with the buffer in its transfer list. */
  post: string;
  /** `transfer()` once the call was done. */
  after: string;
  /** Elements of the result that are wrong (or missing). */
  wrong: number;
}

function attempt(f: () => unknown): string {
  try {
    f();
    return "transferred";
  } catch (e) {
    return (e as Error).name;
  }
}

export async function main(pg: ProcessGroup): Promise<PinResult> {
  const n = 6 << 20; // 24 MiB: above what runs on the calling thread
  const t = new Float32Array(n).fill(pg.rank + 1);
  const work = pg.allReduce(t);
  const channel = new MessageChannel();
  const result = {
    transfer: attempt(() => t.buffer.transfer()),
    clone: attempt(() => structuredClone(t.buffer, { transfer: [t.buffer] })),
    post: attempt(() => channel.port1.postMessage(t.buffer, [t.buffer])),
  };
  channel.port1.close();
  channel.port2.close();
  await work;
  const expected = (pg.size * (pg.size + 1)) / 2;
  let wrong = n - t.length;
  for (let i = 0; i < t.length; i++) if (t[i] !== expected) wrong++;
  return { ...result, after: attempt(() => t.buffer.transfer()), wrong };
}

if (import.meta.main) {
  const { init } = await import("../../../backend/init.ts");
  const pg = await init(Deno.args[0] === "mpi" ? { backend: "mpi" } : {});
  const result = await main(pg);
  await pg.close();
  console.log(`RESULT ${JSON.stringify(result)}`);
}
