/**
 * The constants of an emulated cluster's links (`bench/cluster.ts`), fitted on the layout a study runs:
 * every rank in a ring of its local index across the hosts (`_calibrate_rank.ts tcp ring`), every link busy
 * with its host's ranks at once, and the same within the hosts. `bench/network.ts` and `bench/zero.ts`
 * price their rows with them.
 *
 * @module
 */
import { createCluster, resultOf, runOnCluster } from "./cluster.ts";
import {
  type CostConstants,
  DEFAULT_SHM_CONSTANTS,
  fitConstants,
  type PingPongSample,
} from "../sim/cost_model.ts";

const here = new URL("./", import.meta.url).pathname;
const DELAY = "50us";

/** What the links give, fitted on the layout of a study run: between hosts, and within a host. */
export interface Fitted {
  /** The constants between hosts; β per link (the measured per-rank β over the ranks sharing a link). */
  tcp: CostConstants;
  /** The constants of the shared-memory hops within a host, under the same load (one rank per host: the machine's). */
  shm: CostConstants;
  /** The calibration's samples (seconds per step by message size) they were fitted to. */
  samples: { between: PingPongSample[]; within?: PingPongSample[] };
}

/** Fits the constants of `hosts` × `ranksPerHost` at `rate` (a cluster of its own, removed after). */
export async function calibrate(rate: string, hosts: number, ranksPerHost: number): Promise<Fitted> {
  const cluster = await createCluster({ hosts, rate, delay: DELAY });
  try {
    const args = [`${here}_calibrate_rank.ts`, "tcp", "ring"];
    const runs = await runOnCluster(cluster, ranksPerHost, args, { timeoutMs: 300_000 });
    const { samples, intra, gamma } = resultOf(
      runs,
      "CALIBRATION",
      `Calibration at ${rate} on ${hosts} hosts × ${ranksPerHost}`,
    ) as { samples: PingPongSample[]; intra?: PingPongSample[]; gamma: number };
    const between = fitConstants(samples);
    const within = intra ? fitConstants(intra) : DEFAULT_SHM_CONSTANTS;
    return {
      tcp: { alpha: between.alpha, beta: between.beta / ranksPerHost, gamma },
      shm: { alpha: within.alpha, beta: within.beta, gamma },
      samples: { between: samples, within: intra },
    };
  } finally {
    await cluster.destroy();
  }
}
