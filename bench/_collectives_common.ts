/**
 * What `deno task bench:collectives` (`bench/collectives.ts`) hands its rank script
 * (`bench/_collectives_rank.ts`): the run's configuration, and its title line. The descriptors, the sweep,
 * the rows and the table are the harness's (`_descriptors.ts`, `_harness.ts`, `_rows.ts`).
 *
 * @module
 */
import type { DType, ReduceOp } from "../core/dtype.ts";

export { parseBytes } from "./_rows.ts";

/** One run of the rank script, as JSON on its command line. */
export interface BenchConfig {
  /** The backend the ranks init (`"cpu"` under dcomm's launcher, `"mpi"` under mpiexec). */
  backend: "cpu" | "mpi";
  /** The collective's descriptor name. */
  collective: string;
  /** `-b`, bytes. */
  minBytes: number;
  /** `-e`, bytes. */
  maxBytes: number;
  /** `-f`. */
  factor: number;
  /** `-n`: timed calls per round. */
  iters: number;
  /** `-w`: untimed calls per size. */
  warmup: number;
  /** `-c`. */
  check: boolean;
  /** `--rounds`: timed rounds per size, the fastest counts. */
  rounds: number;
  /** `-o`. */
  op: ReduceOp;
  /** `-d`. */
  dtype: DType;
  /** `-r`. */
  root: number;
  /** `--algorithm`. */
  algorithm: string;
  /** `--transport`. */
  transport: string;
  /** `--check-calls`. */
  checkCalls: boolean;
  /** `--pool`: tensors from `pg.alloc()`. */
  pool: boolean;
  /** `--deterministic`: `init({ deterministic: true })` (sums fold in rank order). */
  deterministic?: boolean;
  /** `--jit-warmup`: calls of a 1 KiB collective (and a third as many of 256 KiB) before the first size. */
  jitWarmup: number;
  /** Extra untimed calls of the first size. */
  firstWarmup: number;
}

/**
 * The first line of the table: what ran and how it was timed.
 *
 * @param config The run.
 * @param ranks The world size.
 * @param transport The transport the group runs on.
 * @returns The line.
 */
export function describeRun(config: BenchConfig, ranks: number, transport: string): string {
  return `# ${config.collective} on ${ranks} ranks, ${config.backend} backend, algorithm ${config.algorithm}, ` +
    `transport ${transport}${config.pool ? ", pool tensors" : ""}${
      config.deterministic ? ", deterministic" : ""
    }; ${config.iters} calls timed` +
    `${config.rounds > 1 ? ` × ${config.rounds} rounds (fastest)` : ""} after ${config.warmup} warm-up, ` +
    `check ${config.check ? "on" : "off"}`;
}
