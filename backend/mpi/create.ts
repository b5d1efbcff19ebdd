/**
 * Starting the `mpi` backend: {@linkcode initMpi}, what `init({ backend: "mpi" })` runs. The ranks met
 * through MPI's own launcher (`mpiexec`, `srun`), so there is no store: MPI is initialised once per process
 * (`_runtime.ts`), its world is checked against the options and the launcher's variables, and the world
 * group is one MPI communicator (`group.ts`).
 *
 * @module
 */
import { DistError, UnsupportedError } from "../../core/errors.ts";
import type { InitOptions } from "../init.ts";
import { check } from "../../ffi/mpi/mpi.ts";
import { MpiComm } from "../../ffi/mpi/constants.ts";
import { environment } from "../_rendezvous.ts";
import { rankInfo } from "../env.ts";
import { slurmStepTasks } from "../_slurm.ts";
import { MpiProcessGroup, mpiWorld } from "./group.ts";
import { MpiRuntime } from "./_runtime.ts";

/** Options of {@linkcode initMpi}. */
export interface MpiInitOptions {
  /** Default timeout of every call, in milliseconds. @default 300000 */
  timeoutMs?: number;
  /** This rank, checked against MPI's. @default MPI's rank in MPI_COMM_WORLD */
  rank?: number;
  /** The number of ranks, checked against MPI's. @default MPI's size of MPI_COMM_WORLD */
  worldSize?: number;
  /**
   * Call `MPI_Abort` (ending every rank of the job) when a collective or a send times out or is aborted,
   * instead of failing it and leaving the backend unusable.
   * @default false
   */
  abortOnTimeout?: boolean;
  /** The longest the poller spins on `MPI_Test` before yielding to the event loop, in µs. @default 1000 */
  spinUs?: number;
  /** How long a call keeps the poller spinning before it backs off to timers, plus 10 ns per byte. @default 50 */
  hotMs?: number;
  /** The environment, for the launcher checks. @default Deno.env.toObject() */
  env?: Readonly<Record<string, string | undefined>>;
}

async function openWorld(options: MpiInitOptions): Promise<MpiProcessGroup> {
  const timeoutMs = options.timeoutMs ?? 300_000;
  if (!(timeoutMs > 0)) {
    throw new RangeError(`Invalid timeoutMs: expected a number > 0, found ${timeoutMs}`);
  }
  if (mpiWorld.open) {
    throw new DistError(
      "Cannot initialise the mpi backend: its world group is already open in this process; close it first",
      { code: "MPI" },
    );
  }
  if (mpiWorld.finalized) {
    throw new DistError(
      "Cannot initialise the mpi backend again: its world group was closed, which finalised MPI, and MPI " +
        "cannot be initialised twice in one process",
      { code: "MPI" },
    );
  }
  const env = environment(options);
  // Claimed before the first await, so that two concurrent calls cannot both initialise.
  mpiWorld.open = true;
  let rt: MpiRuntime, rank: number, size: number;
  try {
    rt = mpiWorld.runtime ??= await MpiRuntime.start({
      env,
      abortOnTimeout: options.abortOnTimeout ?? false,
      poller: { spinUs: options.spinUs, hotMs: options.hotMs },
    });
    const out = new Int32Array(1);
    check(rt.mpi.MPI_Comm_rank(MpiComm.WORLD, out), "MPI_Comm_rank");
    rank = out[0];
    check(rt.mpi.MPI_Comm_size(MpiComm.WORLD, out), "MPI_Comm_size");
    size = out[0];
    checkWorld(rank, size, options, env, rt.library.path);
  } catch (e) {
    mpiWorld.open = false;
    throw e;
  }
  return new MpiProcessGroup(rt, {
    comm: new Int32Array([MpiComm.WORLD]),
    ranks: Array.from({ length: size }, (_, i) => i),
    rank,
    timeoutMs,
    world: true,
  });
}

/** Checks MPI's world against explicit options and the launcher's variables. */
function checkWorld(
  rank: number,
  size: number,
  options: MpiInitOptions,
  env: Readonly<Record<string, string | undefined>>,
  path: string,
): void {
  if (options.worldSize !== undefined && options.worldSize !== size) {
    throw new RangeError(
      `Invalid worldSize: MPI's world has ${size} ranks, found worldSize ${options.worldSize}`,
    );
  }
  if (options.rank !== undefined && options.rank !== rank) {
    throw new RangeError(`Invalid rank: MPI says this process is rank ${rank}, found rank ${options.rank}`);
  }
  // srun without a PMI plugin MPI uses starts every task as an MPI singleton: each would all-reduce alone
  // and return its own values. With PMI_SIZE set (Hydra's mpiexec, srun --mpi=pmi2) the check below
  // compares that world instead.
  let stepTasks: number | undefined;
  try {
    stepTasks = slurmStepTasks(env);
  } catch {
    stepTasks = undefined;
  }
  if (size === 1 && stepTasks !== undefined && stepTasks > 1 && !env["PMI_SIZE"]) {
    const offered = env["PMIX_RANK"] !== undefined
      ? "srun offered PMIx (PMIX_RANK is set), which this MPI did not use"
      : "srun offered no PMI (PMI_SIZE and PMIX_RANK are unset)";
    throw new DistError(
      `Cannot use MPI under srun: expected MPI's world to have the step's ${stepTasks} tasks ` +
        `(SLURM_STEP_NUM_TASKS), found 1 rank in MPI's world (${path}): ${offered}, so every task would ` +
        `run alone. Launch with srun --mpi=pmi2 (or --mpi=pmix with an MPI built for PMIx; ` +
        `srun --mpi=list shows Slurm's plugins)`,
      { code: "MPI" },
    );
  }
  let info;
  try {
    info = rankInfo(env);
  } catch {
    return;
  }
  // Slurm's variables are left out: under mpiexec inside an allocation every rank sees SLURM_PROCID=0.
  if (info.source === "slurm") return;
  if (info.worldSize !== size || info.rank !== rank) {
    throw new DistError(
      `The launcher and MPI disagree: the ${info.source} variables say rank ${info.rank} of ` +
        `${info.worldSize}, MPI (${path}) says rank ${rank} of ${size}. Launch with the mpiexec of the MPI ` +
        `library dcomm loaded (set DCOMM_MPI_PATH to choose it)` +
        (size === 1 ? ", not with torchrun-style variables alone" : ""),
      { code: "MPI" },
    );
  }
}

/**
 * Joins the MPI job this process was started in (by `mpiexec` or `srun`) and returns its world group:
 * initialises MPI (unless this process already did) and checks its world against the options and the
 * launcher's variables. Same as `init({ backend: "mpi" })`.
 *
 * @param options Timeout, checks and tuning.
 * @returns The world group; close it when done, which finalises MPI.
 * @throws {LibraryNotFoundError} If no MPI library is found (the message lists every path tried).
 * @throws {UnsupportedError} For Open MPI, or MPI initialised by another thread without thread support.
 * @throws {RangeError} If `rank`/`worldSize` or `timeoutMs` do not fit MPI's world.
 * @throws {DistError} If a world group is already open, MPI was finalised, the launcher's variables
 *   disagree with MPI's world (a library that does not match the launcher), or srun started the tasks
 *   without a PMI plugin (MPI sees a world of 1 in a step of several tasks: use `srun --mpi=pmi2`).
 *
 * @example A sub-group of the even ranks, three ranks under mpiexec (without mpiexec, it says so)
 * ```ts
 * import { initMpi } from "./create.ts";
 * import assert from "node:assert/strict";
 * await assert.rejects(initMpi({ timeoutMs: 0 }), RangeError); // checked before MPI starts
 * const script = await Deno.makeTempFile({ suffix: ".ts" });
 * await Deno.writeTextFile(script, `
 *   import { initMpi } from "${new URL("./create.ts", import.meta.url)}";
 *   await using world = await initMpi();
 *   const even = await world.newGroup(world.ranks.filter((r) => r % 2 === 0));
 *   const x = new Float64Array([world.rank]);
 *   if (even.rank >= 0) await even.allReduce(x);
 *   console.log(world.rank, x[0]);
 * `);
 * const mpiexec = new Deno.Command("mpiexec", { args: ["-n", "3", Deno.execPath(), "run", "-A", script] });
 * try {
 *   const job = await mpiexec.output();
 *   const lines = new TextDecoder().decode(job.stdout).trim().split("\n").sort();
 *   // Ranks 0 and 2 hold 0 + 2; rank 1, outside the sub-group, keeps its own value.
 *   assert.deepEqual(lines, ["0 2", "1 1", "2 2"], new TextDecoder().decode(job.stderr));
 * } catch (e) {
 *   if (!(e instanceof Deno.errors.NotFound)) throw e;
 *   console.log("No mpiexec here: install MPICH (apt-get install mpich) to run the mpi backend");
 * } finally {
 *   await Deno.remove(script);
 * }
 * ```
 */
export function initMpi(options: MpiInitOptions = {}): Promise<MpiProcessGroup> {
  return openWorld(options);
}

/**
 * What `init({ backend: "mpi" })` runs: refuses the options of the store's rendezvous and of the cpu
 * transports (MPI's launcher did the rendezvous and MPI moves the bytes), then {@linkcode initMpi}.
 *
 * @param options `init`'s options.
 * @returns The world group.
 * @throws {UnsupportedError} If `initMethod`, `transport` or `inprocMesh` is given.
 */
export async function initMpiBackend(options: InitOptions): Promise<MpiProcessGroup> {
  const foreign = (["initMethod", "transport", "inprocMesh"] as const).filter((k) =>
    options[k] !== undefined && options[k] !== "env://" && options[k] !== "auto"
  );
  if (foreign.length > 0) {
    throw new UnsupportedError(
      `The mpi backend meets its peers through its launcher (mpiexec, srun) and moves bytes through MPI: ` +
        `expected no ${foreign.join(", ")}, found ${
          foreign.map((k) => `${k}=${String(options[k])}`).join(", ")
        }`,
    );
  }
  return await initMpi({
    timeoutMs: options.timeoutMs,
    rank: options.rank,
    worldSize: options.worldSize,
    env: options.env,
  });
}
