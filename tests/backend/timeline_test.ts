/**
 * `DCOMM_TIMELINE=out.json`: every call of every rank in the Trace Event format, gathered on rank 0 when
 * the world closes; each rank's own part beside it when a rank is gone.
 */
import assert from "node:assert/strict";
import type { TraceEvent } from "../../backend/_timeline.ts";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/timeline_rank.ts", import.meta.url).pathname;

async function run(path: string, mode = ""): Promise<{ code: number; text: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "3", FIXTURE, mode],
    env: { DCOMM_TIMELINE: path, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(90_000),
  }).output();
  return {
    code: out.code,
    text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
  };
}

Deno.test("DCOMM_TIMELINE writes every call of every rank as Trace Events", async () => {
  const dir = Deno.makeTempDirSync();
  const path = `${dir}/out.json`;
  const { code, text } = await run(path);
  assert.equal(code, 0, text);
  const { traceEvents } = JSON.parse(Deno.readTextFileSync(path)) as { traceEvents: TraceEvent[] };
  const names = traceEvents.filter((e) => e.ph === "M" && e.name === "process_name").map((e) => e.args?.name);
  assert.deepEqual(names, ["rank 0", "rank 1", "rank 2"]);
  for (const rank of [0, 1, 2]) {
    const calls = traceEvents.filter((e) => e.pid === rank && e.cat === "call");
    assert.deepEqual(
      calls.map((e) => e.name),
      [1, 2, 3, 4, 5, 6, 7, 8, 9].map((s) => `${["allReduce", "allReduce", "broadcast"][(s - 1) % 3]} #${s}`),
    );
    for (const e of calls) {
      assert.ok((e.dur ?? -1) >= 0 && (e.ts ?? 0) > 1.7e15, JSON.stringify(e));
      assert.equal(typeof e.args?.algorithm, "string");
      assert.equal(e.args?.transport, "shm");
    }
    assert.deepEqual(calls.map((e) => e.args?.bytes), [
      16,
      1 << 20,
      1 << 18,
      16,
      1 << 20,
      1 << 18,
      16,
      1 << 20,
      1 << 18,
    ]);
    // A queued slice ends where its call starts.
    for (const q of traceEvents.filter((e) => e.pid === rank && e.cat === "queued")) {
      const call = calls.find((e) => e.name === q.name.replace(/ queued$/, ""));
      assert.ok(call, q.name);
      assert.ok(
        Math.abs((q.ts ?? 0) + (q.dur ?? 0) - (call.ts ?? 0)) < 1,
        `${q.name} ends at its call's start`,
      );
    }
  }
  Deno.removeSync(dir, { recursive: true });
});

Deno.test("DCOMM_TIMELINE: with a rank gone, each rank writes its own part and says so", async () => {
  const dir = Deno.makeTempDirSync();
  const path = `${dir}/out.json`;
  const { text } = await run(path, "die");
  const files = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  assert.deepEqual(files, ["out.rank-0.json", "out.rank-1.json"], text);
  assert.match(text, /the timeline's ranks could not be gathered \(.*\); rank 0 writes .*out\.rank-0\.json/);
  const { traceEvents } = JSON.parse(Deno.readTextFileSync(`${dir}/out.rank-1.json`)) as {
    traceEvents: TraceEvent[];
  };
  assert.equal(traceEvents.filter((e) => e.cat === "call").length, 9);
  Deno.removeSync(dir, { recursive: true });
});
