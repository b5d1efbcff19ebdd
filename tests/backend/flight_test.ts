/**
 * The flight recorder and its analyzer (`cli/trace.ts`): 3 ranks with `DCOMM_TRACE_DIR` set; a rank
 * that skips a call, one that is stopped (SIGSTOP), one with another dtype; every rank that runs writes
 * its dump when its call fails, and the analyzer names the odd rank and the call each time.
 */
import assert from "node:assert/strict";
import { generateSecret } from "../../store/secret.ts";
import { analyzeTraces, readTraces, traceMain } from "../../cli/trace.ts";
import type { FlightDump } from "../../mod.ts";
import { init } from "../../mod.ts";
import { freePort } from "../_util/net.ts";

const FIXTURE = new URL("./_fixtures/flight_rank.ts", import.meta.url).pathname;
const TRACE = new URL("../../cli/trace.ts", import.meta.url).pathname;

/** Runs the fixture on 3 ranks in `mode`; returns each rank's last line and the trace directory. */
async function run(
  mode: string,
  env: Record<string, string> = {},
  size = 3,
): Promise<{ dir: string; out: string[] }> {
  const dir = Deno.makeTempDirSync({ prefix: "dcomm-trace-" });
  const port = freePort(), secret = generateSecret();
  const children = Array.from({ length: size }, (_, rank) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", FIXTURE, mode],
      env: {
        ...env,
        RANK: String(rank),
        WORLD_SIZE: String(size),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        DCOMM_STORE_SECRET: secret,
        DCOMM_TRACE_DIR: dir,
      },
      stdout: "piped",
      stderr: "piped",
    }).spawn());
  const decoder = new TextDecoder();
  const out: string[] = new Array(size).fill("");
  const stopped = mode === "stop" ? 1 : -1;
  const timer = setTimeout(() => children.forEach((c) => c.kill("SIGKILL")), 60_000);
  try {
    await Promise.all(children.map(async (c, rank) => {
      if (rank === stopped) return;
      const o = await c.output();
      out[rank] = decoder.decode(o.stdout).trim() + decoder.decode(o.stderr).trim();
    }));
  } finally {
    clearTimeout(timer);
    if (stopped >= 0) {
      children[stopped].kill("SIGKILL");
      await children[stopped].output();
    }
  }
  return { dir, out };
}

function dumps(dir: string): FlightDump[] {
  return readTraces(dir).sort((a, b) => a.rank - b.rank);
}

Deno.test("flight recorder: a rank that skips a call is named, with the call", async () => {
  const { dir, out } = await run("skip");
  const d = dumps(dir);
  assert.deepEqual(d.map((x) => x.rank), [0, 1, 2], out.join("\n"));
  for (const x of d) assert.notEqual(x.reason, "dump()", "written by the failure, not by hand");
  const findings = analyzeTraces(d);
  const g = findings.groups[0];
  assert.deepEqual(g.mismatch?.ranks, [2], findings.lines.join("\n"));
  assert.equal(g.mismatch?.seq, 4);
  assert.equal(g.mismatch?.othersCall, "barrier");
  assert.match(
    findings.lines.join("\n"),
    /first mismatch at seq 4: rank 2 called all-reduce float32 × 256, ranks 0, 1 barrier/,
  );
  Deno.removeSync(dir, { recursive: true });
});

for (const transport of ["auto", "tcp"]) {
  Deno.test(`flight recorder: a stopped rank writes nothing, and is named as the likely cause (${transport})`, async () => {
    const { dir, out } = await run("stop", { DCOMM_TRANSPORT: transport });
    const d = dumps(dir);
    assert.deepEqual(d.map((x) => x.rank), [0, 2], out.join("\n"));
    for (const x of d) assert.match(x.reason, /Timed out|rank 1/i);
    const findings = analyzeTraces(d);
    assert.deepEqual(findings.missing, [1]);
    const text = findings.lines.join("\n");
    assert.match(
      text,
      /rank 1 wrote no dump .* ranks 0, 2 waited in seq 5, all-reduce float32 × 256: it is the likely cause/,
    );
    assert.deepEqual(findings.groups[0].stuck.map((s) => [s.rank, s.seq]), [[0, 5], [2, 5]]);
    Deno.removeSync(dir, { recursive: true });
  });
}

Deno.test("flight recorder: a rank with another dtype is named, and `trace analyze` prints it", async () => {
  const { dir, out } = await run("dtype");
  assert.equal(dumps(dir).length, 3, out.join("\n"));
  const cli = await new Deno.Command(Deno.execPath(), { args: ["run", "-A", TRACE, "analyze", dir] })
    .output();
  const text = new TextDecoder().decode(cli.stdout);
  assert.equal(cli.code, 0, text + new TextDecoder().decode(cli.stderr));
  assert.match(text, /^3 of 3 ranks wrote a dump/);
  assert.match(
    text,
    /first mismatch at seq 5: rank 1 called all-reduce int32 × 256, ranks 0, 2 all-reduce float32 × 256/,
  );
  Deno.removeSync(dir, { recursive: true });
});

Deno.test("flight recorder: calls that all agree and finish give a clean bill", async () => {
  const { dir, out } = await run("none");
  const d = dumps(dir);
  assert.equal(d.length, 3, out.join("\n"));
  assert.deepEqual(d[0].groups[0].calls.map((c) => [c.seq, c.collective, c.state]), [
    [1, "allReduce", "done"],
    [2, "barrier", "done"],
    [3, "broadcast", "done"],
    [4, "barrier", "done"],
    [5, "allReduce", "done"],
  ]);
  const findings = analyzeTraces(d);
  assert.equal(findings.groups[0].mismatch, undefined);
  assert.deepEqual(findings.groups[0].behind, []);
  assert.match(
    findings.lines.join("\n"),
    /Every rank that wrote a dump finished every call it made, and they agree/,
  );
  Deno.removeSync(dir, { recursive: true });
});

Deno.test("flight recorder: the ring keeps the last DCOMM_TRACE_BUFFER calls, and counts the rest", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  for (let i = 0; i < 2005; i++) await pg.allReduce(new Float32Array(1));
  const [world] = pg.dump().groups;
  assert.equal(world.calls.length, 2000);
  assert.equal(world.dropped, 5);
  assert.equal(world.calls[0].seq, 6);
  assert.equal(world.calls.at(-1)?.seq, 2005);
});

Deno.test("trace analyze: a directory without dumps and a bad command say what was expected", () => {
  const dir = Deno.makeTempDirSync();
  const errors: string[] = [];
  const original = console.error;
  console.error = (m: string) => errors.push(m);
  try {
    assert.equal(traceMain(["analyze", dir]), 1);
    assert.equal(traceMain(["summarise", dir]), 2);
  } finally {
    console.error = original;
    Deno.removeSync(dir);
  }
  assert.match(errors[0], /No flight recorder dumps in .*: expected rank-<n>\.json files/);
  assert.match(errors[1], /Expected "analyze DIR", found "summarise/);
});
