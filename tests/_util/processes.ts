/**
 * Ranks as processes of their own, started without the launcher (which would stop the others when one
 * dies): rank 0 serves the store at a free port, every rank gets RANK, WORLD_SIZE, MASTER_ADDR/PORT and one
 * store secret; the fault tests kill some and read what the others print.
 *
 * @module
 */
import { generateSecret } from "../../store/secret.ts";
import { freePort } from "./net.ts";

/** A rank started as a process of its own, its stdout collected line by line. */
export interface Rank {
  child: Deno.ChildProcess;
  lines: string[];
  done: Promise<void>;
}

/**
 * Starts `size` ranks of `fixture` (with `args`), rank 0 serving the store.
 *
 * @returns The ranks, each with its process, its stdout lines so far, and its end.
 */
export async function startRanks(
  fixture: string,
  size: number,
  args: string[],
  env: Record<string, string> = {},
): Promise<Rank[]> {
  const port = await freePort();
  const secret = generateSecret();
  return Array.from({ length: size }, (_, rank) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", fixture, ...args],
      env: {
        ...env,
        RANK: String(rank),
        WORLD_SIZE: String(size),
        MASTER_ADDR: "127.0.0.1",
        MASTER_PORT: String(port),
        DCOMM_STORE_SECRET: secret,
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

/** Waits until `cond()` holds, polling every 20 ms, failing after `ms`. */
export async function until(cond: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`Condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** SIGKILLs every rank still running (a test's cleanup) and waits for all to end. */
export async function stopAll(ranks: readonly Rank[]): Promise<void> {
  for (const r of ranks) {
    try {
      r.child.kill("SIGKILL");
    } catch {
      // ended already
    }
  }
  await Promise.all(ranks.map((r) => r.done));
}
