/**
 * The body of one rank thread of {@linkcode spawnThreads}: join the world, run the module's `main`, close.
 *
 * @module
 */
/// <reference lib="deno.worker" />
import { init } from "./init.ts";
import type { ThreadReply, ThreadStart } from "./_thread_protocol.ts";

self.onmessage = async (event: MessageEvent<ThreadStart>): Promise<void> => {
  const start = event.data;
  let reply: ThreadReply;
  try {
    const mod = await import(start.module);
    if (typeof mod.main !== "function") {
      throw new TypeError(
        `${start.module} must export a function main(pg, context), found ${typeof mod.main}`,
      );
    }
    const pg = await init({
      ...start.init,
      rank: start.rank,
      worldSize: start.worldSize,
      initMethod: `tcp://127.0.0.1:${start.port}`,
      secret: start.secret,
      inprocMesh: start.mesh,
      timeoutMs: start.timeoutMs,
      env: { DCOMM_STORE_HOSTED: "1" },
    });
    try {
      reply = { ok: true, value: await mod.main(pg, { args: start.args }) };
    } finally {
      await pg.close();
    }
  } catch (e) {
    reply = { ok: false, name: (e as Error)?.name ?? "Error", message: (e as Error)?.message ?? String(e) };
  }
  self.postMessage(reply);
};
