/**
 * The communication of one training step of `bench/_zero_rank.ts`'s configurations, priced by the cost
 * model (`predict`, with a cluster's fitted constants): what `bench/zero.ts` prints beside each measured
 * row. What is priced, per layer of `c` float32s on `n = hosts × local` ranks:
 *
 * - DDP: ring all-reduces of its buckets (25 MiB, the first 1 MiB, in reverse layer order).
 * - Stages 1 and 2: a ring reduce-scatter and a ring all-gather of the layer over the world.
 * - Stage 3: two ring all-gathers (forward, backward) and a ring reduce-scatter.
 * - hpZ: the gathers and the first reduce-scatter within the host (shared-memory constants), the second
 *   reduce-scatter and the secondary shard's all-gather across hosts on blocks of c / local, each link
 *   shared by the `local` cross-host groups at once (β × local).
 * - qwZ: all-gathers of int8 (c bytes and a float32 scale per 256); qgZ: the cross (or only) hop of the
 *   reduce-scatter as a pairwise all-to-all of int8. The codecs' own CPU time is not in the model.
 *
 * @module
 */
import { predict } from "../collectives/mod.ts";
import type { CostConstants } from "../sim/cost_model.ts";

/** The layout and the constants a prediction needs. */
export interface ZeroShape {
  /** Hosts. */
  readonly hosts: number;
  /** Ranks per host. */
  readonly local: number;
  /** Each layer's float32s. */
  readonly layers: readonly number[];
  /** The constants between hosts (β of one link). */
  readonly tcp: CostConstants;
  /** The constants within a host. */
  readonly shm: CostConstants;
}

const int8Bytes = (c: number): number => c + 4 * Math.ceil(c / 256);

/** Predicted seconds of communication per step of `config` (`ddp`, or `3+hpz+qwz+qgz` and the like). */
export function predictZeroStep(config: string, shape: ZeroShape): number {
  const { hosts, local, tcp, shm } = shape;
  const n = hosts * local;
  const hostMap = Array.from({ length: n }, (_, r) => Math.floor(r / local));
  const world = { size: n, hosts: hostMap, intra: shm, constants: tcp, chunkBytes: 1 << 20 };
  if (config === "ddp") {
    let total = 0, bucket = 0, cap = 1 << 20;
    for (const c of [...shape.layers].reverse()) {
      bucket += 4 * c;
      if (bucket >= cap) {
        total += predict("allReduce", "ring", { ...world, bytes: bucket });
        bucket = 0;
        cap = 25 << 20;
      }
    }
    if (bucket > 0) total += predict("allReduce", "ring", { ...world, bytes: bucket });
    return total;
  }
  const [stage, ...extras] = config.split("+");
  const hpz = extras.includes("hpz") && local > 1 && hosts > 1;
  const qwz = extras.includes("qwz"), qgz = extras.includes("qgz");
  const gathers = stage === "3" ? 2 : 1;
  const shared = { ...tcp, beta: tcp.beta * local };
  let total = 0;
  for (const c of shape.layers) {
    const weightBytes = qwz ? int8Bytes(c) : 4 * c;
    if (!hpz) {
      total += gathers * predict("allGather", "ring", { ...world, bytes: weightBytes });
      total += qgz
        ? predict("allToAll", "pairwise", { ...world, bytes: int8Bytes(c) })
        : predict("reduceScatter", "ring", { ...world, bytes: 4 * c });
      continue;
    }
    const block = c / local;
    const within = { size: local, constants: shm, chunkBytes: 1 << 20 };
    const across = { size: hosts, constants: shared, chunkBytes: 1 << 20 };
    total += gathers * predict("allGather", "ring", { ...within, bytes: 4 * c });
    total += predict("reduceScatter", "ring", { ...within, bytes: 4 * c });
    total += qgz
      ? predict("allToAll", "pairwise", { ...across, bytes: int8Bytes(block) })
      : predict("reduceScatter", "ring", { ...across, bytes: 4 * block });
    total += predict("allGather", "ring", { ...across, bytes: qwz ? int8Bytes(block) : 4 * block });
  }
  return total;
}
