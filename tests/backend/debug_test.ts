/**
 * `DCOMM_DEBUG=info|detail`: what `init()` chose (the rendezvous, the transport, the hosts, the segment)
 * and, at `detail`, every call's algorithm and transport as it ends; a bad value is refused by name.
 */
import assert from "node:assert/strict";
import { init } from "../../mod.ts";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/debug_rank.ts", import.meta.url).pathname;

async function run(level: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", "2", FIXTURE],
    env: { DCOMM_DEBUG: level, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text);
  return text;
}

Deno.test("DCOMM_DEBUG=info says how the ranks met, over what, the hosts and the segment", async () => {
  const text = await run("info");
  for (const rank of [0, 1]) {
    assert.match(
      text,
      new RegExp(
        `\\[rank${rank}\\]: dcomm\\[INFO\\] rank ${rank}/2: rendezvous: dcomm store at 127\\.0\\.0\\.1:\\d+ ` +
          `\\(joined, with a secret, prefix dcomm/[\\w-]+/0\\); 2 ranks met in \\d+ ms, connected in \\d+ ms; ` +
          `transport shm`,
      ),
    );
  }
  assert.match(text, /\[rank0\]: dcomm\[INFO\] rank 0\/2: hosts: 1 \(host 0: ranks 0-1\)/);
  assert.match(text, /\[rank0\]: dcomm\[INFO\] rank 0\/2: host segment: 4 buffers of 1\.0 MiB, pool 0 B/);
  assert.doesNotMatch(text, /DETAIL/);
});

Deno.test("DCOMM_DEBUG=detail says each call's algorithm and transport, and a failure", async () => {
  const text = await run("detail");
  for (const rank of [0, 1]) {
    assert.match(
      text,
      new RegExp(`dcomm\\[DETAIL\\] rank ${rank}/2: all-reduce #1 float32 × 4: segment over shm, [\\d.]+ µs`),
    );
    assert.match(
      text,
      new RegExp(`dcomm\\[DETAIL\\] rank ${rank}/2: broadcast #2 float32 × 16: segment over shm`),
    );
    assert.match(text, new RegExp(`dcomm\\[DETAIL\\] rank ${rank}/2: all-reduce #3 float32 × 4: failed: `));
  }
});

Deno.test("DCOMM_DEBUG with another value is refused, naming the values", async () => {
  await assert.rejects(
    init({ rank: 0, worldSize: 1, env: { DCOMM_DEBUG: "verbose" } }),
    { name: "RangeError", message: 'Invalid DCOMM_DEBUG: expected info, detail or off, found "verbose"' },
  );
  await using pg = await init({ rank: 0, worldSize: 1, env: { DCOMM_DEBUG: "" } });
  assert.equal(pg.size, 1);
});
