/**
 * Test helpers for ranks started by the launcher: run a fixture on N processes and take each rank's
 * `RESULT {json}` line, and the fixtures' side: hosts told apart by `DCOMM_HOST_OF`.
 *
 * @module
 */
import assert from "node:assert/strict";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;

/**
 * Runs `fixture` on `ranks` processes of the launcher and returns what each printed after `RESULT `
 * (parsed), failing with the output's tail if the launcher fails or a rank printed none.
 *
 * @param fixture The script's path.
 * @param ranks Processes.
 * @param env Their environment.
 * @param timeoutMs How long the run may take.
 * @param args The fixture's arguments.
 * @returns One result per rank, in the order printed.
 */
export async function launchedResults<T>(
  fixture: string,
  ranks: number,
  env: Record<string, string> = {},
  timeoutMs = 120_000,
  args: readonly string[] = [],
): Promise<T[]> {
  return (await launchedRun<T>(fixture, ranks, env, timeoutMs, args)).results;
}

/**
 * {@linkcode launchedResults}, with the whole output beside the results.
 *
 * @param fixture The script's path.
 * @param ranks Processes.
 * @param env Their environment.
 * @param timeoutMs How long the run may take.
 * @param args The fixture's arguments.
 * @returns The results, one per rank, and the output.
 */
export async function launchedRun<T>(
  fixture: string,
  ranks: number,
  env: Record<string, string> = {},
  timeoutMs = 120_000,
  args: readonly string[] = [],
): Promise<{ results: T[]; text: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", String(ranks), fixture, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-3000));
  const results = [...text.matchAll(/RESULT (.*)$/gm)].map((m) => JSON.parse(m[1]) as T);
  assert.equal(results.length, ranks, text.slice(-3000));
  return { results, text };
}

/**
 * For a fixture of the hybrid-transport tests: `DCOMM_HOST_OF` ("a,a,b,b", rank r's host) becomes this
 * rank's `DCOMM_HOST_ID`, before `init()`. Nothing without it.
 *
 * @returns Whether hosts were set.
 */
export function applyHostOf(): boolean {
  const hostOf = Deno.env.get("DCOMM_HOST_OF");
  if (hostOf) Deno.env.set("DCOMM_HOST_ID", hostOf.split(",")[Number(Deno.env.get("RANK"))]);
  return hostOf !== undefined && hostOf !== "";
}

/**
 * Runs `fixture` with the argument `mpi` on `ranks` processes of MPICH's `mpiexec` (the launchers'
 * variables cleared, so the mpi backend finds only MPI's) and returns what each printed after `RESULT `.
 *
 * @param fixture The script's path.
 * @param ranks Processes.
 * @param timeoutMs How long the run may take.
 * @returns One result per rank, in the order printed.
 */
export async function mpiexecResults<T>(fixture: string, ranks: number, timeoutMs = 60_000): Promise<T[]> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PMI_\w+|SLURM_\w+)$/.test(name)
    ) {
      delete env[name];
    }
  }
  const out = await new Deno.Command("mpiexec", {
    args: ["-n", String(ranks), Deno.execPath(), "run", "-A", fixture, "mpi"],
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-3000));
  const results = [...text.matchAll(/^RESULT (\{.*\})$/gm)].map((m) => JSON.parse(m[1]) as T);
  assert.equal(results.length, ranks, text.slice(-3000));
  return results;
}
