/**
 * The body of one rank thread of {@linkcode spawnThreads}: join the world, run the module's `main`, close.
 *
 * @module
 */
/// <reference lib="deno.worker" />
import { toWire } from "../core/wire_error.ts";
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
    reply = { ok: false, error: toWire(e) };
  }
  try {
    self.postMessage(reply);
  } catch (e) {
    // main's value does not clone (a function, a class instance holding one): say so instead of crashing.
    self.postMessage(
      {
        ok: false,
        error: toWire(
          new TypeError(
            `${start.module}'s main must return a structured-cloneable value, found one that does not clone: ` +
              `${(e as Error)?.message ?? e}`,
            { cause: e },
          ),
        ),
      } satisfies ThreadReply,
    );
  }
};
