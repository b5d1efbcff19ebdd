/**
 * Starting the `cpu` backend: what `init({ backend: "cpu" })` runs. The ranks meet through the shared
 * rendezvous (`../_rendezvous.ts`: a TCP store served by rank 0), each starts its engine (the
 * communication Worker and its transport: shared memory and the host segment when every rank shares this
 * host, TCP otherwise, or an in-process mesh), and the world group checks out of the store when it closes.
 *
 * @module
 */
import { SYS_MREMAP } from "../../ffi/libc/libc.ts";
import {
  checkSegmentLayout,
  DEFAULT_SEGMENT_LAYOUT,
  segmentAreaBytes,
  type SegmentLayout,
} from "../../transport/segment.ts";
import { environment, Rendezvous } from "../_rendezvous.ts";
import { defaultHostname, hostPort } from "../env.ts";
import { bytesText, debugLog, debugOn } from "../_debug.ts";
import type { InitOptions } from "../init.ts";
import type { EngineConfig } from "./_protocol.ts";
import { CpuProcessGroup } from "./cpu_group.ts";
import { EngineHandle } from "./_engine_handle.ts";
import { heartbeatMs } from "./_heartbeat.ts";
import { TimeoutError } from "../../core/errors.ts";

/** How long the rank serving the store keeps it after its connect phase timed out. */
const CONNECT_GRACE_MS = 1000;

/**
 * How the ranks of one host share memory for collectives (the cpu backend over shared memory): every
 * rank owns `buffers` buffers of `bufferBytes` that the others read, and calls of at most `inlineBytes`
 * run on the calling thread when nothing else is pending.
 *
 * @example Eight buffers per rank and a pool for `pg.alloc()`
 * ```ts
 * import { init, type SegmentOptions } from "@dcomm/dcomm";
 * const segment: SegmentOptions = { buffers: 8, bufferBytes: 1 << 20, poolBytes: 1 << 20 };
 * await using pg = await init({ rank: 0, worldSize: 1, env: {}, segment });
 * const grad = pg.alloc(1024); // in the pool when the ranks share a segment, else ordinary memory
 * await pg.allReduce(grad);
 * pg.release(grad);
 * ```
 *
 * @example Invalid options fail before any rank is met
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import assert from "node:assert/strict";
 * await assert.rejects(init({ rank: 0, worldSize: 1, env: {}, segment: { buffers: 3 } }), RangeError);
 * ```
 */
export interface SegmentOptions {
  /** Buffers per rank, a power of two. @default 4 */
  buffers?: number;
  /** Bytes per buffer, a multiple of 4096. @default 1048576 */
  bufferBytes?: number;
  /**
   * Bytes of each rank's pool, a multiple of 65536, for tensors from `pg.alloc()` that collectives use in
   * place (an all-reduce of pool tensors copies nothing). Reserved in /dev/shm up front. @default 0
   */
  poolBytes?: number;
  /** Calls whose input has at most this many bytes may run on the calling thread (when nothing else is pending; larger calls overlap with the caller's work on the communication thread). @default 16777216 */
  inlineBytes?: number;
  /** Milliseconds such a call spins for its peers before the communication thread takes it over. @default 4 */
  inlineSpinMs?: number;
  /** Milliseconds the communication thread spins on the segment before it sleeps. @default 0.2 */
  spinMs?: number;
}

/** The segment's layout (or `null`: no segment) and tuning, from `init`'s option and `DCOMM_SEGMENT`. */
function segmentConfig(
  option: boolean | SegmentOptions | undefined,
  vars: Readonly<Record<string, string | undefined>>,
): { layout: SegmentLayout | null; options: SegmentOptions } {
  // The segment's mappings need the mremap system call, known on x86_64 and aarch64.
  if (
    option === false || SYS_MREMAP === undefined || (option === undefined && vars["DCOMM_SEGMENT"] === "0")
  ) {
    return { layout: null, options: {} };
  }
  const options = typeof option === "object" ? option : {};
  const layout = checkSegmentLayout({
    buffers: options.buffers ?? DEFAULT_SEGMENT_LAYOUT.buffers,
    bufferBytes: options.bufferBytes ?? DEFAULT_SEGMENT_LAYOUT.bufferBytes,
    poolBytes: options.poolBytes ?? 0,
  });
  for (const key of ["inlineBytes", "inlineSpinMs", "spinMs"] as const) {
    const v = options[key];
    if (v !== undefined && !(v >= 0)) {
      throw new RangeError(`Invalid segment.${key}: expected a number >= 0, found ${v}`);
    }
  }
  return { layout, options };
}

/**
 * Joins this process to a world of the `cpu` backend: what `init({ backend: "cpu" })` runs.
 *
 * @param options `init`'s options.
 * @returns The world group.
 * @throws {RangeError} If the rank, world size, store address or segment options are missing or invalid.
 * @throws {TimeoutError} If the other ranks do not show up in time.
 */
export async function initCpu(options: InitOptions = {}): Promise<CpuProcessGroup> {
  const vars = environment(options);
  // Checked before anyone is met: a bad option fails here, not after the peers have connected.
  const segment = segmentConfig(options.segment, vars);
  const began = performance.now();
  const rendezvous = await Rendezvous.join({ ...options, env: vars });
  const { info, timeoutMs } = rendezvous;
  const met = performance.now();
  const inproc = options.inprocMesh !== undefined;
  let engine: EngineHandle;
  let config: EngineConfig;
  try {
    config = {
      rank: info.rank,
      size: info.worldSize,
      store: rendezvous.address,
      prefix: rendezvous.prefix,
      transport: inproc ? "inproc" : options.transport ?? vars["DCOMM_TRANSPORT"] ?? "auto",
      inprocMesh: options.inprocMesh,
      hostname: options.hostname ?? vars["DCOMM_HOSTNAME"] ?? defaultHostname(rendezvous.hostname),
      socketsPerPeer: options.socketsPerPeer ?? 1,
      tcpConnections: tcpConnections(vars["DCOMM_TCP_CONNECTIONS"]),
      timeoutMs,
      chunkBytes: options.chunkBytes ?? 1 << 20,
      checkCalls: options.checkCalls ?? true,
      heartbeatMs: heartbeatMs(vars["DCOMM_HEARTBEAT_MS"]),
      segment: segment.layout,
      segmentSpinMs: segment.options.spinMs ?? 0.2,
      phases: (vars["DCOMM_TIMELINE"] ?? "").trim() !== "",
      segmentInlineBytes: segment.options.inlineBytes,
      segmentInlineSpinMs: segment.options.inlineSpinMs,
    };
    engine = await EngineHandle.start(config);
  } catch (e) {
    // The others' connect phases began with this one's and time out a moment later: the rank serving the
    // store keeps it that moment, so that each says whom it waited for, not that the store went away.
    await rendezvous.abandon(e instanceof TimeoutError ? CONNECT_GRACE_MS : 0);
    throw e;
  }
  rendezvous.formed();
  if (debugOn("info")) {
    describeWorld(rendezvous, engine, segment.layout, met - began, performance.now() - met);
  }
  return new CpuProcessGroup(engine, {
    id: 0,
    ranks: Array.from({ length: info.worldSize }, (_, i) => i),
    globalRank: info.rank,
    timeoutMs,
    onClose: (failed: boolean) => rendezvous.checkOut("", failed),
    store: { store: rendezvous.store, prefix: rendezvous.prefix },
    deterministic: options.deterministic ?? false,
    // A new world of some of these ranks (shrink): the same engine, connected anew under its own prefix.
    reform: inproc
      ? undefined
      : (rank, size, prefix) => EngineHandle.start({ ...config, rank, size, prefix }),
  });
}

/** `DCOMM_DEBUG=info`: how this rank met the others, over what, and (rank 0) the hosts and the segment. */
function describeWorld(
  rendezvous: Rendezvous,
  engine: EngineHandle,
  layout: SegmentLayout | null,
  meetMs: number,
  connectMs: number,
): void {
  const { info, address, prefix, server } = rendezvous;
  const me = { rank: info.rank, size: info.worldSize };
  debugLog(
    "info",
    me,
    `rendezvous: ${address.protocol} store at ${hostPort(address.hostname, address.port)} ` +
      `(${server ? "served by this rank" : "joined"}, ${address.secret ? "with" : "without"} a secret, ` +
      `prefix ${prefix}); ${info.worldSize} ranks met in ${meetMs.toFixed(0)} ms, connected in ` +
      `${connectMs.toFixed(0)} ms; transport ${engine.transport}`,
  );
  if (info.rank !== 0) return;
  const byHost = new Map<number, number[]>();
  engine.hosts.forEach((h, r) => byHost.set(h, [...(byHost.get(h) ?? []), r]));
  const runs = (ranks: number[]): string => {
    const parts: string[] = [];
    for (let i = 0; i < ranks.length;) {
      let j = i;
      while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) j++;
      parts.push(i === j ? `${ranks[i]}` : `${ranks[i]}-${ranks[j]}`);
      i = j + 1;
    }
    return parts.join(",");
  };
  debugLog(
    "info",
    me,
    `hosts: ${byHost.size} (${[...byHost].map(([h, rs]) => `host ${h}: ranks ${runs(rs)}`).join("; ")})`,
  );
  debugLog(
    "info",
    me,
    engine.segment === undefined
      ? `host segment: none (${layout === null ? "turned off" : `transport ${engine.transport}`})`
      : `host segment: ${layout?.buffers} buffers of ${bytesText(layout?.bufferBytes ?? 0)}, pool ` +
        `${bytesText(layout?.poolBytes ?? 0)}: ${bytesText(segmentAreaBytes(layout as SegmentLayout))} per ` +
        "rank (its area in /dev/shm)",
  );
}

/** `DCOMM_TCP_CONNECTIONS`: `eager`, `lazy` or `auto` (the default, also when unset or empty). */
function tcpConnections(value: string | undefined): "eager" | "lazy" | "auto" {
  const v = value?.trim() ?? "";
  if (v === "") return "auto";
  if (v === "eager" || v === "lazy" || v === "auto") return v;
  throw new TypeError(
    `Invalid DCOMM_TCP_CONNECTIONS: expected "eager", "lazy" or "auto", found ${JSON.stringify(value)}`,
  );
}
