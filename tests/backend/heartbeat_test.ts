/**
 * The heartbeat (`backend/cpu/_heartbeat.ts`): a stopped rank (SIGSTOP) is told from a slow one. In a
 * ring of 4 ranks over TCP, the ranks that wait for a healthy partner (itself waiting for the stopped
 * one) used to be told only of that partner; now every survivor's timeout names the stopped rank. With
 * `DCOMM_HEARTBEAT_MS=0` there is no heartbeat, and a bad value is refused.
 */
import assert from "node:assert/strict";
import { generateSecret } from "../../store/secret.ts";
import { init } from "../../mod.ts";
import { freePort } from "../_util/net.ts";

const FIXTURE = new URL("./_fixtures/heartbeat_rank.ts", import.meta.url).pathname;

async function run(env: Record<string, string>, size = 4): Promise<string[]> {
  const port = freePort(), secret = generateSecret();
  const children = Array.from({ length: size }, (_, rank) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", FIXTURE],
      env: {
        ...env,
        RANK: String(rank),
        WORLD_SIZE: String(size),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        DCOMM_STORE_SECRET: secret,
      },
      stdout: "piped",
      stderr: "piped",
    }).spawn());
  const timer = setTimeout(() => children.forEach((c) => c.kill("SIGKILL")), 60_000);
  const out: string[] = new Array(size).fill("");
  try {
    await Promise.all(children.map(async (c, rank) => {
      if (rank === 1) return;
      const o = await c.output();
      out[rank] = new TextDecoder().decode(o.stdout).trim() + new TextDecoder().decode(o.stderr).trim();
    }));
  } finally {
    clearTimeout(timer);
    children[1].kill("SIGKILL");
    await children[1].output();
  }
  return out;
}

Deno.test("heartbeat: every survivor of a stopped rank in a TCP ring names it", async () => {
  const out = await run({ DCOMM_TRANSPORT: "tcp" });
  for (const rank of [0, 2, 3]) {
    assert.match(out[rank], /^FAILED /, `rank ${rank}: ${out[rank]}`);
    assert.match(
      out[rank],
      /rank 1 sent no heartbeat for [\d.]+ s \(stopped or hung\?\): the likely cause|waiting for rank 1$/,
      `rank ${rank}: ${out[rank]}`,
    );
  }
  // The ranks two hops away wait for a healthy partner: the heartbeat is what names rank 1 to them.
  assert.ok(out.some((o) => /sent no heartbeat/.test(o)), out.join("\n"));
});

Deno.test("heartbeat: DCOMM_HEARTBEAT_MS=0 turns it off; a bad value is refused", async () => {
  const out = await run({ DCOMM_TRANSPORT: "tcp", DCOMM_HEARTBEAT_MS: "0" });
  for (const rank of [0, 2, 3]) {
    assert.match(out[rank], /^FAILED /, `rank ${rank}: ${out[rank]}`);
    assert.doesNotMatch(out[rank], /heartbeat/);
  }
  // Without it the ranks two hops from the stopped one blame their healthy partner alone.
  assert.ok([0, 3].some((r) => !/rank 1/.test(out[r])), out.join("\n"));
  await assert.rejects(
    init({ rank: 0, worldSize: 1, env: { DCOMM_HEARTBEAT_MS: "fast" } }),
    { name: "RangeError", message: 'Invalid DCOMM_HEARTBEAT_MS: expected milliseconds >= 0, found "fast"' },
  );
});

Deno.test("heartbeat: the launcher's headline names the stopped rank its survivor's error names", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("../../cli/launch.ts", import.meta.url).pathname, "--nproc-per-node", "4"]
      .concat([FIXTURE, "ring", "throw"]),
    env: { DCOMM_TRANSPORT: "tcp", NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.notEqual(out.code, 0);
  assert.match(
    text,
    /^Rank [023] exited with code 1; the launcher stopped the other ranks\. Its error names rank 1 as the likely cause: no heartbeat \(stopped or hung\?\)\.$/m,
  );
});
