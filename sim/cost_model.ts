/**
 * The alpha-beta-gamma cost model of every collective algorithm in `collectives/`: α seconds per message,
 * β seconds per byte on a rank's link (each direction), γ seconds per byte reduced. One function per
 * algorithm predicts the seconds for n ranks and m bytes; each states the same formula as the comment at
 * the top of its algorithm's file. {@linkcode fitConstants} and {@linkcode fitSegmentConstants} fit the
 * constants to timings.
 *
 * This module knows no algorithm names: each algorithm's descriptor in `collectives/algorithms.ts` names
 * its cost function, and `collectives/mod.ts` builds the lookup by name from them (`COST_FUNCTIONS`,
 * `predict`) that `"auto"` uses.
 *
 * The model counts a chunked message as k messages (k = ⌈bytes/chunkBytes⌉) and charges every rank's
 * sends and receives to its own link, unless the shape gives `hosts`: then the ranks of a host share its
 * link (the hierarchical and tree costs, and the flat algorithms whose ranks send across hosts at once) and
 * messages within a host take the intra constants. Contention beyond that (many flows into one link, a
 * machine's CPUs) it does not know: it ranks algorithms rather than promising seconds.
 *
 * What `bytes` means, as in nccl-tests: the buffer for all-reduce, broadcast and reduce; the whole n-block
 * buffer (the output of all-gather and gather, the input of reduce-scatter, scatter and all-to-all) for the
 * others.
 *
 * @example Ring against tree for 64 MiB on 16 ranks over TCP
 * ```ts
 * import { DEFAULT_TCP_CONSTANTS, ringAllReduceCost, treeAllReduceCost } from "./cost_model.ts";
 * import assert from "node:assert/strict";
 * const shape = { size: 16, bytes: 64 << 20 };
 * const k = DEFAULT_TCP_CONSTANTS;
 * assert.ok(ringAllReduceCost(shape, k) < treeAllReduceCost(shape, k));
 * ```
 *
 * @module
 */
import { MEASURED_CONSTANTS } from "./measured.ts";
import { treeShape } from "./trees.ts";

/** Per-message latency, inverse bandwidth and inverse reduction throughput. */
export interface CostConstants {
  /** Seconds per message (latency). */
  readonly alpha: number;
  /** Seconds per byte moved over a rank's link, each direction. */
  readonly beta: number;
  /** Seconds per byte reduced. */
  readonly gamma: number;
}

/** The shape of one collective call. */
export interface CostShape {
  /** Ranks in the group (n). */
  readonly size: number;
  /** Bytes (m); see the module doc for what they count per collective. */
  readonly bytes: number;
  /** The pipelining chunk, as `ctx.chunkBytes`. @default DEFAULT_CHUNK_BYTES */
  readonly chunkBytes?: number;
  /** Parameter servers for the `ps` all-reduce. @default size */
  readonly servers?: number;
  /**
   * The host of each rank (equal numbers share a host), for the topology-aware algorithms; the constants
   * passed are then those of the links between hosts.
   * @default every rank its own host
   */
  readonly hosts?: readonly number[];
  /** The constants within a host, with `hosts`. @default the constants between hosts */
  readonly intra?: CostConstants;
}

/** A model of one algorithm: predicted seconds for a call shape and constants. */
export type CostFunction = (shape: CostShape, constants: CostConstants) => number;

/** The chunk size assumed when a shape names none (the backend should pass its own `chunkBytes`). */
export const DEFAULT_CHUNK_BYTES = 256 * 1024;

/** The TCP transport's constants, as `deno task bench:calibrate` measured them (see `measured.ts`). */
export const DEFAULT_TCP_CONSTANTS: CostConstants = MEASURED_CONSTANTS.tcp;
/**
 * The host segment's constants (`transport/segment.ts`): α is one synchronisation through a counter, β
 * seconds per byte copied into or out of a buffer, γ seconds per byte read by a reduction. Measured (see
 * `measured.ts`).
 */
export const DEFAULT_SEGMENT_CONSTANTS: CostConstants = MEASURED_CONSTANTS.segment;
/** The shared-memory transport's constants, measured (see `measured.ts`). */
export const DEFAULT_SHM_CONSTANTS: CostConstants = MEASURED_CONSTANTS.shm;
/** The in-process transport's constants: it shares the shm ring code and takes the shm measurement. */
export const DEFAULT_INPROC_CONSTANTS: CostConstants = MEASURED_CONSTANTS.inproc;

/** The transports with default constants. */
export type TransportKind = "tcp" | "shm" | "inproc";

/** The measured constants by transport kind, used when a caller asks for `"auto"`. */
export const DEFAULT_CONSTANTS: Readonly<Record<TransportKind, CostConstants>> = MEASURED_CONSTANTS;

/** The chunk of the segment algorithms when a shape names none: the default buffer of 1 MiB. */
export const DEFAULT_SEGMENT_CHUNK_BYTES = 1 << 20;

// ---- helpers -------------------------------------------------------------------------------------

/** Messages needed for `bytes` in chunks of `chunk` (which may be Infinity): 0 for nothing, else ≥ 1. */
function msgs(bytes: number, chunk: number): number {
  return bytes > 0 ? Math.max(1, Math.ceil(bytes / chunk)) : 0;
}

function ceilLog2(n: number): number {
  let rounds = 0;
  for (let p = 1; p < n; p *= 2) rounds++;
  return rounds;
}

function floorPow2(n: number): number {
  let p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

function unpack(shape: CostShape): { n: number; m: number; chunk: number } {
  const { size, bytes, chunkBytes = DEFAULT_CHUNK_BYTES } = shape;
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`Expected size ≥ 1, found ${size}`);
  if (!(bytes >= 0)) throw new RangeError(`Expected bytes ≥ 0, found ${bytes}`);
  if (!(chunkBytes > 0)) throw new RangeError(`Expected chunkBytes > 0, found ${chunkBytes}`);
  return { n: size, m: bytes, chunk: chunkBytes };
}

// ---- all-reduce ----------------------------------------------------------------------------------

/** Ring all-reduce: `2(n−1)·k·α + 2·(n−1)/n·m·β + (n−1)/n·m·γ`, k = ⌈m/(n·chunkBytes)⌉. */
export function ringAllReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const { alpha, beta, gamma } = constants;
  const k = msgs(m / n, chunk);
  return 2 * (n - 1) * k * alpha + 2 * ((n - 1) / n) * m * beta + ((n - 1) / n) * m * gamma;
}

/**
 * What the chunks of the given trees (each a parent by rank, −1 at the root, and a level by rank) put on
 * the links, with `hosts` (ranks of a host share its link; messages within a host take the intra
 * constants) or without (every rank its own link). `fill`: the first chunk's way up, summed over the
 * levels (a parent collects its children at its level; each level costs its busiest link's chunks, out or
 * in); `steady`: a chunk of every tree, up and down, on the busiest link each way; `messages`: the most
 * messages a rank sends or receives per chunk of every tree; `reduced`: the most children a rank reduces.
 * Each count is [across hosts, within a host].
 */
function treeLoads(
  trees: readonly { parent: readonly number[]; level: readonly number[] }[],
  hostOf: readonly number[],
): { fill: [number, number]; steady: [number, number]; messages: number; reduced: number } {
  const n = hostOf.length;
  const levels = Math.max(...trees.flatMap((t) => t.level));
  // Per link (a host's across hosts, a rank's within), the messages out and in.
  const count = (edges: readonly [number, number][]): [number, number] => {
    const out = new Map<string, number>(), into = new Map<string, number>();
    const bump = (m: Map<string, number>, k: string): void => void m.set(k, (m.get(k) ?? 0) + 1);
    for (const [from, to] of edges) {
      const across = hostOf[from] !== hostOf[to];
      bump(out, across ? `h${hostOf[from]}` : `r${from}`);
      bump(into, across ? `h${hostOf[to]}` : `r${to}`);
    }
    const most = (prefix: string): number =>
      Math.max(0, ...[...out, ...into].filter(([k]) => k[0] === prefix).map(([, v]) => v));
    return [most("h"), most("r")];
  };
  const up = trees.flatMap((t) =>
    t.parent.flatMap((p, r) => p >= 0 ? [[r, p, t.level[p]] as [number, number, number]] : [])
  );
  const fill: [number, number] = [0, 0];
  for (let level = 1; level <= levels; level++) {
    const [across, within] = count(up.filter((e) => e[2] === level).map(([c, p]) => [c, p]));
    fill[0] += across;
    fill[1] += within;
  }
  const both = up.flatMap(([c, p]) => [[c, p], [p, c]] as [number, number][]);
  const perRank = new Array(n).fill(0), kids = new Array(n).fill(0);
  for (const [c, p] of up) {
    perRank[c]++;
    perRank[p]++;
    kids[p]++;
  }
  return { fill, steady: count(both), messages: Math.max(...perRank), reduced: Math.max(...kids) };
}

/** The pipelined trees' cost (see {@linkcode treeAllReduceCost}) for `m` bytes on each of `trees`. */
function treesCost(shape: CostShape, constants: CostConstants, trees: 1 | 2): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const shapes = trees === 1 ? [treeShape(0, n)] : [treeShape(0, n), treeShape(1, n)];
  const hostOf = shape.hosts ?? Array.from({ length: n }, (_, r) => r);
  const { fill, steady, messages, reduced } = treeLoads(shapes, hostOf);
  const intra = shape.intra ?? constants;
  const { alpha, beta, gamma } = constants;
  const part = m / trees;
  const c = Math.min(chunk, part);
  const k = msgs(part, chunk);
  const d = Math.max(...shapes[0].level);
  const climb = Math.max(fill[0] * c * beta, fill[1] * c * intra.beta);
  const perChunk = Math.max(steady[0] * c * beta, steady[1] * c * intra.beta);
  return 2 * d * alpha + 2 * climb + d * c * gamma +
    (k - 1) * (messages * alpha + perChunk + reduced * c * gamma);
}

/**
 * Pipelined binary-tree all-reduce (the in-order tree of `sim/trees.ts`), c = min(chunkBytes, m),
 * k = ⌈m/chunkBytes⌉, D the height: `2D·α + 2F·cβ + D·cγ + (k−1)·(w·α + S·cβ + f·cγ)`. F: the first
 * chunk's way up on the busiest link of each level, summed (a parent takes its two children's chunks on
 * its link: 3 for n = 4, 5 for n = 8, one rank per host); S: the busiest link's chunks each way once the
 * pipeline is full (3: an interior rank's two children and parent); w the most messages of a rank, f the
 * most children it reduces. With `hosts`, a host's ranks share its link and messages within a host take the
 * intra constants.
 */
export function treeAllReduceCost(shape: CostShape, constants: CostConstants): number {
  return treesCost(shape, constants, 1);
}

/**
 * Double-binary-tree all-reduce: m/2 on each tree, both trees' chunks at once, priced as
 * {@linkcode treeAllReduceCost} with both trees' messages on the links (S = 4 for an interior rank of one
 * tree that is a leaf of the other), c = min(chunkBytes, m/2), k = ⌈(m/2)/chunkBytes⌉.
 */
export function doubleTreeAllReduceCost(shape: CostShape, constants: CostConstants): number {
  return treesCost(shape, constants, 2);
}

/**
 * Rabenseifner all-reduce: `Σ_{i=1..L} [2·k(m/2^i)·α + 2·(m/2^i)·β + (m/2^i)·γ]` over L = log2 p rounds,
 * p the largest power of two ≤ n, plus `2·k(m)·α + 2·m·β + m·γ` for the fold and unfold when p < n. With
 * `hosts` of R ranks each (contiguous, a power of two), a round whose partners are R or more ranks apart
 * crosses hosts with all R ranks of a host at once, so each pays `R·β` on the shared link; the rounds
 * within a host pay the intra constants.
 */
export function halvingDoublingAllReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const { alpha, beta, gamma } = constants;
  const p = floorPow2(n);
  const share = linkShare(shape, n);
  let t = 0;
  // Halving from mask p/2 down (bytes m/2, m/4, ...), and doubling back up with the same bytes per mask.
  for (let part = m / 2, mask = p / 2; mask >= 1; mask /= 2, part /= 2) {
    const across = share === undefined || mask >= share.perHost;
    const k = across ? constants : (shape.intra ?? constants);
    const b = across && share !== undefined ? k.beta * share.perHost : k.beta;
    t += 2 * msgs(part, chunk) * k.alpha + 2 * part * b + part * k.gamma;
  }
  if (p < n) t += 2 * msgs(m, chunk) * alpha + 2 * m * beta + m * gamma;
  return t;
}

/**
 * How several ranks of a host share its link, for the flat algorithms' costs: with `hosts` of R ranks
 * each, contiguous, more than one host and R > 1, R and the share of each rank's peers that are on other
 * hosts; undefined otherwise (every rank has a link of its own).
 */
function linkShare(shape: CostShape, n: number): { perHost: number; offHost: number } | undefined {
  const counts = hostCounts(shape.hosts, n);
  const R = counts[0];
  if (counts.length === 1 || R === 1 || counts.some((c) => c !== R)) return undefined;
  const contiguous = (shape.hosts as readonly number[]).every((h, r) =>
    r === 0 || h === (shape.hosts as readonly number[])[r - 1] || r % R === 0
  );
  if (!contiguous) return undefined;
  return { perHost: R, offHost: (n - R) / (n - 1) };
}

/**
 * Parameter-server all-reduce with S servers: `2(n−1)·k·α + 2(n−1)·(m/S)·β + (n−1)·(m/S)·γ`,
 * k = ⌈m/(S·chunkBytes)⌉; co-located on hosts of R ranks, β·R·(n−R)/(n−1) (the ranks of a host share its
 * link).
 */
export function psAllReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  const s = shape.servers ?? n;
  if (!Number.isInteger(s) || s < 1 || s > n) throw new RangeError(`Expected servers in 1..${n}, found ${s}`);
  if (n === 1 || m === 0) return 0;
  const { alpha, gamma } = constants;
  const shard = m / s;
  // Co-located servers on hosts of R ranks: a host's link carries its R ranks' traffic to the servers
  // on other hosts, R·(n−R)/(n−1) times one rank's.
  const share = s === n ? linkShare(shape, n) : undefined;
  const beta = share === undefined ? constants.beta : constants.beta * share.perHost * share.offHost;
  return 2 * (n - 1) * msgs(shard, chunk) * alpha + 2 * (n - 1) * shard * beta + (n - 1) * shard * gamma;
}

/**
 * Direct all-reduce: `(n−1)·k·α + (n−1)·m·β + (n−1)·m·γ`, k = ⌈m/chunkBytes⌉; on hosts of R ranks,
 * β·R·(n−R)/(n−1).
 */
export function directAllReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const { alpha, gamma } = constants;
  // On hosts of R ranks, a host's link carries what its R ranks send to the others' hosts.
  const share = linkShare(shape, n);
  const beta = share === undefined ? constants.beta : constants.beta * share.perHost * share.offHost;
  return (n - 1) * msgs(m, chunk) * alpha + (n - 1) * m * beta + (n - 1) * m * gamma;
}

/**
 * Hierarchical all-reduce (`collectives/hierarchical_allreduce.ts`), H hosts, L_h ranks on host h. With
 * the same L on every host, the 2D scheme: an intra-host ring reduce-scatter and all-gather, run in H
 * slices (`W = 2(L−1)·H·α_i + 2·(L−1)/L·m·β_i + (L−1)/L·m·γ`), and, between, a ring all-reduce of each
 * rank's shard among the H ranks of its index, the L shards of a host sharing its link (`β·L` each):
 * `A = 2(H−1)·k·α + 2·(H−1)/H·m·β + (H−1)/H·(m/L)·γ`; pipelined, `T = W/H + max(A, W·(H−1)/H)`. With
 * uneven hosts, the leaders' scheme, pipelined the same way: A a ring all-reduce of m among the H leaders,
 * W = (L−1)·(2H·α_i + 2m·β_i + m·γ) on the largest host's leader (L−1 contributions of each of H segments in,
 * each segment back out). Without hosts (or one host, or one rank per host) it is the ring's cost.
 */
export function hierarchicalAllReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const counts = hostCounts(shape.hosts, n);
  const H = counts.length, L = Math.max(...counts);
  if (H === 1 || L === 1) return ringAllReduceCost(shape, constants);
  const intra = shape.intra ?? constants;
  // The intra-host stages run slice by slice (H slices), behind the ring between hosts: only the first
  // slice's reduce-scatter (or gathering into the leader) and the last one's all-gather (or return) are not
  // hidden.
  const pipelined = (within: number, across: number): number =>
    within / H + Math.max(across, (within * (H - 1)) / H);
  if (counts.every((c) => c === L)) {
    const within = 2 * (L - 1) * H * intra.alpha + 2 * ((L - 1) / L) * m * intra.beta +
      ((L - 1) / L) * m * intra.gamma;
    const shard = m / L;
    return pipelined(
      within,
      ringAllReduceCost({ size: H, bytes: shard, chunkBytes: chunk }, {
        alpha: constants.alpha,
        beta: constants.beta * L,
        gamma: constants.gamma,
      }),
    );
  }
  // Uneven hosts, through leaders: the largest host's leader takes and reduces L−1 contributions of each
  // segment and sends each back, over its own link within the host; the leaders' ring moves all of m.
  const within = (L - 1) * (2 * H * intra.alpha + 2 * m * intra.beta + m * intra.gamma);
  return pipelined(within, ringAllReduceCost({ size: H, bytes: m, chunkBytes: chunk }, constants));
}

/** Ranks per host, by host (in order of first appearance); every rank its own host without a map. */
function hostCounts(hosts: readonly number[] | undefined, n: number): number[] {
  if (hosts === undefined) return new Array(n).fill(1);
  const count = new Map<number, number>();
  for (const h of hosts) count.set(h, (count.get(h) ?? 0) + 1);
  return [...count.values()];
}

// ---- all-gather and reduce-scatter ---------------------------------------------------------------

/** Ring all-gather (m = output bytes): `(n−1)·k·α + (n−1)/n·m·β`, k = ⌈m/(n·chunkBytes)⌉. */
export function ringAllGatherCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  return (n - 1) * (msgs(b, chunk) * constants.alpha + b * constants.beta);
}

/**
 * Recursive-doubling / Bruck all-gather (m = output bytes): `Σ_i k(cnt_i·b)·α + (n−1)/n·m·β`, b = m/n,
 * rounds i = 0..⌈log2 n⌉−1 moving cnt_i = min(2^i, n − 2^i) blocks.
 */
export function recursiveDoublingAllGatherCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  let t = 0;
  for (let d = 1; d < n; d *= 2) {
    const cnt = Math.min(d, n - d);
    t += msgs(cnt * b, chunk) * constants.alpha + cnt * b * constants.beta;
  }
  return t;
}

/** Ring reduce-scatter (m = input bytes): `(n−1)·k·α + (n−1)/n·m·β + (n−1)/n·m·γ`, k = ⌈m/(n·chunkBytes)⌉. */
export function ringReduceScatterCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  return (n - 1) * (msgs(b, chunk) * constants.alpha + b * constants.beta + b * constants.gamma);
}

/**
 * Recursive-halving reduce-scatter (m = input bytes): `Σ_{i=1..L} [k(m/2^i)·α + (m/2^i)·(β + γ)]`, L =
 * log2 p, plus `k(m)·α + m·(β + γ) + k(m/n)·α + (m/n)·β` for the fold and unfold when p < n.
 */
export function halvingReduceScatterCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const { alpha, beta, gamma } = constants;
  const p = floorPow2(n);
  let t = 0;
  for (let part = m / 2, i = 1; i < p; i *= 2, part /= 2) {
    t += msgs(part, chunk) * alpha + part * (beta + gamma);
  }
  if (p < n) t += msgs(m, chunk) * alpha + m * (beta + gamma) + msgs(m / n, chunk) * alpha + (m / n) * beta;
  return t;
}

// ---- rooted, all-to-all, barrier -----------------------------------------------------------------

/** Binomial broadcast: `⌈log2 n⌉·(k·α + m·β)`, k = ⌈m/chunkBytes⌉. */
export function binomialBroadcastCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  return ceilLog2(n) * (msgs(m, chunk) * constants.alpha + m * constants.beta);
}

/** Pipelined chain broadcast: `(n − 2 + k)·(α + c·β)`, c = min(chunkBytes, m), k = ⌈m/chunkBytes⌉. */
export function chainBroadcastCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  return (n - 2 + msgs(m, chunk)) * (constants.alpha + Math.min(chunk, m) * constants.beta);
}

/** Binomial reduce: `⌈log2 n⌉·(k·α + m·β + m·γ)`, k = ⌈m/chunkBytes⌉. */
export function binomialReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const { alpha, beta, gamma } = constants;
  return ceilLog2(n) * (msgs(m, chunk) * alpha + m * beta + m * gamma);
}

/**
 * Linear gather or scatter (m = the root's n-block bytes, b = m/n): `(n−1)·k·α + (n−1)·b·β`,
 * k = ⌈b/chunkBytes⌉ (the root's link carries every block but its own).
 */
export function linearGatherCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  return (n - 1) * (msgs(b, chunk) * constants.alpha + b * constants.beta);
}

/**
 * Binomial gather or scatter (m = the root's n-block bytes, b = m/n): `Σ_j k_j·α + (n−1)·b·β` over the
 * ⌈log2 n⌉ rounds, round j moving min(2^j, n − 2^j) blocks in k_j = ⌈that·b/chunkBytes⌉ messages.
 */
export function binomialGatherCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  let messages = 0;
  for (let span = 1; span < n; span *= 2) messages += msgs(Math.min(span, n - span) * b, chunk);
  return messages * constants.alpha + (n - 1) * b * constants.beta;
}

/**
 * Ordered reduce (deterministic mode; m = buffer bytes): an ordered reduce-scatter then a linear gather of
 * the shards, `2(n−1)·k·α + 2·(n−1)/n·m·β + (n−1)/n·m·γ`, k = ⌈m/(n·chunkBytes)⌉.
 */
export function orderedReduceCost(shape: CostShape, constants: CostConstants): number {
  return ringAllReduceCost(shape, constants);
}

/** Pairwise all-to-all (m = input bytes): `(n−1)·(k·α + (m/n)·β)`, k = ⌈m/(n·chunkBytes)⌉. */
export function pairwiseAllToAllCost(shape: CostShape, constants: CostConstants): number {
  const { n, m, chunk } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  return (n - 1) * (msgs(b, chunk) * constants.alpha + b * constants.beta);
}

/** Dissemination barrier: `⌈log2 n⌉·α` (bytes are ignored). */
export function disseminationBarrierCost(shape: CostShape, constants: CostConstants): number {
  const { n } = unpack(shape);
  return ceilLog2(n) * constants.alpha;
}

// ---- the host segment (collectives/segment_*.ts; chunk = a segment buffer) ------------------------

function segmentChunks(bytes: number, chunk: number): number {
  return Math.max(1, Math.ceil(bytes / chunk));
}

/** Which plan of the segment all-reduce and reduce is cheaper for a shape. */
export type SegmentPlanName = "one-shot" | "two-phase";

/**
 * The segment all-reduce's one-shot plan, `(k+1)·α + 2·m·β + n·m·γ`, and its two-phase plan,
 * `(2k+1)·α + 2·m·β + m·γ`, k = ⌈m/chunkBytes⌉ (see `collectives/segment_allreduce.ts`).
 *
 * @param shape The call.
 * @param constants The segment's constants.
 * @returns The seconds of each plan.
 */
export function segmentAllReducePlans(
  shape: CostShape,
  constants: CostConstants,
): Record<SegmentPlanName, number> {
  const { n, m } = unpack(shape);
  const k = segmentChunks(m, shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES);
  const { alpha, beta, gamma } = constants;
  return {
    "one-shot": (k + 1) * alpha + 2 * m * beta + n * m * gamma,
    "two-phase": (2 * k + 1) * alpha + 2 * m * beta + m * gamma,
  };
}

/**
 * The plan the segment all-reduce (and reduce) runs: the cheaper by {@linkcode segmentAllReducePlans},
 * one-shot on a tie and always for one member.
 *
 * @param shape The call.
 * @param constants The segment's constants.
 * @returns The plan's name.
 */
export function segmentPlan(shape: CostShape, constants: CostConstants): SegmentPlanName {
  if (shape.size === 1) return "one-shot";
  const t = segmentAllReducePlans(shape, constants);
  return t["two-phase"] < t["one-shot"] ? "two-phase" : "one-shot";
}

/** Segment all-reduce: the cheaper of its two plans (0 for one rank). */
export function segmentAllReduceCost(shape: CostShape, constants: CostConstants): number {
  if (shape.size === 1 || shape.bytes === 0) return 0;
  const t = segmentAllReducePlans(shape, constants);
  return Math.min(t["one-shot"], t["two-phase"]);
}

/** Segment reduce: one-shot `(k+1)·α + m·β + n·m·γ`, or two-phase `(2k+1)·α + 2·m·β + m·γ`. */
export function segmentReduceCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const k = segmentChunks(m, shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES);
  const { alpha, beta, gamma } = constants;
  return Math.min((k + 1) * alpha + m * beta + n * m * gamma, (2 * k + 1) * alpha + 2 * m * beta + m * gamma);
}

/** Segment broadcast: `(k+1)·α + 2·m·β`. */
export function segmentBroadcastCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const k = segmentChunks(m, shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES);
  return (k + 1) * constants.alpha + 2 * m * constants.beta;
}

/** Segment all-gather (m = output bytes, b = m/n): `(k+1)·α + (b + m)·β`, k = ⌈b/chunkBytes⌉. */
export function segmentAllGatherCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  const k = segmentChunks(b, shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES);
  return (k + 1) * constants.alpha + (b + m) * constants.beta;
}

/** Segment gather (m = the root's output bytes, b = m/n): `(k+1)·α + (b + m)·β`, k = ⌈b/chunkBytes⌉. */
export function segmentGatherCost(shape: CostShape, constants: CostConstants): number {
  return segmentAllGatherCost(shape, constants);
}

/**
 * Segment scatter (m = the root's input bytes, b = m/n): `(k+1)·α + (m + b)·β`,
 * k = ⌈b/⌊chunkBytes/n⌋⌉.
 */
export function segmentScatterCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const b = m / n;
  const piece = Math.max(1, Math.floor((shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES) / n));
  return (Math.ceil(b / piece) + 1) * constants.alpha + (m + b) * constants.beta;
}

/** Segment reduce-scatter (m = input bytes): `(k+1)·α + m·β + m·γ`, k = ⌈(m/n)/⌊chunkBytes/n⌋⌉. */
export function segmentReduceScatterCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const k = segmentChunks(m / n, Math.max(1, (shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES) / n));
  return (k + 1) * constants.alpha + m * (constants.beta + constants.gamma);
}

/** Segment all-to-all (m = input bytes): `(k+1)·α + 2·m·β`, k = ⌈(m/n)/⌊chunkBytes/n⌋⌉. */
export function segmentAllToAllCost(shape: CostShape, constants: CostConstants): number {
  const { n, m } = unpack(shape);
  if (n === 1 || m === 0) return 0;
  const k = segmentChunks(m / n, Math.max(1, (shape.chunkBytes ?? DEFAULT_SEGMENT_CHUNK_BYTES) / n));
  return (k + 1) * constants.alpha + 2 * m * constants.beta;
}

/** Segment barrier: `α`. */
export function segmentBarrierCost(shape: CostShape, constants: CostConstants): number {
  const { n } = unpack(shape);
  return n === 1 ? 0 : constants.alpha;
}

/** One ping-pong measurement: one-way seconds (half the round trip) for a message of `bytes`. */
export interface PingPongSample {
  /** Message bytes. */
  readonly bytes: number;
  /** One-way seconds. */
  readonly seconds: number;
}

/**
 * Fit of `seconds = α + β·bytes` to ping-pong samples: α the smallest message's time (less its bytes at
 * the fitted rate), β the least-squares slope of the rest above α. The large messages set β, as they
 * should where a link's token bucket or a socket buffer lets small ones out faster than the rate.
 *
 * @param samples At least two samples with different sizes.
 * @returns α (seconds) and β (seconds per byte).
 * @throws {RangeError} If fewer than two distinct sizes are given.
 *
 * @example
 * ```ts
 * import { fitConstants } from "./cost_model.ts";
 * import assert from "node:assert/strict";
 * const { alpha, beta } = fitConstants([{ bytes: 0, seconds: 2e-6 }, { bytes: 1e6, seconds: 102e-6 }]);
 * assert.ok(Math.abs(alpha - 2e-6) < 1e-12 && Math.abs(beta - 1e-10) < 1e-18);
 * ```
 */
export function fitConstants(samples: readonly PingPongSample[]): { alpha: number; beta: number } {
  const sizes = [...new Set(samples.map((p) => p.bytes))].sort((a, b) => a - b);
  if (sizes.length < 2 || samples.some((p) => !(p.seconds > 0))) {
    throw new RangeError(
      `Cannot fit α and β: expected samples of at least two sizes with positive times, found ${samples.length} samples`,
    );
  }
  // α: the smallest message's time (the median of its samples), what a message costs before its bytes.
  const first = samples.filter((p) => p.bytes === sizes[0]).map((p) => p.seconds).sort((a, b) => a - b);
  let alpha = first[first.length >> 1];
  // β: least squares of the rest above α, which the largest messages dominate, as they should: below a
  // link's token bucket (or a socket's buffer) a message goes out faster than the link's rate.
  const fit = (a: number): number => {
    let xx = 0, xy = 0;
    for (const { bytes, seconds } of samples) {
      xx += bytes * bytes;
      xy += bytes * (seconds - a);
    }
    return xy / xx;
  };
  let beta = fit(alpha);
  if (sizes[0] > 0) {
    // No 0-byte sample: take the smallest size's bytes off α at the fitted rate.
    alpha = Math.max(0, alpha - sizes[0] * beta);
    beta = fit(alpha);
  }
  return { alpha, beta: Math.max(beta, 0) };
}

/** One timed segment all-reduce, for {@linkcode fitSegmentConstants}. */
export interface SegmentSample {
  /** Which plan ran. */
  readonly plan: SegmentPlanName;
  /** Ranks. */
  readonly size: number;
  /** Bytes of the tensor. */
  readonly bytes: number;
  /** The segment's buffer size (the chunk). */
  readonly chunkBytes: number;
  /** Seconds per call. */
  readonly seconds: number;
}

/**
 * Least-squares fit of the segment's α, β and γ to timed all-reduces of both plans, through the formulas
 * of {@linkcode segmentAllReducePlans} (linear in the three constants), minimising relative residuals. A
 * constant the fit would make negative (noise) is held at 0 and the others refitted.
 *
 * @param samples Timings of both plans over several sizes.
 * @returns α, β and γ.
 * @throws {RangeError} If the samples cannot determine the three constants.
 *
 * @example Constants recovered from their own predictions
 * ```ts
 * import { fitSegmentConstants, segmentAllReducePlans } from "./cost_model.ts";
 * import assert from "node:assert/strict";
 * const truth = { alpha: 5e-6, beta: 5e-11, gamma: 1e-10 };
 * const samples = [4096, 1 << 20, 8 << 20].flatMap((bytes) => {
 *   const t = segmentAllReducePlans({ size: 2, bytes, chunkBytes: 1 << 20 }, truth);
 *   return (["one-shot", "two-phase"] as const).map((plan) => ({ plan, size: 2, bytes, chunkBytes: 1 << 20, seconds: t[plan] }));
 * });
 * const fit = fitSegmentConstants(samples);
 * assert.ok(Math.abs(fit.gamma - truth.gamma) < 1e-15);
 * ```
 */
export function fitSegmentConstants(samples: readonly SegmentSample[]): CostConstants {
  const rows = samples.map((s) => {
    const k = segmentChunks(s.bytes, s.chunkBytes);
    const x = s.plan === "one-shot"
      ? [k + 1, 2 * s.bytes, s.size * s.bytes]
      : [2 * k + 1, 2 * s.bytes, s.bytes];
    // Relative residuals: each sample counts alike, so the microsecond ones fix α and the millisecond
    // ones β and γ (absolute residuals would leave α to the noise of the largest sizes).
    const w = s.seconds > 0 ? 1 / s.seconds : 1;
    return { x: x.map((v) => v * w), y: s.seconds * w };
  });
  let free = [0, 1, 2];
  for (;;) {
    const c = solveLeastSquares(rows.map((r) => free.map((j) => r.x[j])), rows.map((r) => r.y));
    const full = [0, 0, 0];
    free.forEach((j, i) => (full[j] = c[i]));
    const negative = free.filter((j) => full[j] < 0);
    if (negative.length === 0) return { alpha: full[0], beta: full[1], gamma: full[2] };
    free = free.filter((j) => !negative.includes(j));
    if (free.length === 0) return { alpha: 0, beta: 0, gamma: 0 };
  }
}

/**
 * The least-squares solution of `a·c ≈ y` by QR (modified Gram–Schmidt on columns scaled to unit length):
 * the normal equations square the condition number, and bytes and counts differ by orders of magnitude.
 */
function solveLeastSquares(a: readonly number[][], y: readonly number[]): number[] {
  const rows = a.length, m = a[0]?.length ?? 0;
  const q = Array.from({ length: m }, (_, j) => a.map((r) => r[j]));
  const scale = q.map((col) => Math.sqrt(col.reduce((s, x) => s + x * x, 0)) || 1);
  q.forEach((col, j) => col.forEach((_, i) => (col[i] /= scale[j])));
  const r = Array.from({ length: m }, () => new Array<number>(m).fill(0));
  for (let j = 0; j < m; j++) {
    for (let k = 0; k < j; k++) {
      const d = q[k].reduce((s, x, i) => s + x * q[j][i], 0);
      r[k][j] = d;
      for (let i = 0; i < rows; i++) q[j][i] -= d * q[k][i];
    }
    const norm = Math.sqrt(q[j].reduce((s, x) => s + x * x, 0));
    if (!(norm > 1e-12)) {
      throw new RangeError(
        `Cannot fit the segment's constants: expected samples of both plans at several sizes`,
      );
    }
    r[j][j] = norm;
    for (let i = 0; i < rows; i++) q[j][i] /= norm;
  }
  const c = new Array<number>(m).fill(0);
  for (let j = m - 1; j >= 0; j--) {
    let v = q[j].reduce((s, x, i) => s + x * y[i], 0);
    for (let k = j + 1; k < m; k++) v -= r[j][k] * c[k];
    c[j] = v / r[j][j];
  }
  return c.map((v, j) => v / scale[j]);
}
