/**
 * The transport a world connects over, from the ranks' host identities: every rank on one host is shared
 * memory (the other tests), hosts of one rank each are TCP, and hosts with several ranks are `"hybrid"`:
 * shared memory within a host and TCP between hosts, where `"auto"` all-reduces hierarchically. Hosts are
 * told apart here by `DCOMM_HOST_ID` (as NCCL's `NCCL_HOSTID`), on real processes.
 */
import assert from "node:assert/strict";
import { hostIdentity } from "../../backend/cpu/_connect.ts";
import { launchedResults } from "../_util/launched.ts";
import { chooseAlgorithm } from "../../collectives/mod.ts";
import { DEFAULT_SHM_CONSTANTS, DEFAULT_TCP_CONSTANTS } from "../../sim/cost_model.ts";

const FIXTURE = new URL("./_fixtures/hybrid_rank.ts", import.meta.url).pathname;

function run(hostOf: string): Promise<Record<string, unknown>[]> {
  return launchedResults(FIXTURE, hostOf.split(",").length, { DCOMM_HOST_OF: hostOf });
}

for (const hostOf of ["a,a,b,b", "a,a,a,b,b", "a,b,c"]) {
  const hosts = hostOf.split(",").map((h) => h.charCodeAt(0) - 97);
  // What the model picks with the measured constants: TCP between hosts, shared memory within.
  const expectAuto = chooseAlgorithm("allReduce", {
    bytes: 4 << 20,
    size: hosts.length,
    constants: DEFAULT_TCP_CONSTANTS,
    intra: DEFAULT_SHM_CONSTANTS,
    hosts,
  });
  Deno.test(`hosts ${hostOf}: ${hostOf === "a,b,c" ? "TCP" : "shared memory within hosts, TCP between"}, and "auto" runs what the model picks (${expectAuto}) at 4 MiB`, async () => {
    if (hostOf === "a,a,b,b") assert.equal(expectAuto, "hierarchical");
    const results = await run(hostOf);
    const hybrid = hostOf !== "a,b,c";
    for (const r of results) {
      assert.deepEqual(r.wrong, [], JSON.stringify(r));
      const big = r[`auto/${1 << 20}`] as { algorithm: string; transport: string };
      assert.equal(big.transport, hybrid ? "shm+tcp" : "tcp");
      assert.equal(big.algorithm, expectAuto);
      assert.equal((r["hierarchical/1000"] as { algorithm: string }).algorithm, "hierarchical");
    }
  });
}

Deno.test("hostIdentity(): the boot id and the network namespace, or DCOMM_HOST_ID", () => {
  const before = Deno.env.get("DCOMM_HOST_ID");
  try {
    Deno.env.delete("DCOMM_HOST_ID");
    const id = hostIdentity();
    assert.match(id, /\/net:\[\d+\]$/);
    Deno.env.set("DCOMM_HOST_ID", "node-7");
    assert.equal(hostIdentity(), "forced/node-7");
  } finally {
    if (before === undefined) Deno.env.delete("DCOMM_HOST_ID");
    else Deno.env.set("DCOMM_HOST_ID", before);
  }
});
