/**
 * `DCOMM_TIMELINE=out.json`: every call of every rank in the Trace Event format, gathered on rank 0 when
 * the world closes; each rank's own part beside it when a rank is gone.
 */
import assert from "node:assert/strict";
import type { TraceEvent } from "../../backend/_timeline.ts";
import type { CallPhases } from "../../core/phases.ts";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/timeline_rank.ts", import.meta.url).pathname;

async function run(
  path: string,
  mode = "",
  env: Record<string, string> = {},
): Promise<{ code: number; text: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "3", FIXTURE, mode],
    env: { DCOMM_TIMELINE: path, NO_COLOR: "1", ...env },
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
  let reduced = 0;
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
    // Each call holds its phases: their totals make its time, their slices lie inside it.
    for (const e of calls) {
      const p = e.args?.phases as CallPhases;
      assert.equal(typeof p?.waitingMs, "number", `${e.name}: waiting is measured on shm`);
      const sum = (p.waitingMs ?? 0) + p.movingMs + p.reducingMs + p.codecMs;
      assert.ok(Math.abs(sum * 1000 - (e.dur ?? 0)) <= Math.max(2, 0.02 * (e.dur ?? 0)), JSON.stringify(e));
      assert.equal(p.codecMs, 0, e.name);
      const slices = traceEvents.filter((x) =>
        x.pid === rank && x.cat === "phase" && x.args?.call === e.name
      );
      for (const x of slices) {
        assert.ok(["waiting for peers", "moving bytes", "reducing"].includes(x.name), x.name);
        assert.ok(
          (x.ts ?? 0) >= (e.ts ?? 0) - 1 && (x.ts ?? 0) + (x.dur ?? 0) <= (e.ts ?? 0) + (e.dur ?? 0) + 2,
        );
      }
      if (e.name.startsWith("allReduce") && e.args?.bytes === 1 << 20 && p.reducingMs > 0) {
        reduced++;
        assert.ok(slices.some((x) => x.name === "reducing"), e.name);
      }
      if (e.name.startsWith("broadcast")) assert.equal(p.reducingMs, 0, e.name);
    }
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
  // A call the main thread began and the Worker finished reports the Worker's part, so a rank's sum may
  // have been reduced before the part reported; 9 sums of 1 MiB are not all reduced there.
  assert.ok(reduced > 0, "no 1 MiB all-reduce reported time reducing");
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

Deno.test("DCOMM_TIMELINE: a compressed call over TCP has a codec phase; waiting is part of communicating", async () => {
  const dir = Deno.makeTempDirSync();
  const path = `${dir}/out.json`;
  const { code, text } = await run(path, "codec", { DCOMM_TRANSPORT: "tcp" });
  assert.equal(code, 0, text);
  const { traceEvents } = JSON.parse(Deno.readTextFileSync(path)) as { traceEvents: TraceEvent[] };
  const calls = traceEvents.filter((e) => e.cat === "call");
  assert.equal(calls.length, 6);
  for (const e of calls) {
    const p = e.args?.phases as CallPhases;
    assert.equal(e.args?.compression, "int8");
    assert.equal(e.args?.transport, "tcp");
    assert.equal(p.waitingMs, undefined, "TCP does not measure waiting");
    assert.ok(p.codecMs > 0, JSON.stringify(p));
    const names = traceEvents.filter((x) => x.cat === "phase" && x.pid === e.pid && x.args?.call === e.name)
      .map((x) => x.name);
    assert.ok(names.includes("codec") && names.includes("communicating"), names.join(", "));
    assert.ok(!names.includes("waiting for peers") && !names.includes("moving bytes"), names.join(", "));
  }
  Deno.removeSync(dir, { recursive: true });
});
