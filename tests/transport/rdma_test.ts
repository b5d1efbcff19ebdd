/**
 * The RDMA transport on real RDMA hardware: the TCP transport's cases (in one process, all ranks on the
 * first device with an active port), plus two across processes (every size in order; a killed peer). Where
 * there is no RDMA device they are skipped with the reason (`no RDMA device: ibv_get_device_list failed
 * with ENOSYS ...` on machines without a kernel RDMA stack); `DCOMM_REQUIRE_ALL=1` does not turn that skip
 * into a failure, since CI cannot install hardware. `rdma_loopback_test.ts` runs the same cases anywhere,
 * over a test double of libibverbs.
 */
import assert from "node:assert/strict";
import { TransportError, UnsupportedError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { TcpStoreServer } from "../../store/tcp_store_server.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { RdmaTransport } from "../../transport/rdma.ts";
import { ibverbsMissing, NoRdmaDeviceError } from "../../ffi/ibverbs/ibverbs.ts";
import { gatedTest, type GateOptions } from "../_util/skip.ts";
import { rdmaHardware } from "../_util/rdma_gate.ts";
import { descriptor, firstWrongByte, indexOf, MESSAGE_SIZES } from "./_fixtures/_pattern.ts";
import { type RdmaSuite, rdmaTransportCases } from "./_rdma_cases.ts";
import { RankProcess } from "./_fixtures/rank_process.ts";

const suite: RdmaSuite = { label: "", gate: rdmaHardware(), options: () => ({ heartbeatMs: 500 }) };

rdmaTransportCases(suite);

gatedTest("RdmaTransport delivers every size in order between two processes", suite.gate, async () => {
  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port, timeoutMs: 30_000 });
  await using peer = new RankProcess("rdma", server.port, 1, 2, "send-sizes");
  await using t = await RdmaTransport.connect(store, { rank: 0, size: 2, timeoutMs: 30_000 });
  for (const [i, bytes] of MESSAGE_SIZES.entries()) {
    const into = new Uint8Array(bytes);
    const desc = await t.pair(1).recv(into);
    assert.equal(indexOf(desc), i);
    assert.equal(firstWrongByte(into, i), -1, `message ${i} of ${bytes} bytes`);
  }
  await t.pair(1).send(descriptor(0), new Uint8Array(0));
  await peer.next("done");
  assert.equal((await peer.child.status).code, 0);
});

gatedTest("RdmaTransport fails every rank fast when a peer process dies, naming it", suite.gate, async () => {
  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port, timeoutMs: 30_000 });
  await using survivor = new RankProcess("rdma", server.port, 1, 3, "wait");
  await using victim = new RankProcess("rdma", server.port, 2, 3, "hang");
  await using t = await RdmaTransport.connect(store, {
    rank: 0,
    size: 3,
    timeoutMs: 30_000,
    heartbeatMs: 500,
  });
  await Promise.all([survivor.next("ready"), victim.next("ready")]);
  const pending = t.pair(2).recv(new Uint8Array(8));
  pending.catch(() => {});
  const killedAt = Date.now();
  victim.child.kill("SIGKILL");
  const error = await t.failed;
  // The heartbeat (0.5 s) plus the adapter's retries (7 × 67 ms, each up to 4× longer in practice).
  assert.ok(Date.now() - killedAt < 5_000, `failed after ${Date.now() - killedAt} ms`);
  assert.ok(error instanceof TransportError);
  assert.match(error.message, /Rank 2 stopped responding to rank \d mid-collective/);
  await assert.rejects(pending, (e) => e === error);
  const other = await survivor.next("failed");
  assert.equal(other.name, "TransportError");
  assert.match(String(other.message), /Rank 2 stopped responding to rank \d mid-collective/);
  await survivor.next("done");
  assert.equal((await survivor.child.status).code, 0);
});

const libraryGate: GateOptions = {
  missing: ibverbsMissing() === undefined
    ? undefined
    : `libibverbs not installed: ${ibverbsMissing()?.split("\n")[0]}`,
};

gatedTest(
  "RdmaTransport.connect() without an RDMA device fails at once, saying why",
  libraryGate,
  async () => {
    if (suite.gate.missing === undefined) return; // this machine has RDMA hardware: the cases above ran
    await using store = new MemoryStore();
    const started = performance.now();
    const error = await RdmaTransport.connect(store, { rank: 0, size: 2, timeoutMs: 10_000 }).catch((e) => e);
    assert.ok(performance.now() - started < 1_000, "no wait for peers");
    assert.ok(error instanceof NoRdmaDeviceError || error instanceof UnsupportedError, String(error));
    if (error instanceof NoRdmaDeviceError && error.errno === 38) {
      assert.equal(
        error.message,
        "No RDMA devices: ibv_get_device_list failed with ENOSYS (the kernel has no RDMA stack)",
      );
    }
    assert.equal(await store.numKeys(), 0, "nothing published");
  },
);
