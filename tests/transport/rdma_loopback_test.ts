/**
 * The RDMA transport's cases (the TCP transport's, where they apply) run over the loopback TEST DOUBLE of
 * libibverbs (tests/ffi/ibverbs/_loopback_verbs.c): a software device in this process that checks queue
 * pair transitions, keys, PSNs and access rights as an adapter would and copies the bytes itself. It proves
 * the transport's protocol (framing, slots, credits, farewells, liveness) and its use of the binding on
 * machines without RDMA hardware; `rdma_test.ts` runs the same cases on real hardware.
 */
import assert from "node:assert/strict";
import { TransportError } from "../../core/errors.ts";
import { NoRdmaDeviceError } from "../../ffi/ibverbs/ibverbs.ts";
import { EMPTY_DEVICE_LIST } from "../../ffi/ibverbs/verbs.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { RdmaTransport } from "../../transport/rdma.ts";
import { loadLoopback } from "../ffi/ibverbs/_loopback.ts";
import { descriptor } from "./_fixtures/_pattern.ts";
import { type RdmaSuite, rdmaTransportCases, world } from "./_rdma_cases.ts";
import { gatedTest } from "../_util/skip.ts";

const loopback = await loadLoopback();

const suite: RdmaSuite = {
  label: " (loopback test double)",
  gate: { missing: loopback.missing },
  // Each rank on its own device (LID rank + 1), as ranks on different hosts would be.
  options: (rank) => ({ device: `loop${rank % 8}`, heartbeatMs: 200 }),
};

rdmaTransportCases(suite);

gatedTest(
  "RdmaTransport fails every rank waiting on a peer whose device died, naming it (loopback test double)",
  suite.gate,
  async () => {
    await using w = await world(suite, 3);
    const [a, b, victim] = w.ranks;
    const pendingA = a.pair(2).recv(new Uint8Array(8));
    const pendingB = b.pair(2).recv(new Uint8Array(8));
    for (const pending of [pendingA, pendingB]) pending.catch(() => {}); // checked below, in turn
    const killedAt = performance.now();
    loopback.knobs?.loopback_kill_device(2); // its process "dies": its queue pairs stop answering
    try {
      for (const [t, pending] of [[a, pendingA], [b, pendingB]] as const) {
        const error = await t.failed;
        assert.ok(error instanceof TransportError);
        // Each survivor finds out itself, or from the other survivor's ABORT, whichever comes first.
        assert.match(
          error.message,
          /^(Rank \d aborted: )?Rank 2 stopped responding to rank \d mid-collective \(a liveness probe \(zero-byte RDMA write\) completed with RETRY_EXC_ERR: transport retry counter exceeded\)$/,
        );
        if (!error.message.includes("aborted")) assert.equal(error.peer, 2);
        await assert.rejects(pending, (e) => e === error);
      }
      assert.ok(performance.now() - killedAt < 3_000, "found within the heartbeat and a poll");
    } finally {
      victim.abort(new Error("The test killed this rank"));
      loopback.knobs?.loopback_reset();
    }
  },
);

gatedTest(
  "RdmaTransport frees every queue pair and region when it closes (loopback test double)",
  suite.gate,
  async () => {
    const knobs = loopback.knobs;
    assert.ok(knobs);
    const before = [knobs.loopback_live_qps(), knobs.loopback_live_mrs()];
    {
      await using w = await world(suite, 3);
      assert.deepEqual([knobs.loopback_live_qps(), knobs.loopback_live_mrs()], [
        before[0] + 6,
        before[1] + 12,
      ]);
      const got = new Uint8Array(4);
      await Promise.all([
        w.ranks[0].pair(2).send(descriptor(0), new Uint8Array(4)),
        w.ranks[2].pair(0).recv(got),
      ]);
    }
    assert.deepEqual([knobs.loopback_live_qps(), knobs.loopback_live_mrs()], before);
  },
);

gatedTest(
  "RdmaTransport.connect() on an empty device list fails at once (loopback test double)",
  suite.gate,
  async () => {
    await using store = new MemoryStore();
    loopback.knobs?.loopback_set_device_count(0);
    try {
      await assert.rejects(
        RdmaTransport.connect(store, { rank: 0, size: 2, timeoutMs: 5_000 }),
        (e: unknown) => e instanceof NoRdmaDeviceError && e.message === EMPTY_DEVICE_LIST,
      );
    } finally {
      loopback.knobs?.loopback_reset();
    }
  },
);
