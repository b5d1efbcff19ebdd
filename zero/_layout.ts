/**
 * Where each rank's shard of each layer lies. A layer is the flat concatenation of its parameters. The
 * ranks form `hosts` × `local` (one host of `n` ranks, or `n` hosts of one rank, without hierarchy): a
 * layer is cut into `local` blocks (the secondary shards of hpZ: block l is what the ranks of local index
 * l hold on every host), and each block into `hosts` pieces; the rank of host h and local index l owns
 * piece h of block l, its primary shard. Without hierarchy there is one block, cut into `n` pieces in rank
 * order. Every cut is as even as can be: the first `count % parts` parts take one element more.
 */

/** The ranks' arrangement. */
export interface Topology {
  /** Hosts (the size of each cross-host group). */
  readonly hosts: number;
  /** Ranks per host (the size of each host's group). */
  readonly local: number;
  /** This rank's host, 0..hosts-1. */
  readonly host: number;
  /** This rank's index within its host, 0..local-1. */
  readonly localRank: number;
  /** Every group rank's host and local index. */
  readonly of: readonly { readonly host: number; readonly localRank: number }[];
}

/** One layer's cuts. */
export interface LayerLayout {
  /** Its index. */
  readonly index: number;
  /** The parameters it holds, by registration index, in order. */
  readonly params: readonly number[];
  /** Where each of `params` starts in the flat layer. */
  readonly offsets: readonly number[];
  /** Elements. */
  readonly count: number;
  /** Elements of each block (one per local index). */
  readonly blocks: readonly number[];
  /** Where each block starts. */
  readonly blockStarts: readonly number[];
  /** Elements of each piece of each block: `pieces[l][h]`. */
  readonly pieces: readonly (readonly number[])[];
  /** Where this rank's block starts and its length. */
  readonly block: { readonly start: number; readonly count: number };
  /** Where this rank's primary shard starts (in the layer) and its length. */
  readonly shard: { readonly start: number; readonly count: number };
}

/** `count` cut into `parts` as evenly as can be, the first ones one longer. */
export function evenCounts(count: number, parts: number): number[] {
  const base = Math.floor(count / parts), extra = count % parts;
  return Array.from({ length: parts }, (_, i) => base + (i < extra ? 1 : 0));
}

/** Running starts of `counts`. */
export function startsOf(counts: readonly number[]): number[] {
  const out: number[] = [];
  let at = 0;
  for (const c of counts) {
    out.push(at);
    at += c;
  }
  return out;
}

/**
 * The topology of a group from each rank's host index (hosts numbered in order of first rank), or the flat
 * one (`hostOf` undefined). A hierarchy needs the same number of ranks on every host.
 *
 * @throws {RangeError} If the hosts hold different numbers of ranks.
 */
export function topologyOf(rank: number, size: number, hostOf: readonly number[] | undefined): Topology {
  if (hostOf === undefined) {
    const of = Array.from({ length: size }, (_, r) => ({ host: r, localRank: 0 }));
    return { hosts: size, local: 1, host: rank, localRank: 0, of };
  }
  const seen = new Map<number, number>();
  const of = hostOf.map((h) => {
    const l = seen.get(h) ?? 0;
    seen.set(h, l + 1);
    return { host: h, localRank: l };
  });
  const perHost = [...seen.values()];
  if (perHost.some((c) => c !== perHost[0])) {
    const list = [...seen.entries()].map(([h, c]) => `host ${h}: ${c}`).join(", ");
    throw new RangeError(
      `Cannot shard hierarchically: expected the same number of ranks on every host, found ${list}`,
    );
  }
  const hostIds = [...seen.keys()];
  const renumbered = of.map(({ host, localRank }) => ({ host: hostIds.indexOf(host), localRank }));
  return {
    hosts: hostIds.length,
    local: perHost[0],
    host: renumbered[rank].host,
    localRank: renumbered[rank].localRank,
    of: renumbered,
  };
}

/** The cuts of a layer of `params` (lengths `lengths`) for `topo`. */
export function layoutLayer(
  index: number,
  params: readonly number[],
  lengths: readonly number[],
  topo: Topology,
): LayerLayout {
  const sizes = params.map((i) => lengths[i]);
  const offsets = startsOf(sizes);
  const count = sizes.reduce((a, b) => a + b, 0);
  const blocks = evenCounts(count, topo.local);
  const blockStarts = startsOf(blocks);
  const pieces = blocks.map((b) => evenCounts(b, topo.hosts));
  const block = { start: blockStarts[topo.localRank], count: blocks[topo.localRank] };
  return {
    index,
    params,
    offsets,
    count,
    blocks,
    blockStarts,
    pieces,
    block,
    shard: pieceOf({ blocks, blockStarts, pieces }, topo.host, topo.localRank),
  };
}

/** Where the primary shard of the rank at (`host`, `localRank`) lies in the layer. */
export function pieceOf(
  layer: Pick<LayerLayout, "blocks" | "blockStarts" | "pieces">,
  host: number,
  localRank: number,
): { start: number; count: number } {
  const pieces = layer.pieces[localRank];
  let start = layer.blockStarts[localRank];
  for (let h = 0; h < host; h++) start += pieces[h];
  return { start, count: pieces[host] };
}

/**
 * Layers from parameter lengths when the caller names none: consecutive parameters in registration order,
 * a layer closing once it holds `capElements` (a parameter larger than that is a layer of its own).
 */
export function defaultLayers(lengths: readonly number[], capElements: number): number[][] {
  const layers: number[][] = [];
  let current: number[] = [], held = 0;
  lengths.forEach((n, i) => {
    if (current.length > 0 && held + n > capElements) {
      layers.push(current);
      current = [];
      held = 0;
    }
    current.push(i);
    held += n;
  });
  if (current.length > 0) layers.push(current);
  return layers;
}
