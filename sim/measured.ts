/**
 * The cost model's constants as `deno task bench:calibrate` measured them (2026-11-30,
 * 2 CPUs, Deno 2.9.6). α: seconds per message, β: seconds per byte,
 * γ: seconds per byte reduced. Rerun the task on your machine to refit them.
 *
 * @module
 */
import type { CostConstants } from "./cost_model.ts";

/**
 * Measured constants by transport (inproc shares the shm ring code and takes its constants), and of the
 * host segment's collectives.
 */
export const MEASURED_CONSTANTS: Readonly<Record<"tcp" | "shm" | "inproc" | "segment", CostConstants>> =
  Object
    .freeze({
      tcp: Object.freeze({ alpha: 4.497e-5, beta: 3.128e-10, gamma: 3.484e-10 }),
      shm: Object.freeze({ alpha: 1.315e-5, beta: 1.477e-10, gamma: 3.724e-10 }),
      inproc: Object.freeze({ alpha: 1.315e-5, beta: 1.477e-10, gamma: 3.724e-10 }),
      segment: Object.freeze({ alpha: 8e-6, beta: 4e-11, gamma: 1.2e-10 }),
    });
