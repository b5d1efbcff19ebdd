/**
 * The data path of the binding (ops.ts) against a test double of a provider (_fake_provider.c): the
 * double fills a fake context's function table through the installed verbs.h and records what each
 * function receives, so these tests prove from Deno that the binding dispatches through the right table
 * slots and builds the structs the header describes.
 */
import assert from "node:assert/strict";
import { IbverbsError } from "../../../ffi/ibverbs/ibverbs.ts";
import {
  IBV_LINK_LAYER,
  IBV_MTU,
  IBV_PORT_ATTR,
  IBV_PORT_STATE,
  IBV_SEND,
  IBV_WC_FLAGS,
  IBV_WC_OPCODE,
  IBV_WC_STATUS,
  IBV_WR,
} from "../../../ffi/ibverbs/layout.ts";
import {
  contextOps,
  forgetContextOps,
  pollCq,
  postRecv,
  postSend,
  queryPortExtended,
  reqNotifyCq,
  WorkCompletions,
} from "../../../ffi/ibverbs/ops.ts";
import { CompletionQueue, QueuePair, VerbsContext } from "../../../ffi/ibverbs/verbs.ts";
import { gatedTest } from "../../_util/skip.ts";
import { type Built, compile, compilerMissing } from "./_cc.ts";

const FAKE_SOURCE = new URL("./_fake_provider.c", import.meta.url).pathname;

const FAKE_SYMBOLS = {
  fake_context: { parameters: ["i32", "u64"], result: "pointer" },
  fake_cq: { parameters: [], result: "pointer" },
  fake_qp: { parameters: [], result: "pointer" },
  fake_sends: { parameters: [], result: "pointer" },
  fake_recvs: { parameters: [], result: "pointer" },
  fake_send_count: { parameters: [], result: "i32" },
  fake_recv_count: { parameters: [], result: "i32" },
  fake_fail_posts: { parameters: ["i32", "i32"], result: "void" },
  fake_queue_wc: { parameters: ["u64", "i32", "i32", "u32", "u32", "u32", "i32", "u32"], result: "void" },
  fake_poll_returns: { parameters: ["i32"], result: "void" },
  fake_poll_calls: { parameters: [], result: "i32" },
  fake_poll_last_num_entries: { parameters: [], result: "i32" },
  fake_poll_last_cq: { parameters: [], result: "u64" },
  fake_notify_calls: { parameters: [], result: "i32" },
  fake_notify_last_solicited: { parameters: [], result: "i32" },
  fake_notify_last_cq: { parameters: [], result: "u64" },
  fake_query_port_len: { parameters: [], result: "u64" },
  fake_query_port_num: { parameters: [], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

type Fake = Deno.DynamicLibrary<typeof FAKE_SYMBOLS>["symbols"];

// Indexes of a recorded request in _fake_provider.c (enum R_*), RECORD_WORDS apart.
const RECORD_WORDS = 20;
const R = {
  wrId: 0,
  opcode: 1,
  sendFlags: 2,
  numSge: 3,
  immHost: 4,
  remoteAddr: 5,
  rkey: 6,
  sge0Addr: 7,
  sge0Length: 8,
  sge0Lkey: 9,
  sge1Addr: 10,
  sge1Length: 11,
  sge1Lkey: 12,
  sge0FirstBytes: 13,
  qpNum: 14,
  nextIsNull: 15,
  immRaw: 16,
} as const;

function record(pointer: Deno.PointerValue, index: number): Record<keyof typeof R, bigint> {
  const view = new Deno.UnsafePointerView(pointer as Deno.PointerObject);
  const out = {} as Record<keyof typeof R, bigint>;
  for (const [name, word] of Object.entries(R) as [keyof typeof R, number][]) {
    out[name] = view.getBigUint64((index * RECORD_WORDS + word) * 8);
  }
  return out;
}

function address(view: ArrayBufferView): bigint {
  return Deno.UnsafePointer.value(Deno.UnsafePointer.of(view));
}

let built: Promise<Built> | undefined;

/** Builds the double (once per module), opens it, gives a fresh fake context, and cleans up. */
async function withFake(
  extended: boolean,
  body: (fake: Fake, context: Deno.PointerObject) => void | Promise<void>,
  szOverride = 0n,
): Promise<void> {
  built ??= compile(FAKE_SOURCE, { shared: true }).then((b) => {
    globalThis.addEventListener("unload", () => {
      try {
        Deno.removeSync(b.path.replace(/\/[^/]+$/, ""), { recursive: true });
      } catch {
        // Already gone.
      }
    });
    return b;
  });
  const lib = Deno.dlopen((await built).path, FAKE_SYMBOLS);
  const context = lib.symbols.fake_context(extended ? 1 : 0, szOverride) as Deno.PointerObject;
  try {
    await body(lib.symbols, context);
  } finally {
    forgetContextOps(context);
    lib.close();
  }
}

const gate = { missing: compilerMissing() };

gatedTest(
  "postSend() builds the ibv_send_wr chain verbs.h describes, through ops.post_send",
  gate,
  async () => {
    await withFake(true, (fake) => {
      const qp = fake.fake_qp() as Deno.PointerObject;
      const data = new BigUint64Array([0x1122334455667788n, 0n]);
      const second = new Uint8Array(64);
      postSend(qp, [
        {
          wrId: 0xfeedfacecafebeefn,
          opcode: IBV_WR.RDMA_WRITE_WITH_IMM,
          flags: IBV_SEND.SIGNALED | IBV_SEND.SOLICITED,
          sgList: [
            { address: address(data), length: 16, lkey: 0xabcdef01 },
            { address: address(second), length: 64, lkey: 7 },
          ],
          remoteAddress: 0x7fff_0000_1000n,
          rkey: 0x5566_7788,
          immData: 0x8000_0003,
        },
        { wrId: 2n, opcode: IBV_WR.SEND },
      ]);
      assert.equal(fake.fake_send_count(), 2);
      const first = record(fake.fake_sends(), 0);
      assert.deepEqual(first, {
        wrId: 0xfeedfacecafebeefn,
        opcode: BigInt(IBV_WR.RDMA_WRITE_WITH_IMM),
        sendFlags: BigInt(IBV_SEND.SIGNALED | IBV_SEND.SOLICITED),
        numSge: 2n,
        immHost: 0x8000_0003n, // ntohl of what arrived: the binding wrote network byte order
        remoteAddr: 0x7fff_0000_1000n,
        rkey: 0x5566_7788n,
        sge0Addr: address(data),
        sge0Length: 16n,
        sge0Lkey: 0xabcdef01n,
        sge1Addr: address(second),
        sge1Length: 64n,
        sge1Lkey: 7n,
        sge0FirstBytes: 0x1122334455667788n, // the provider read real memory at sg_list[0].addr
        qpNum: 0x123456n,
        nextIsNull: 0n,
        immRaw: 0x0300_0080n, // the raw __be32 seen as a little-endian u32
      });
      const last = record(fake.fake_sends(), 1);
      assert.equal(last.wrId, 2n);
      assert.equal(last.opcode, BigInt(IBV_WR.SEND));
      assert.equal(last.numSge, 0n);
      assert.equal(last.nextIsNull, 1n);
    });
  },
);

gatedTest("postRecv() builds ibv_recv_wr requests, through ops.post_recv", gate, async () => {
  await withFake(true, (fake) => {
    const qp = new QueuePair(fake.fake_qp() as Deno.PointerObject, {
      maxSendWr: 1,
      maxRecvWr: 4,
      maxInlineData: 0,
    });
    assert.equal(qp.qpNum, 0x123456);
    const slot = new BigUint64Array([42n]);
    qp.postRecv([
      { wrId: 10n, sgList: [{ address: address(slot), length: 8, lkey: 99 }] },
      { wrId: 11n },
      { wrId: 12n },
    ]);
    assert.equal(fake.fake_recv_count(), 3);
    const [a, b, c] = [0, 1, 2].map((i) => record(fake.fake_recvs(), i));
    assert.equal(a.wrId, 10n);
    assert.equal(a.numSge, 1n);
    assert.equal(a.sge0Addr, address(slot));
    assert.equal(a.sge0Length, 8n);
    assert.equal(a.sge0Lkey, 99n);
    assert.equal(a.sge0FirstBytes, 42n);
    assert.equal(a.nextIsNull, 0n);
    assert.deepEqual([b.wrId, b.numSge, b.nextIsNull], [11n, 0n, 0n]);
    assert.deepEqual([c.wrId, c.nextIsNull], [12n, 1n]);
  });
});

gatedTest("postSend()/postRecv() name the refused request and errno from bad_wr", gate, async () => {
  await withFake(true, (fake) => {
    const qp = fake.fake_qp() as Deno.PointerObject;
    fake.fake_fail_posts(12, 1); // ENOMEM at the second request
    assert.throws(
      () => postSend(qp, [{ wrId: 1n, opcode: IBV_WR.SEND }, { wrId: 2n, opcode: IBV_WR.SEND }]),
      (e: unknown) => {
        assert.ok(e instanceof IbverbsError);
        assert.equal(e.errno, 12);
        assert.match(
          e.message,
          /^ibv_post_send\(request 1 of 2\) failed with ENOMEM \(Cannot allocate memory\)$/,
        );
        return true;
      },
    );
    assert.equal(fake.fake_send_count(), 1, "the first request was taken");
    fake.fake_fail_posts(22, 0);
    assert.throws(
      () => postRecv(qp, [{ wrId: 1n }]),
      /^IbverbsError: ibv_post_recv\(request 0 of 1\) failed with EINVAL/,
    );
  });
});

gatedTest("pollCq() reads the ibv_wc entries the provider writes, through ops.poll_cq", gate, async () => {
  await withFake(true, (fake) => {
    const cqPointer = fake.fake_cq() as Deno.PointerObject;
    const cq = new CompletionQueue(cqPointer);
    assert.equal(cq.capacity, 255);
    const wcs = new WorkCompletions(4);
    assert.equal(cq.poll(wcs), 0);
    fake.fake_queue_wc(
      0xabcn,
      IBV_WC_STATUS.SUCCESS,
      IBV_WC_OPCODE.RECV_RDMA_WITH_IMM,
      65536,
      0xc000_0001,
      77,
      IBV_WC_FLAGS.WITH_IMM,
      0,
    );
    fake.fake_queue_wc(5n, IBV_WC_STATUS.RETRY_EXC_ERR, IBV_WC_OPCODE.RDMA_WRITE, 0, 0, 78, 0, 0x81);
    fake.fake_queue_wc(6n, IBV_WC_STATUS.SUCCESS, IBV_WC_OPCODE.SEND, 0, 0, 79, 0, 0);
    assert.equal(pollCq(cqPointer, wcs, 2), 2);
    assert.equal(fake.fake_poll_last_num_entries(), 2);
    assert.equal(fake.fake_poll_last_cq(), Deno.UnsafePointer.value(cqPointer));
    assert.deepEqual(wcs.at(0), {
      wrId: 0xabcn,
      status: IBV_WC_STATUS.SUCCESS,
      opcode: IBV_WC_OPCODE.RECV_RDMA_WITH_IMM,
      vendorErr: 0,
      byteLen: 65536,
      immData: 0xc000_0001,
      qpNum: 77,
      wcFlags: IBV_WC_FLAGS.WITH_IMM,
    });
    assert.deepEqual(
      [wcs.wrId(1), wcs.status(1), wcs.at(1).opcode, wcs.at(1).qpNum, wcs.at(1).vendorErr],
      [5n, IBV_WC_STATUS.RETRY_EXC_ERR, IBV_WC_OPCODE.RDMA_WRITE, 78, 0x81],
    );
    assert.equal(cq.poll(wcs), 1);
    assert.equal(wcs.wrId(0), 6n);
    assert.throws(() => wcs.at(4), RangeError);
    fake.fake_poll_returns(-2);
    assert.throws(() => cq.poll(wcs), /ibv_poll_cq\(4 entries\) failed \(the provider returned -2\)/);
  });
});

gatedTest("reqNotifyCq() arms through ops.req_notify_cq with solicited_only", gate, async () => {
  await withFake(true, (fake) => {
    const cqPointer = fake.fake_cq() as Deno.PointerObject;
    reqNotifyCq(cqPointer);
    assert.deepEqual([fake.fake_notify_calls(), fake.fake_notify_last_solicited()], [1, 0]);
    new CompletionQueue(cqPointer).requestNotify(true);
    assert.deepEqual([fake.fake_notify_calls(), fake.fake_notify_last_solicited()], [2, 1]);
    assert.equal(fake.fake_notify_last_cq(), Deno.UnsafePointer.value(cqPointer));
  });
});

gatedTest(
  "queryPort() uses the extended context's full query_port with sizeof(ibv_port_attr)",
  gate,
  async () => {
    await withFake(true, (fake, context) => {
      assert.ok(contextOps(context).queryPort !== undefined);
      const device = { name: "fake0", guid: "", nodeType: 1, transportType: 0, ibdevPath: "" };
      const verbs = new VerbsContext(context, device);
      assert.equal(verbs.numCompVectors, 4);
      const port = verbs.queryPort(1);
      assert.equal(fake.fake_query_port_num(), 1);
      assert.equal(fake.fake_query_port_len(), BigInt(IBV_PORT_ATTR.size));
      assert.deepEqual(port, {
        state: IBV_PORT_STATE.ACTIVE,
        maxMtu: IBV_MTU.MTU_4096,
        activeMtu: IBV_MTU.MTU_2048,
        gidTableLength: 128,
        portCapFlags: 0x2651e848,
        maxMessageBytes: 0x40000000,
        lid: 0x1a2b,
        smLid: 0x0102,
        lmc: 3,
        activeWidth: 2,
        activeSpeed: 32,
        physState: 5,
        linkLayer: IBV_LINK_LAYER.INFINIBAND,
        portCapFlags2: 0x0213,
        extended: true,
      });
      assert.throws(() => verbs.queryPort(2), /^IbverbsError: query_port\(port 2\) failed with EINVAL/);
      // Not closed: the fake context is not libibverbs'.
    });
  },
);

gatedTest("queryPortExtended() declines a plain context and a too-small verbs_context", gate, async () => {
  await withFake(false, (_fake, context) => {
    assert.equal(contextOps(context).queryPort, undefined);
    assert.equal(queryPortExtended(context, 1, new Uint8Array(IBV_PORT_ATTR.size)), false);
  });
  await withFake(true, (_fake, context) => {
    assert.equal(contextOps(context).queryPort, undefined);
  }, 100n);
});
