/**
 * A compressed all-reduce on the communication thread: the codec (`collectives/compressed_*.ts`, or
 * `compressed_hierarchical.ts` between hosts only) runs here, on this thread's kernels, on the
 * {@linkcode HostsCompressedContext} this file makes of the engine: each collective the codec runs is a
 * call of its own through the engine (the segment or messages, as "auto" picks), its descriptor carrying
 * the codec and the stage, and a sub-communicator is a group the engine registers on first use. The state
 * arrays are the caller's, reached by address. Its report sums what the stages sent.
 *
 * @module
 */
import { PHASE_CODEC, timePhase } from "../../core/phases.ts";
import { dtypeSize } from "../../core/dtype.ts";
import {
  type CodecKernels,
  CODECS,
  type CompressedCall,
  floats,
} from "../../collectives/compressed_context.ts";
import {
  COMPRESSED_ALL_REDUCE,
  hierarchicalCompressedAllReduce,
  type HostsCompressedContext,
  type SubgroupContext,
} from "../../collectives/mod.ts";
import { compressionKernels } from "../../wasm/compress.ts";
import { kernels as loadKernels } from "../../wasm/kernels.ts";
import { type WorkReport, workReport } from "../work.ts";
import type { CodecEngine } from "./engine.ts";
import type { GroupState } from "./_groups.ts";
import type { CompressionRequest, OpRequest, Region } from "./_protocol.ts";
import { ScratchPool } from "./_scratch.ts";

/** The collectives a codec's stage may be. */
type StageCollective = "allToAll" | "allGather" | "allReduce" | "reduce" | "broadcast";

/**
 * Stage numbers in descriptors: between hosts, 1 is the host's reduce and 15 its broadcast (the ranks that
 * are not first on their host run no codec stage in between); the codec's stages count from 1, or from 2
 * once the group is split between hosts.
 */
const REDUCE_STAGE = 1, BROADCAST_STAGE = 15;

/** The compressed all-reduces of one engine: the codecs' kernels and scratch, made once. */
export class CompressedAllReduce {
  #kernels: Promise<CodecKernels> | undefined;
  /** Shared, since the collectives it feeds take regions of SharedArrayBuffers; zeroed on every take. */
  readonly #scratch = new ScratchPool({ shared: true, zeroed: true });

  /**
   * Runs one.
   *
   * @param engine The engine it runs on.
   * @param op The call.
   * @param c Its codec and state.
   * @returns Its report: the first stage's algorithm, the bytes every stage sent.
   */
  async run(engine: CodecEngine, op: OpRequest, c: CompressionRequest): Promise<WorkReport> {
    const outer = engine.groups.get(op.group);
    const kernels = await (this.#kernels ??= codecKernels());
    const f32 = (region: OpRequest["input"]): Float32Array | undefined => {
      const v = engine.view(region);
      return v && floats(v);
    };
    const tensor = f32(op.input) as Float32Array;
    const code = CODECS.indexOf(c.codec) + 1;
    const scratch = this.#scratch;
    scratch.reset();
    const reports: WorkReport[] = [];
    let next = 1;
    const stage = async (
      on: GroupState,
      collective: StageCollective,
      dtype: "uint8" | "float32",
      input: Uint8Array,
      output?: Uint8Array,
    ): Promise<void> => {
      const number = collective === "reduce"
        ? REDUCE_STAGE
        : collective === "broadcast"
        ? BROADCAST_STAGE
        : next++;
      reports.push(
        await engine.run({
          ...op,
          group: on.id,
          collective,
          dtype,
          op: "sum",
          root: 0,
          algorithm: "auto",
          servers: undefined,
          count: input.byteLength / dtypeSize(dtype),
          input: region(input),
          output: output && region(output),
          compression: undefined,
          stage: code + 16 * number,
        }),
      );
    };
    const context = (on: GroupState): HostsCompressedContext & SubgroupContext => ({
      rank: on.index,
      size: on.ranks.length,
      kernels,
      hosts: on.hosts,
      allToAll: (input, output) => stage(on, "allToAll", "uint8", input, output),
      allGather: (input, output) => stage(on, "allGather", "uint8", input, output),
      allReduce: (data) => stage(on, "allReduce", "float32", bytesOf(data)),
      reduce: (data) => stage(on, "reduce", "float32", bytesOf(data)),
      broadcast: (data) => stage(on, "broadcast", "float32", bytesOf(data)),
      scratch: (bytes) => scratch.take(bytes),
      split: (members, key) => {
        next = Math.max(next, REDUCE_STAGE + 1);
        return context(engine.groups.within(outer, key, members.map((q) => on.ranks[q])));
      },
    });
    const startedAt = performance.timeOrigin + performance.now();
    const t0 = performance.now();
    try {
      const call: CompressedCall = {
        tensor,
        average: op.op === "avg",
        blockSize: c.blockSize,
        k: c.k,
        rank: c.rank,
        matrices: c.matrices,
        residual: f32(c.residual),
        serverResidual: f32(c.serverResidual),
        q: f32(c.q),
      };
      const codec = COMPRESSED_ALL_REDUCE[c.codec];
      const ctx = context(outer);
      await (c.interHost ? hierarchicalCompressedAllReduce(ctx, call, { codec }) : codec(ctx, call));
    } catch (e) {
      // A kernel that threw on this rank would leave its peers waiting: every rank learns why.
      throw engine.fatal(e);
    }
    const t1 = performance.now();
    return workReport({
      collective: "allReduce",
      algorithm: reports[0]?.algorithm ?? "segment",
      transport: engine.transport,
      bytes: op.count * 4,
      bytesSent: reports.reduce((sum, r) => sum + r.bytesSent, 0),
      timeMs: t1 - t0,
      startedAt,
      finishedAt: performance.timeOrigin + t1,
      compression: c.codec,
    });
  }
}

/** Bytes of the codec's scratch, as a call names them. */
function region(bytes: Uint8Array): Region {
  return {
    buffer: bytes.buffer as SharedArrayBuffer,
    byteOffset: bytes.byteOffset,
    byteLength: bytes.byteLength,
  };
}

function bytesOf(data: Float32Array): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The codecs' kernels on this thread: the compression kernels and the BLAS-like ones. */
async function codecKernels(): Promise<CodecKernels> {
  const [c, k] = await Promise.all([compressionKernels(), loadKernels()]);
  // Every codec kernel's time is the call's codec phase (`core/phases.ts`).
  const t = <A extends unknown[], R>(f: (...a: A) => R) => (...a: A): R =>
    timePhase(PHASE_CODEC, () => f(...a));
  return {
    quantizeInt8: t((src, options) => c.quantizeInt8(src, options)),
    dequantizeInt8: t((packed, dst, options) => c.dequantizeInt8(packed, dst, options)),
    signCompress: t((src, residual, options) => c.signCompress(src, residual, options)),
    signDecompress: t((packed, dst, options) => c.signDecompress(packed, dst, options)),
    topK: t((src, n, options) => c.topK(src, n, options)),
    scatterAdd: t((dst, sparse) => c.scatterAdd(dst, sparse)),
    divide: t((dst, divisor) => k.divide(dst, divisor)),
    axpy: t((y, x, options) => k.axpy(y, x, options)),
    scale: t((x, alpha) => k.scale(x, alpha)),
    matmul: t((a, b, options) => k.matmul(a, b, options)),
  };
}
