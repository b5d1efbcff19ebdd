/**
 * DistributedDataParallel with `faultTolerant`: a rank SIGKILLed at a random step, the other three finish
 * every step, the failed step's gradients averaged again over them (exactly the survivors' average), over
 * TCP and shared memory; a hook with state is refused.
 */
import assert from "node:assert/strict";
import { init } from "../../backend/init.ts";
import { DistributedDataParallel, signCompressHook } from "../../ddp/mod.ts";
import { type Rank, startRanks, stopAll, until } from "../_util/processes.ts";

const FIXTURE = new URL("./_fixtures/ft_rank.ts", import.meta.url).pathname;

const resultOf = (r: Rank): Record<string, unknown> | undefined => {
  const line = r.lines.find((l) => l.startsWith("RESULT "));
  return line ? JSON.parse(line.slice(7)) : undefined;
};

for (const [transport, trial] of ["tcp", "shm"].flatMap((t) => [[t, 1], [t, 2]] as const)) {
  Deno.test(`DDP keeps training on the survivors of a killed rank (${transport}, trial ${trial})`, async () => {
    const ranks = await startRanks(FIXTURE, 4, ["40"], { DCOMM_TRANSPORT: transport });
    try {
      await until(() => ranks.every((r) => r.lines.includes("STARTED")), 60_000);
      await new Promise((r) => setTimeout(r, 20 + Math.random() * 150)); // a random step
      ranks[2].child.kill("SIGKILL");
      const survivors = [ranks[0], ranks[1], ranks[3]];
      await until(() => survivors.every((r) => resultOf(r) !== undefined), 60_000);
      for (const r of survivors.map(resultOf) as Record<string, unknown>[]) {
        assert.deepEqual(r.members, [0, 1, 3], JSON.stringify(survivors.map(resultOf)));
        assert.deepEqual(r.wrong, []);
        assert.deepEqual(r.shrinks, [{ from: 4, to: 3, members: [0, 1, 3] }]);
        assert.equal(r.size, 3);
      }
    } finally {
      await stopAll(ranks);
    }
  });
}

Deno.test("faultTolerant refuses a hook with state", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  await assert.rejects(
    DistributedDataParallel.create(pg, [new Float32Array(4)], {
      faultTolerant: true,
      hook: signCompressHook(),
    }),
    /faultTolerant needs a hook without state \(allreduce, fp16, bf16\), found the 1bit hook/,
  );
});
