/**
 * Closing a world whose store's host stopped answering (SIGSTOP: a stopped or partitioned host) is bounded:
 * each rank's `pg.close()` returns within the world's timeout, instead of waiting on the store forever.
 */
import assert from "node:assert/strict";

const RANK = new URL("./_fixtures/close_stopped_rank.ts", import.meta.url).pathname;
const SERVER = new URL("../store/_fixtures/store_server.ts", import.meta.url).pathname;

/** Reads `reader` until a whole line matches `pattern`. */
async function lineStarting(
  reader: ReadableStreamDefaultReader<string>,
  pattern: RegExp,
  seen: { text: string },
): Promise<string> {
  for (;;) {
    const line = seen.text.split("\n").slice(0, -1).find((l) => pattern.test(l));
    if (line !== undefined) return line;
    const { value, done } = await reader.read();
    if (done) throw new Error(`Expected a line matching ${pattern}, found the end of:\n${seen.text}`);
    seen.text += value;
  }
}

Deno.test("pg.close() returns within the timeout when the store's host is stopped", async () => {
  const server = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SERVER],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const serverOut = server.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const ranks: Deno.ChildProcess[] = [];
  try {
    const port = Number(await lineStarting(serverOut, /^\d+$/, { text: "" }));
    assert.ok(port > 0, "the server printed its port");
    const readers = [];
    const texts = [{ text: "" }, { text: "" }];
    for (let rank = 0; rank < 2; rank++) {
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", RANK],
        env: {
          RANK: String(rank),
          WORLD_SIZE: "2",
          MASTER_ADDR: "127.0.0.1",
          MASTER_PORT: String(port),
          DCOMM_STORE_HOSTED: "1",
          FIXTURE_TIMEOUT_MS: "3000",
        },
        stdin: "piped",
        stdout: "piped",
        stderr: "null",
      }).spawn();
      ranks.push(child);
      readers.push(child.stdout.pipeThrough(new TextDecoderStream()).getReader());
    }
    for (let rank = 0; rank < 2; rank++) {
      assert.equal(await lineStarting(readers[rank], /^READY/, texts[rank]), "READY 3");
    }
    server.kill("SIGSTOP");
    for (const child of ranks) {
      const writer = child.stdin.getWriter();
      await writer.write(new TextEncoder().encode("close\n"));
      await writer.close();
    }
    for (let rank = 0; rank < 2; rank++) {
      const closed = await lineStarting(readers[rank], /^CLOSED/, texts[rank]);
      const ms = Number(closed.split(" ")[1]);
      // The world's timeout (3 s) bounds the close, with room for a busy two-core machine.
      assert.ok(ms < 6_000, `rank ${rank} took ${ms} ms to close`);
    }
    for (const child of ranks) assert.equal((await child.status).code, 0);
  } finally {
    for (const child of ranks) {
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
      await child.status;
    }
    try {
      server.kill("SIGCONT");
      server.kill("SIGKILL");
    } catch { /* exited */ }
    await serverOut.cancel();
    await server.status;
  }
});
