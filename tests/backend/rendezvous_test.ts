/**
 * The rendezvous on its own: the join that names the ranks it waits for (rank 0 every slice, the others
 * after a quiet spell) and the ones that never came; the store protocol chosen by the launcher's variables
 * (torchrun's agent store, `DCOMM_STORE_PROTOCOL=torch` with torch's own client reading dcomm's keys); the
 * error file torchrun reads.
 *
 * @module
 */
import assert from "node:assert/strict";
import { TimeoutError } from "../../core/errors.ts";
import { Rendezvous } from "../../backend/_rendezvous.ts";
import { errorFileText } from "../../backend/_error_file.ts";
import { TorchStore } from "../../store/torch_store.ts";
import { TorchStoreServer } from "../../store/torch_store_server.ts";
import { gatedTest } from "../_util/skip.ts";
import { hexOf, TorchPeer, whyNoTorch } from "../_util/torch.ts";
import { freePort, worldEnv } from "../_util/net.ts";

Deno.test("Rendezvous.join names the ranks it waits for, and the ones that never came", async () => {
  const port = freePort();
  const logs: string[][] = [[], []];
  const joins = [0, 1].map((rank) =>
    Rendezvous.join({
      env: worldEnv(rank, 3, port),
      secret: "",
      timeoutMs: 3_000,
      reportEveryMs: 500,
      quietMs: 1_000,
      log: (line) => logs[rank].push(line),
    })
  );
  for (const outcome of await Promise.allSettled(joins)) {
    assert.equal(outcome.status, "rejected");
    await assert.rejects(Promise.reject((outcome as PromiseRejectedResult).reason), (e: unknown) => {
      assert.ok(e instanceof TimeoutError, String(e));
      assert.match(
        e.message,
        new RegExp(
          `Cannot rendezvous: rank 2 never joined \\(2 of 3 joined within \\d+ s\\) the store rank 0 serves at 127\\.0\\.0\\.1:${port}`,
        ),
      );
      return true;
    });
  }
  assert.match(
    logs[0][0] ?? "",
    new RegExp(
      `^dcomm: rank 0 waiting for rank 2 \\(2 of 3 joined, \\d+ s, the store rank 0 serves at 127\\.0\\.0\\.1:${port}\\)$`,
    ),
  );
  assert.ok(logs[0].length >= 3, `rank 0 reports every slice: ${logs[0].join("\n")}`);
  assert.ok(
    logs[1].length >= 1 && logs[1].length < logs[0].length,
    `rank 1 only after its quiet spell: ${logs[1].join("\n")}`,
  );
  assert.match(logs[1][0], /^dcomm: rank 1 waiting for rank 2 /);
});

Deno.test("Rendezvous.join with every rank there says nothing and forms the world", async () => {
  const port = freePort();
  const lines: string[] = [];
  const all = await Promise.all(
    [0, 1, 2].map((rank) =>
      Rendezvous.join({
        env: worldEnv(rank, 3, port),
        secret: "",
        timeoutMs: 10_000,
        reportEveryMs: 200,
        log: (l) => lines.push(l),
      })
    ),
  );
  assert.deepEqual(lines, []);
  assert.deepEqual(all.map((r) => r.prefix), ["dcomm", "dcomm", "dcomm"]);
  await Promise.all(all.map((r) => r.checkOut("", false)));
});

Deno.test("Rendezvous.join refuses a DCOMM_STORE_PROTOCOL it does not know", async () => {
  await assert.rejects(
    Rendezvous.join({ env: worldEnv(0, 1, 0, { DCOMM_STORE_PROTOCOL: "etcd" }), timeoutMs: 1_000 }),
    /Invalid DCOMM_STORE_PROTOCOL: expected "dcomm" or "torch", found "etcd"/,
  );
});

gatedTest("DCOMM_STORE_PROTOCOL=torch: rank 0 serves torch's protocol and torch's client reads the keys", {
  missing: whyNoTorch(),
}, async () => {
  const port = freePort();
  const extra = { DCOMM_STORE_PROTOCOL: "torch", DCOMM_RUN_ID: "job7", DCOMM_RESTART_COUNT: "2" };
  const all = await Promise.all(
    [0, 1].map((rank) => Rendezvous.join({ env: worldEnv(rank, 2, port, extra), timeoutMs: 10_000 })),
  );
  assert.ok(all[0].server instanceof TorchStoreServer);
  assert.ok(all[1].store instanceof TorchStore);
  assert.equal(all[0].prefix, "dcomm/job7/2");
  await using python = await TorchPeer.start("client", port);
  assert.deepEqual(await python.call({ op: "get", key: "dcomm/job7/2/joined/1" }), { ok: hexOf("1") });
  await Promise.all(all.map((r) => r.checkOut("", false)));
});

gatedTest(
  "under torchrun's variables every rank joins torch's agent store as a client, under the attempt's prefix",
  { missing: whyNoTorch() },
  async () => {
    await using agent = await TorchPeer.start("server"); // the store torchrun's agent serves
    const extra = {
      TORCHELASTIC_USE_AGENT_STORE: "True",
      TORCHELASTIC_RUN_ID: "run42",
      TORCHELASTIC_RESTART_COUNT: "1",
      MASTER_ADDR: "localhost",
    };
    const all = await Promise.all(
      [0, 1].map((rank) => Rendezvous.join({ env: worldEnv(rank, 2, agent.port, extra), timeoutMs: 10_000 })),
    );
    assert.deepEqual(all.map((r) => r.server), [undefined, undefined], "nobody serves: the agent does");
    assert.deepEqual(all.map((r) => [r.prefix, r.address.protocol]), [["dcomm/run42/1", "torch"], [
      "dcomm/run42/1",
      "torch",
    ]]);
    assert.deepEqual(
      await agent.call({ op: "check", keys: ["dcomm/run42/1/joined/0", "dcomm/run42/1/joined/1"] }),
      { ok: true },
    );
    await Promise.all(all.map((r) => r.checkOut("", false)));
  },
);

Deno.test("errorFileText() writes torch's error file shape", () => {
  const error = new TypeError("bad input");
  const parsed = JSON.parse(errorFileText(error, 1_764_745_200_123));
  assert.equal(parsed.message.message, "TypeError: bad input");
  assert.equal(parsed.message.extraInfo.timestamp, "1764745200");
  assert.match(parsed.message.extraInfo.py_callstack, /^TypeError: bad input\n\s+at /);
  assert.equal(JSON.parse(errorFileText("plain")).message.message, "Error: plain");
});

Deno.test("Rendezvous.join without an address names the launcher it found and what to set", async () => {
  await assert.rejects(
    Rendezvous.join({ env: { OMPI_COMM_WORLD_RANK: "1", OMPI_COMM_WORLD_SIZE: "4" }, timeoutMs: 1_000 }),
    (e: unknown) => {
      assert.ok(e instanceof RangeError);
      assert.match(
        e.message,
        /^Cannot rendezvous: expected MASTER_ADDR and MASTER_PORT .* found neither; Open MPI's mpirun started this process \(OMPI_COMM_WORLD_SIZE=4\)/,
      );
      assert.match(
        e.message,
        /Set both for every rank, or launch with dcomm's launcher, torchrun, srun or MPICH's mpiexec$/,
      );
      return true;
    },
  );
});

Deno.test("Rendezvous.join under srun says the store's port was derived when it is taken", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const slurm = {
    SLURM_JOB_ID: "77",
    SLURM_STEP_ID: "0",
    SLURM_PROCID: "0",
    SLURM_STEP_NUM_TASKS: "2",
    SLURM_LOCALID: "0",
    SLURM_NODEID: "0",
    SLURM_STEP_NODELIST: "localhost",
    SLURM_STEP_TASKS_PER_NODE: "2",
    DCOMM_SLURM_PORT: String(taken.addr.port),
  };
  await assert.rejects(
    Rendezvous.join({ env: slurm, timeoutMs: 2_000 }),
    new RegExp(
      `Cannot start the store server on 127\\.0\\.0\\.1:${taken.addr.port}: .*\\(the port is derived from srun's ` +
        "variables: the first host of SLURM_STEP_NODELIST .*DCOMM_SLURM_PORT / MASTER_PORT, to choose\\)",
    ),
  );
});
