/**
 * A rank of the monitored barrier's tests, started by the launcher (or by MPICH's mpiexec with `--mpi`):
 * the first argument is the case, and the rank prints `RESULT {json}` with how its call ended.
 *
 * - `all`: every rank calls `monitoredBarrier` (then again, to see the group still works).
 * - `absent`: the ranks listed in `MB_ABSENT` ("2" or "2,3") never call it (they wait until the others
 *   are done, then close); every other rank must fail naming them. `MB_WAIT_ALL=1` passes `waitAll`.
 * - `late`: the ranks in `MB_ABSENT` call it `MB_LATE_MS` after the others (past their timeout): the
 *   others fail naming them, and the late ranks must fail too.
 * - `late-barrier`: the same with a plain `barrier({ timeoutMs })`, whose late rank must not succeed
 *   (the host segment's bug: it did, and only its next call failed).
 * - `abort`: rank 1 aborts its call by its signal after 100 ms while rank 2 is absent: rank 1 fails with
 *   the abort, the others naming rank 1.
 * - `args`: bad options throw the front's TypeError/RangeError before anything happens.
 *
 * @module
 */
import { init } from "../../../backend/init.ts";
import type { ProcessGroup } from "../../../backend/process_group.ts";

/** What a rank prints. */
export interface MonitoredResult {
  /** This rank. */
  rank: number;
  /** The case. */
  mode: string;
  /** Whether this rank's call resolved. */
  ok: boolean;
  /** The error's class name, or "". */
  name: string;
  /** The error's code (DistError), or "". */
  code: string;
  /** The error's message, or "". */
  message: string;
  /** How long the call took, in ms. */
  ms: number;
  /** Whether this rank was one of the absent or late ranks. */
  absent: boolean;
  /** For `args`: the cases that went wrong. */
  failures: string[];
}

const mode = Deno.args[0] ?? "all";
const mpi = Deno.args.includes("--mpi");
const timeoutMs = Number(Deno.env.get("MB_TIMEOUT_MS") ?? 500);
const lateMs = Number(Deno.env.get("MB_LATE_MS") ?? 1500);
const waitAll = Deno.env.get("MB_WAIT_ALL") === "1";
const absentRanks = (Deno.env.get("MB_ABSENT") ?? "").split(",").filter((s) => s !== "").map(Number);

const pg: ProcessGroup = await init(mpi ? { backend: "mpi", timeoutMs: 60_000 } : { timeoutMs: 60_000 });
const absent = absentRanks.includes(pg.rank);
const result: MonitoredResult = {
  rank: pg.rank,
  mode,
  ok: false,
  name: "",
  code: "",
  message: "",
  ms: 0,
  absent,
  failures: [],
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `call` and records how it ended. */
async function timed(call: () => PromiseLike<unknown>): Promise<void> {
  const t0 = performance.now();
  try {
    await call();
    result.ok = true;
  } catch (e) {
    const error = e as Error & { code?: string };
    result.name = error.name;
    result.code = error.code ?? "";
    result.message = error.message;
  }
  result.ms = Math.round(performance.now() - t0);
}

// Every rank is in before the case starts, so that the times measured are the case's own.
await pg.barrier();
if (mode === "all") {
  await timed(async () => {
    await pg.monitoredBarrier({ timeoutMs: 5_000 });
    await pg.monitoredBarrier({ timeoutMs: 5_000, waitAll: true });
    await pg.allReduce(new Float32Array(4));
    await pg.monitoredBarrier();
  });
} else if (mode === "absent") {
  if (absent) await sleep(timeoutMs * 3 + 1000);
  else await timed(() => pg.monitoredBarrier({ timeoutMs, waitAll }));
} else if (mode === "late") {
  if (absent) await sleep(lateMs);
  await timed(() => pg.monitoredBarrier({ timeoutMs, waitAll }));
} else if (mode === "late-barrier") {
  if (absent) await sleep(lateMs);
  await timed(() => pg.barrier({ timeoutMs }));
} else if (mode === "abort") {
  if (pg.rank === 2) await sleep(timeoutMs + 500);
  const signal = pg.rank === 1 ? AbortSignal.timeout(100) : undefined;
  await timed(() => pg.monitoredBarrier({ timeoutMs, signal }));
} else if (mode === "args") {
  const bad: [string, unknown, RegExp][] = [
    [
      "timeoutMs 0",
      { timeoutMs: 0 },
      /^RangeError: Cannot monitoredBarrier: expected timeoutMs to be a number > 0, found 0$/,
    ],
    ["timeoutMs -5", { timeoutMs: -5 }, /^RangeError: .*expected timeoutMs to be a number > 0, found -5$/],
    ["timeoutMs NaN", { timeoutMs: NaN }, /^RangeError: .*expected timeoutMs to be a number > 0, found NaN$/],
    [
      "timeoutMs string",
      { timeoutMs: "500" },
      /^RangeError: .*expected timeoutMs to be a number > 0, found "500"$/,
    ],
    [
      "waitAll number",
      { waitAll: 1 },
      /^TypeError: Cannot monitoredBarrier: expected waitAll to be a boolean, found number 1$/,
    ],
    ["waitAll string", { waitAll: "yes" }, /^TypeError: .*expected waitAll to be a boolean, found "yes"$/],
    ["options null", null, /^TypeError: Cannot monitoredBarrier: expected an options object, found null$/],
    ["signal", { signal: "stop" }, /^TypeError: .*expected signal to be an AbortSignal, found "stop"$/],
  ];
  for (const [name, options, pattern] of bad) {
    try {
      await pg.monitoredBarrier(options as never);
      result.failures.push(`${name}: did not throw`);
    } catch (e) {
      const text = `${(e as Error).name}: ${(e as Error).message}`;
      if (!pattern.test(text)) result.failures.push(`${name}: ${text}`);
    }
  }
  // An aborted signal refuses the call, and the group is still usable after every refusal.
  try {
    await pg.monitoredBarrier({ signal: AbortSignal.abort("stop") });
    result.failures.push("aborted signal: did not reject");
  } catch (e) {
    if ((e as { code?: string }).code !== "ABORTED") result.failures.push(`aborted signal: ${e}`);
  }
  await timed(() => pg.monitoredBarrier({ timeoutMs: 5_000, waitAll: true }));
}
console.log("RESULT " + JSON.stringify(result));
// The absent ranks stay until the others are done with their (failed) call, then everyone closes.
if (mode !== "all" && mode !== "args") {
  await sleep(absent ? 500 : lateMs + 1000);
}
await pg.close().catch(() => {});
