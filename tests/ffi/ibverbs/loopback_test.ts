/**
 * The binding's objects and calls through the loopback TEST DOUBLE of libibverbs (_loopback_verbs.c), which
 * stands in for the library on machines without RDMA hardware: both shapes of "no device", the
 * compatibility and full port queries, registration, the RC queue pair transitions (the double accepts only
 * the IB spec's attribute masks), RDMA writes with immediates between two queue pairs, completion events,
 * and the GPUDirect probes.
 */
import assert from "node:assert/strict";
import { IbverbsError, NoRdmaDeviceError } from "../../../ffi/ibverbs/ibverbs.ts";
import {
  IBV_ACCESS,
  IBV_LINK_LAYER,
  IBV_MTU,
  IBV_PORT_STATE,
  IBV_QP_ATTR,
  IBV_QP_ATTR_MASK,
  IBV_QPS,
  IBV_SEND,
  IBV_WC_FLAGS,
  IBV_WC_OPCODE,
  IBV_WC_STATUS,
  IBV_WR,
} from "../../../ffi/ibverbs/layout.ts";
import { WorkCompletions } from "../../../ffi/ibverbs/ops.ts";
import {
  type DeviceMemory,
  gpuDirectStatus,
  GpuDirectUnavailableError,
  rdmaDevices,
  registerMemory,
} from "../../../ffi/ibverbs/register.ts";
import {
  EMPTY_DEVICE_LIST,
  formatGid,
  listDevices,
  openDevice,
  type QueuePair,
  RC_TRANSITION_MASKS,
  type VerbsContext,
} from "../../../ffi/ibverbs/verbs.ts";
import { Struct } from "../../../ffi/_struct.ts";
import { gatedTest } from "../../_util/skip.ts";
import { loadLoopback } from "./_loopback.ts";

const loopback = await loadLoopback();
const gate = { missing: loopback.missing };
const knobs = (): NonNullable<typeof loopback.knobs> => loopback.knobs as NonNullable<typeof loopback.knobs>;

gatedTest("listDevices() lists the devices with their GUIDs (loopback test double)", gate, () => {
  const devices = listDevices();
  assert.equal(devices.length, 8);
  assert.deepEqual(devices[1], {
    name: "loop1",
    guid: "0002:c903:00a1:b201",
    nodeType: 1,
    transportType: 0,
    ibdevPath: "/sys/class/infiniband/loop1",
  });
});

gatedTest("openDevice() tells an empty device list from a NULL one (loopback test double)", gate, () => {
  try {
    knobs().loopback_set_device_count(0);
    assert.deepEqual(listDevices(), []);
    assert.throws(
      () => openDevice(),
      (e: unknown) => e instanceof NoRdmaDeviceError && e.message === EMPTY_DEVICE_LIST,
    );
    knobs().loopback_set_device_count(8);
    knobs().loopback_fail_device_list(13); // EACCES
    assert.throws(() => openDevice(), (e: unknown) => {
      assert.ok(e instanceof NoRdmaDeviceError);
      assert.equal(e.errno, 13);
      assert.equal(
        e.message,
        "No RDMA devices: ibv_get_device_list failed with EACCES (no permission to open /dev/infiniband/uverbs*)",
      );
      return true;
    });
    knobs().loopback_fail_device_list(12);
    assert.throws(
      () => listDevices(),
      /^NoRdmaDeviceError: No RDMA devices: ibv_get_device_list failed with ENOMEM \(Cannot allocate memory\)$/,
    );
    knobs().loopback_fail_device_list(0);
    assert.throws(
      () => openDevice("mlx5_9"),
      /^NoRdmaDeviceError: No RDMA device named mlx5_9: found loop0, loop1, /,
    );
  } finally {
    knobs().loopback_reset();
  }
});

gatedTest(
  "VerbsContext queries the device, both kinds of port query and the GID (loopback test double)",
  gate,
  () => {
    for (const extended of [true, false]) {
      knobs().loopback_set_extended(extended ? 1 : 0);
      try {
        using context = openDevice("loop2");
        const device = context.queryDevice();
        assert.equal(device.firmware, "loopback-1.0");
        assert.deepEqual([device.vendorId, device.physPortCount, device.maxQpWr, device.maxSge], [
          0x02c9,
          1,
          16384,
          4,
        ]);
        assert.equal(device.maxMrSize, 1n << 40n);
        const port = context.queryPort(1);
        assert.equal(port.extended, extended);
        assert.deepEqual(
          [port.state, port.activeMtu, port.lid, port.linkLayer, port.gidTableLength, port.physState],
          [IBV_PORT_STATE.ACTIVE, IBV_MTU.MTU_4096, 3, IBV_LINK_LAYER.INFINIBAND, 4, 5],
        );
        // Only the full query fills the fields after the 48-byte compatibility prefix.
        assert.equal(port.portCapFlags2, extended ? 0x10 : undefined);
        assert.equal(formatGid(context.queryGid(1, 0)), "fe80:0000:0000:0000:0000:0000:0000:0003");
        assert.throws(
          () => context.queryPort(2),
          /^IbverbsError: (query_port\(port 2\)|ibv_query_port\(loop2, 2\)) failed with EINVAL/,
        );
        assert.throws(
          () => context.queryGid(1, 9),
          /^IbverbsError: ibv_query_gid\(loop2, port 1, index 9\) failed with EINVAL/,
        );
      } finally {
        knobs().loopback_reset();
      }
    }
  },
);

/** Two RC queue pairs on two devices, connected to each other, with a ring each. */
function connectedPairs(): {
  contexts: VerbsContext[];
  qps: QueuePair[];
  rings: Uint8Array[];
  dispose: () => void;
  cq: ReturnType<VerbsContext["createCq"]>[];
  regions: ReturnType<ReturnType<VerbsContext["allocPd"]>["registerHost"]>[];
} {
  const contexts = [openDevice("loop0"), openDevice("loop1")];
  const pds = contexts.map((c) => c.allocPd());
  const cqs = contexts.map((c) => c.createCq(32));
  const rings = [new Uint8Array(4096), new Uint8Array(4096)];
  const regions = pds.map((pd, i) =>
    pd.registerHost(rings[i], IBV_ACCESS.LOCAL_WRITE | IBV_ACCESS.REMOTE_WRITE)
  );
  const qps = pds.map((pd, i) => pd.createQp({ sendCq: cqs[i], maxSendWr: 8, maxRecvWr: 8 }));
  const psns = [0x123, 0xabcdef];
  qps.forEach((qp) => qp.toInit({ port: 1 }));
  qps.forEach((qp, i) => {
    const other = 1 - i;
    qp.toRtr({ qpn: qps[other].qpNum, psn: psns[other], lid: other + 1 }, { port: 1, mtu: IBV_MTU.MTU_4096 });
  });
  qps.forEach((qp, i) => qp.toRts({ psn: psns[i] }));
  return {
    contexts,
    qps,
    rings,
    cq: cqs,
    regions,
    dispose(): void {
      for (const qp of qps) qp.close();
      for (const r of regions) r.close();
      for (const cq of cqs) cq.close();
      for (const pd of pds) pd.close();
      for (const c of contexts) c.close();
    },
  };
}

gatedTest(
  "QueuePair goes RESET → INIT → RTR → RTS with the spec's attribute masks (loopback test double)",
  gate,
  () => {
    const before = Number(knobs().loopback_modify_calls());
    const p = connectedPairs();
    try {
      assert.equal(Number(knobs().loopback_modify_calls()) - before, 6);
      assert.deepEqual(p.qps.map((qp) => qp.state()), [IBV_QPS.RTS, IBV_QPS.RTS]);
      assert.equal(p.qps[0].capabilities.maxSendWr, 8);
      // A mask without MIN_RNR_TIMER is refused for INIT → RTR, as a kernel refuses it.
      using context = openDevice("loop3");
      using pd = context.allocPd();
      using cq = context.createCq(4);
      using qp = pd.createQp({ sendCq: cq, maxSendWr: 1, maxRecvWr: 1 });
      qp.toInit({ port: 1 });
      const attr = new Struct(IBV_QP_ATTR).set("qp_state", IBV_QPS.RTR).set("path_mtu", IBV_MTU.MTU_1024)
        .set("dest_qp_num", p.qps[0].qpNum).set("ah_attr.dlid", 1).set("ah_attr.port_num", 1);
      const mask = RC_TRANSITION_MASKS.rtr & ~IBV_QP_ATTR_MASK.MIN_RNR_TIMER;
      assert.throws(() => qp.modify(attr.bytes, mask), (e: unknown) => {
        assert.ok(e instanceof IbverbsError);
        assert.equal(
          e.message,
          `ibv_modify_qp(qp ${qp.qpNum} to RTR, mask 0x${
            mask.toString(16)
          }) failed with EINVAL (Invalid argument)`,
        );
        return true;
      });
      assert.equal(qp.state(), IBV_QPS.INIT);
      qp.toError();
      assert.equal(qp.state(), IBV_QPS.ERR);
    } finally {
      p.dispose();
    }
  },
);

gatedTest(
  "RDMA WRITE WITH IMM lands in the peer's region and completes on both sides (loopback test double)",
  gate,
  () => {
    const p = connectedPairs();
    try {
      using otherPd = p.contexts[0].allocPd();
      using sourceMr = otherPd.registerHost(new Uint8Array(4096)); // another domain: refused below
      const [a, b] = p.qps;
      b.postRecv([{ wrId: 77n }]);
      // The local region must be in the queue pair's domain: this one is not.
      a.postSend([{
        wrId: 1n,
        opcode: IBV_WR.RDMA_WRITE_WITH_IMM,
        flags: IBV_SEND.SIGNALED,
        sgList: [{ address: sourceMr.address + 100n, length: 5, lkey: sourceMr.lkey }],
        remoteAddress: p.regions[1].address + 10n,
        rkey: p.regions[1].rkey,
        immData: 0xdead_beef,
      }]);
      const wcs = new WorkCompletions(4);
      assert.equal(p.cq[0].poll(wcs), 1);
      assert.equal(wcs.at(0).status, IBV_WC_STATUS.LOC_PROT_ERR);
    } finally {
      p.dispose();
    }
    const q = connectedPairs();
    try {
      const [a, b] = q.qps;
      q.rings[0].set([9, 8, 7, 6], 0);
      b.postRecv([{ wrId: 77n }]);
      a.postSend([{
        wrId: 1n,
        opcode: IBV_WR.RDMA_WRITE_WITH_IMM,
        flags: IBV_SEND.SIGNALED,
        sgList: [{ address: q.regions[0].address, length: 4, lkey: q.regions[0].lkey }],
        remoteAddress: q.regions[1].address + 10n,
        rkey: q.regions[1].rkey,
        immData: 0xdead_beef,
      }]);
      assert.deepEqual([...q.rings[1].subarray(10, 14)], [9, 8, 7, 6]);
      const wcs = new WorkCompletions(4);
      assert.equal(q.cq[0].poll(wcs), 1);
      assert.deepEqual([wcs.wrId(0), wcs.status(0), wcs.at(0).opcode], [
        1n,
        IBV_WC_STATUS.SUCCESS,
        IBV_WC_OPCODE.RDMA_WRITE,
      ]);
      assert.equal(q.cq[1].poll(wcs), 1);
      const received = wcs.at(0);
      assert.deepEqual(
        [
          received.wrId,
          received.status,
          received.opcode,
          received.byteLen,
          received.immData,
          received.wcFlags,
        ],
        [77n, IBV_WC_STATUS.SUCCESS, IBV_WC_OPCODE.RECV_RDMA_WITH_IMM, 4, 0xdead_beef, IBV_WC_FLAGS.WITH_IMM],
      );
      assert.equal(received.qpNum, b.qpNum);
      // A wrong rkey: remote access error, and both queue pairs go to ERR.
      a.postSend([{
        wrId: 2n,
        opcode: IBV_WR.RDMA_WRITE,
        flags: IBV_SEND.SIGNALED,
        sgList: [{ address: q.regions[0].address, length: 4, lkey: q.regions[0].lkey }],
        remoteAddress: q.regions[1].address,
        rkey: q.regions[1].rkey + 1000,
      }]);
      assert.equal(q.cq[0].poll(wcs), 1);
      assert.equal(wcs.status(0), IBV_WC_STATUS.REM_ACCESS_ERR);
      assert.deepEqual(q.qps.map((qp) => qp.state()), [IBV_QPS.ERR, IBV_QPS.ERR]);
    } finally {
      q.dispose();
    }
  },
);

gatedTest(
  "CompletionChannel raises one event per arming and names its queue (loopback test double)",
  gate,
  async () => {
    using context = openDevice("loop0");
    using channel = context.createCompletionChannel();
    using pd = context.allocPd();
    const cq = context.createCq(8, { channel });
    const other = context.createCq(8);
    const ring = new Uint8Array(64);
    const mr = pd.registerHost(ring, IBV_ACCESS.LOCAL_WRITE | IBV_ACCESS.REMOTE_WRITE);
    const qp = pd.createQp({ sendCq: cq, recvCq: other, maxSendWr: 4, maxRecvWr: 4 });
    try {
      // Connected to itself: a loopback queue pair.
      qp.toInit({ port: 1 });
      qp.toRtr({ qpn: qp.qpNum, psn: 5, lid: 1 }, { port: 1, mtu: IBV_MTU.MTU_1024 });
      qp.toRts({ psn: 5 });
      assert.equal(await channel.wait(0), false);
      cq.requestNotify();
      qp.postSend([{
        wrId: 3n,
        opcode: IBV_WR.RDMA_WRITE,
        flags: IBV_SEND.SIGNALED,
        remoteAddress: mr.address,
        rkey: mr.rkey,
      }]);
      assert.equal(await channel.wait(1000), true);
      assert.equal(channel.takeEvent(), cq);
      assert.equal(await channel.wait(0), false, "one event per arming");
      const wcs = new WorkCompletions(2);
      assert.equal(cq.poll(wcs), 1);
      assert.equal(wcs.wrId(0), 3n);
    } finally {
      qp.close();
      mr.close();
      other.close();
      cq.close();
    }
  },
);

gatedTest(
  "registerMemory() registers host memory in a domain of its own and frees it (loopback test double)",
  gate,
  () => {
    const before = knobs().loopback_live_mrs();
    const bytes = new Float64Array(1000);
    {
      using region = registerMemory(bytes.subarray(10), { access: ["remote-write"], device: "loop4" });
      assert.equal(region.path, "host");
      assert.equal(region.length, 990 * 8);
      assert.equal(region.address, Deno.UnsafePointer.value(Deno.UnsafePointer.of(bytes)) + 80n);
      assert.notEqual(region.lkey, region.rkey);
      assert.equal(knobs().loopback_live_mrs(), before + 1);
    }
    assert.equal(knobs().loopback_live_mrs(), before);
    // In a given domain, it leaves the domain open.
    using context = openDevice("loop4");
    using pd = context.allocPd();
    const region = registerMemory(new Uint8Array(64), { pd });
    region[Symbol.dispose]();
    assert.equal(knobs().loopback_live_mrs(), before);
  },
);

gatedTest(
  "GPU memory: the kernel dma-buf probe and the error listing what is missing (loopback test double)",
  gate,
  () => {
    const gpu: DeviceMemory = {
      pointer: Deno.UnsafePointer.create(0x7f00_0000_1000n),
      byteLength: 1 << 20,
      device: 0,
    };
    try {
      for (
        const [errno, kernel] of [[95, "unsupported"], [93, "unsupported"], [9, "supported"], [
          22,
          "unknown",
        ]] as const
      ) {
        knobs().loopback_set_dmabuf_errno(errno);
        const status = gpuDirectStatus();
        assert.equal(status.dmaBuf.kernel, kernel, `errno ${errno}`);
        assert.equal(status.rdmaDevice, "loop0");
        assert.match(
          status.dmaBuf.kernelDetail,
          new RegExp(`^ibv_reg_dmabuf_mr\\(pd, 0, 0, 0, -1, 0\\) on loop0 failed with errno ${errno}`),
        );
      }
      knobs().loopback_set_dmabuf_errno(95);
      assert.throws(() => registerMemory(gpu, { device: "loop0" }), (e: unknown) => {
        assert.ok(e instanceof GpuDirectUnavailableError);
        assert.equal(e.code, "GPUDIRECT_UNAVAILABLE");
        assert.match(
          e.message,
          /^Cannot register 1048576 bytes \(1\.0 MiB\) of GPU memory \(CUDA device 0\): GPUDirect RDMA is not available here:\n {2}- /,
        );
        assert.ok(e.missing.some((m) =>
          m.startsWith(
            "dma-buf: the kernel's RDMA stack does not take dma-bufs (ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) on loop0 failed with errno 95",
          )
        ));
        assert.ok(e.missing.some((m) => m.startsWith("peer-memory: no peer-memory module is loaded")));
        return true;
      });
    } finally {
      knobs().loopback_reset();
    }
  },
);

gatedTest("rdmaDevices() summarises every device and port (loopback test double)", gate, () => {
  const summary = rdmaDevices();
  assert.equal(summary.library, loopback.path);
  assert.equal(summary.problem, undefined);
  assert.equal(summary.devices.length, 8);
  assert.deepEqual(summary.devices[0].ports, [{
    port: 1,
    state: "ACTIVE",
    linkLayer: "InfiniBand",
    lid: 1,
    mtu: 4096,
    gid0: "fe80:0000:0000:0000:0000:0000:0000:0001",
  }]);
  assert.equal(summary.devices[0].firmware, "loopback-1.0");
  knobs().loopback_set_device_count(0);
  try {
    assert.equal(rdmaDevices().problem, EMPTY_DEVICE_LIST);
  } finally {
    knobs().loopback_reset();
  }
});
