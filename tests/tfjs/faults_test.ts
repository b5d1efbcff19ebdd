/**
 * A rank killed during `model.fit()`: every other rank's fit fails within seconds, naming the dead rank
 * (ranks as processes, started directly so that no launcher stops the survivors itself).
 */
import assert from "node:assert/strict";
import { generateSecret } from "../../store/secret.ts";
import { freePort } from "../_util/net.ts";

const FIXTURE = new URL("./_fixtures/fit_rank.ts", import.meta.url).pathname;

interface Rank {
  child: Deno.ChildProcess;
  lines: string[];
  done: Promise<void>;
}

function start(size: number, port: number, transport: string): Rank[] {
  const secret = generateSecret();
  return Array.from({ length: size }, (_, rank) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", FIXTURE],
      env: {
        RANK: String(rank),
        WORLD_SIZE: String(size),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        DCOMM_STORE_SECRET: secret,
        DCOMM_TRANSPORT: transport,
      },
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const lines: string[] = [];
    const done = (async () => {
      const decoder = new TextDecoder();
      let buf = "";
      for await (const chunk of child.stdout) {
        buf += decoder.decode(chunk);
        const parts = buf.split("\n");
        buf = parts.pop() ?? "";
        lines.push(...parts);
      }
      await child.status;
    })();
    return { child, lines, done };
  });
}

async function until(cond: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`Condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

for (const transport of ["shm", "tcp"]) {
  Deno.test(`a rank killed during model.fit() fails every other rank's fit, naming it (${transport})`, async () => {
    const ranks = start(3, freePort(), transport);
    try {
      await until(() => ranks.every((r) => r.lines.includes("STARTED")), 60_000);
      await new Promise((r) => setTimeout(r, 300));
      const killedAt = Date.now();
      ranks[2].child.kill("SIGKILL");
      const survivors = [ranks[0], ranks[1]];
      const failed = (r: Rank) => r.lines.find((l) => l.startsWith("FAILED "));
      await until(() => survivors.every((r) => failed(r) !== undefined), 30_000);
      assert.ok(Date.now() - killedAt < 10_000, `the survivors took ${Date.now() - killedAt} ms to fail`);
      for (const r of survivors) {
        const m = /^FAILED (\S+) (\d+) (.*)$/.exec(failed(r) as string);
        assert.ok(m, failed(r));
        assert.match(m[1], /TransportError|DistError/, m[0]);
        assert.match(m[3], /[Rr]ank 2\b/, `the error does not name the dead rank: ${m[0]}`);
      }
    } finally {
      for (const r of ranks) {
        try {
          r.child.kill("SIGKILL");
        } catch {
          // Already gone.
        }
      }
      await Promise.all(ranks.map((r) => r.done));
    }
  });
}
