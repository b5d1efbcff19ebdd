/**
 * The cost model's constants as `deno task bench:calibrate` measured them (tcp, shm: 2026-11-30; segment:
 * 2026-12-01; 2 CPUs, Deno 2.9.6). α: seconds per message, β: seconds per byte, γ: seconds per byte
 * reduced. Rerun the task on your machine to refit them.
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
      segment: Object.freeze({ alpha: 3.559e-6, beta: 9.907e-12, gamma: 5.783e-11 }),
    });
