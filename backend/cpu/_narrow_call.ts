/**
 * An all-reduce that travels in a narrower dtype (`commDtype`), on the communication thread: the tensor
 * is cast down into a buffer of this thread's (divided by the group size first for `avg`, so that the
 * narrow sum cannot overflow where the average does not), that buffer is all-reduced (sum) as a call of
 * its own dtype, so its descriptor carries the narrow dtype, and the result is cast back into the tensor.
 *
 * @module
 */
import type { WorkReport } from "../work.ts";
import type { CodecEngine } from "./engine.ts";
import type { OpRequest } from "./_protocol.ts";

/** The narrow all-reduces of one engine, and the buffer they travel in (grown, never shrunk). */
export class NarrowAllReduce {
  #buffer: SharedArrayBuffer | undefined;

  /**
   * Runs one.
   *
   * @param engine The engine it runs on.
   * @param op The call, with its `commDtype`.
   * @returns The report of the narrow all-reduce.
   */
  async run(engine: CodecEngine, op: OpRequest): Promise<WorkReport> {
    const narrow = op.commDtype as "float16" | "bfloat16";
    const group = engine.groups.get(op.group);
    const tensor = engine.view(op.input) as Uint8Array;
    const bytes = op.count * 2;
    let buffer = this.#buffer;
    if (buffer === undefined || buffer.byteLength < bytes) {
      buffer = this.#buffer = new SharedArrayBuffer(Math.max(bytes, (buffer?.byteLength ?? 0) * 2));
    }
    const wire = new Uint8Array(buffer, 0, bytes);
    engine.reducer.narrow(narrow, tensor, wire, op.op === "avg" ? group.ranks.length : 1);
    const report = await engine.run({
      ...op,
      dtype: narrow,
      op: op.op === "avg" ? "sum" : op.op,
      commDtype: undefined,
      input: { buffer, byteOffset: 0, byteLength: bytes },
      output: undefined,
    });
    engine.reducer.widen(narrow, wire, tensor);
    return report;
  }
}
