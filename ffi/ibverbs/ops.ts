/**
 * The data path of libibverbs. `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq`
 * are static inline functions of verbs.h, not exported symbols: each reads its object's context
 * (`qp->context`, `cq->context`) and calls the provider's function from the context's table
 * (`context->ops.post_send`, ...). This module does the same through `Deno.UnsafeFnPointer`, at the
 * offsets of `layout.ts`, and also the full `query_port` of the extended context (`verbs_context`), which
 * the header's `ibv_query_port` macro prefers over the exported compatibility symbol.
 *
 * Work requests are built in one ArrayBuffer per call (requests, then their scatter/gather lists, linked
 * by absolute addresses); the provider copies them into its queue before returning, so the buffer need
 * not outlive the call. The memory the scatter/gather elements point to must stay registered and alive
 * until the completion: that is the caller's (see `MemoryRegion`).
 *
 * @module
 */
import { UnsupportedError } from "../../core/errors.ts";
import { errnoOf, IbverbsError } from "./ibverbs.ts";
import {
  IBV_CONTEXT,
  IBV_CQ,
  IBV_PORT_ATTR,
  IBV_QP,
  IBV_RECV_WR,
  IBV_SEND_WR,
  IBV_SGE,
  IBV_WC,
  VERBS_CONTEXT,
} from "./layout.ts";
import { readPointer, readU64 } from "../_struct.ts";

/** The provider's `poll_cq`, as `UnsafeFnPointer` calls it. */
export const POLL_CQ = {
  // int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
  parameters: ["pointer", "i32", "buffer"],
  result: "i32",
} as const satisfies Deno.ForeignFunction;

/** The provider's `req_notify_cq`. */
export const REQ_NOTIFY_CQ = {
  // int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
  parameters: ["pointer", "i32"],
  result: "i32",
} as const satisfies Deno.ForeignFunction;

/** The provider's `post_send` and `post_recv`. */
export const POST_WR = {
  // int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
  // int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
  parameters: ["pointer", "buffer", "buffer"],
  result: "i32",
} as const satisfies Deno.ForeignFunction;

/** The extended context's `query_port`. */
export const QUERY_PORT = {
  // int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr,
  //                   size_t port_attr_len);
  parameters: ["pointer", "u8", "buffer", "usize"],
  result: "i32",
} as const satisfies Deno.ForeignFunction;

/** `abi_compat` of an extended context (`__VERBS_ABI_IS_EXTENDED`, `(void *)UINTPTR_MAX`). */
const ABI_IS_EXTENDED = 0xffff_ffff_ffff_ffffn;

/** The provider's data-path functions of one context. */
export interface ContextOps {
  /** `ops.poll_cq`. */
  readonly pollCq: Deno.UnsafeFnPointer<typeof POLL_CQ>;
  /** `ops.req_notify_cq`. */
  readonly reqNotifyCq: Deno.UnsafeFnPointer<typeof REQ_NOTIFY_CQ>;
  /** `ops.post_send`. */
  readonly postSend: Deno.UnsafeFnPointer<typeof POST_WR>;
  /** `ops.post_recv`. */
  readonly postRecv: Deno.UnsafeFnPointer<typeof POST_WR>;
  /** `verbs_context.query_port`, when the context is extended and large enough to have it. */
  readonly queryPort: Deno.UnsafeFnPointer<typeof QUERY_PORT> | undefined;
}

const cache = new Map<bigint, ContextOps>();

function fn<D extends Deno.ForeignFunction>(
  context: Deno.PointerObject,
  offset: number,
  name: string,
  definition: D,
): Deno.UnsafeFnPointer<D> {
  const pointer = readPointer(context, offset);
  if (pointer === null) {
    throw new UnsupportedError(`Cannot use ${name}: the RDMA provider's context has no ${name} function`);
  }
  return new Deno.UnsafeFnPointer(pointer as Deno.PointerObject<NoInfer<Omit<D, "nonblocking">>>, definition);
}

/**
 * The data-path functions of a context, read from its function table once and cached by address.
 *
 * @param context An open `struct ibv_context *`.
 * @returns The functions.
 * @throws {UnsupportedError} If the provider left one of them NULL.
 */
export function contextOps(context: Deno.PointerObject): ContextOps {
  const key = Deno.UnsafePointer.value(context);
  const cached = cache.get(key);
  if (cached !== undefined) return cached;
  const f = IBV_CONTEXT.fields;
  const ops: ContextOps = {
    pollCq: fn(context, f["ops.poll_cq"].offset, "poll_cq", POLL_CQ),
    reqNotifyCq: fn(context, f["ops.req_notify_cq"].offset, "req_notify_cq", REQ_NOTIFY_CQ),
    postSend: fn(context, f["ops.post_send"].offset, "post_send", POST_WR),
    postRecv: fn(context, f["ops.post_recv"].offset, "post_recv", POST_WR),
    queryPort: extendedQueryPort(context),
  };
  cache.set(key, ops);
  return ops;
}

/**
 * Forgets the cached functions of a context (when it closes: another may later open at its address).
 *
 * @param context The context.
 */
export function forgetContextOps(context: Deno.PointerObject): void {
  cache.delete(Deno.UnsafePointer.value(context));
}

/** `verbs_context.query_port`, with the checks of the header's `verbs_get_ctx_op(ctx, query_port)`. */
function extendedQueryPort(context: Deno.PointerObject): Deno.UnsafeFnPointer<typeof QUERY_PORT> | undefined {
  if (readU64(context, IBV_CONTEXT.fields.abi_compat.offset) !== ABI_IS_EXTENDED) return undefined;
  const v = VERBS_CONTEXT.fields;
  const base = v.context.offset;
  // The extended context must be big enough to hold the member: sz >= sizeof - offsetof(query_port).
  const size = readU64(context, v.sz.offset - base);
  if (size < BigInt(VERBS_CONTEXT.size - v.query_port.offset)) return undefined;
  const pointer = readPointer(context, v.query_port.offset - base);
  return pointer === null
    ? undefined
    : new Deno.UnsafeFnPointer(pointer as Deno.PointerObject<typeof QUERY_PORT>, QUERY_PORT);
}

function contextOf(object: Deno.PointerObject, contextOffset: number): Deno.PointerObject {
  const context = readPointer(object, contextOffset);
  if (context === null) throw new TypeError("Expected a verbs object with a context, found a NULL context");
  return context;
}

/**
 * Queries a port through the extended context's full `query_port` (every field of `ibv_port_attr`),
 * when the context has it.
 *
 * @param context An open `struct ibv_context *`.
 * @param port The port number (from 1).
 * @param attr Where the attributes go: `IBV_PORT_ATTR.size` bytes.
 * @returns `true` if the full query ran, `false` if the context has no extended `query_port` (use the
 * exported compatibility `ibv_query_port`).
 * @throws {IbverbsError} If the query fails.
 */
export function queryPortExtended(context: Deno.PointerObject, port: number, attr: Uint8Array): boolean {
  const queryPort = contextOps(context).queryPort;
  if (queryPort === undefined) return false;
  if (attr.length !== IBV_PORT_ATTR.size) {
    throw new RangeError(`Expected ${IBV_PORT_ATTR.size} bytes for ibv_port_attr, found ${attr.length}`);
  }
  const rc = queryPort.call(context, port, attr, BigInt(IBV_PORT_ATTR.size));
  if (rc !== 0) throw new IbverbsError(`query_port(port ${port})`, errnoOf(rc));
  return true;
}

/** One scatter/gather element: registered memory that a work request reads or writes. */
export interface ScatterGather {
  /** The first byte's address. */
  readonly address: bigint;
  /** How many bytes. */
  readonly length: number;
  /** The local key of the memory region holding them. */
  readonly lkey: number;
}

/** One send work request. */
export interface SendRequest {
  /** Returned in the completion. */
  readonly wrId: bigint;
  /** `IBV_WR.*`. */
  readonly opcode: number;
  /** `IBV_SEND.*` bits. @default {0} (unsignaled: no completion unless it fails) */
  readonly flags?: number;
  /** The local memory sent or written from. @default {[]} */
  readonly sgList?: readonly ScatterGather[];
  /** For RDMA opcodes: the remote address. @default {0n} */
  readonly remoteAddress?: bigint;
  /** For RDMA opcodes: the remote key. @default {0} */
  readonly rkey?: number;
  /** For the `_WITH_IMM` opcodes: 32 bits delivered in the receiver's completion (host order). @default {0} */
  readonly immData?: number;
}

/** One receive work request. */
export interface RecvRequest {
  /** Returned in the completion. */
  readonly wrId: bigint;
  /** Where a SEND's bytes land. @default {[]} */
  readonly sgList?: readonly ScatterGather[];
}

function writeSges(
  view: DataView,
  at: number,
  sges: readonly ScatterGather[],
): void {
  const f = IBV_SGE.fields;
  sges.forEach((sge, i) => {
    const base = at + i * IBV_SGE.size;
    view.setBigUint64(base + f.addr.offset, sge.address, true);
    view.setUint32(base + f.length.offset, sge.length, true);
    view.setUint32(base + f.lkey.offset, sge.lkey, true);
  });
}

/** Which request a provider refused, from its `bad_wr`. */
function badIndex(bad: BigUint64Array, base: bigint, size: number): number {
  return bad[0] === 0n ? 0 : Number((bad[0] - base) / BigInt(size));
}

/**
 * Posts send work requests on a queue pair, as `ibv_post_send` does: through `qp->context->ops.post_send`.
 *
 * @param qp A `struct ibv_qp *`.
 * @param requests The requests, posted as one linked list in this order.
 * @throws {IbverbsError} If the provider refuses one (e.g. ENOMEM: the send queue is full); the message
 * says which.
 */
export function postSend(qp: Deno.PointerObject, requests: readonly SendRequest[]): void {
  if (requests.length === 0) return;
  const sges = requests.reduce((n, r) => n + (r.sgList?.length ?? 0), 0);
  const buffer = new ArrayBuffer(requests.length * IBV_SEND_WR.size + sges * IBV_SGE.size);
  const view = new DataView(buffer);
  const base = Deno.UnsafePointer.value(Deno.UnsafePointer.of(buffer));
  const f = IBV_SEND_WR.fields;
  let sgeAt = requests.length * IBV_SEND_WR.size;
  requests.forEach((r, i) => {
    const at = i * IBV_SEND_WR.size;
    const list = r.sgList ?? [];
    view.setBigUint64(at + f.wr_id.offset, BigInt.asUintN(64, r.wrId), true);
    const next = i + 1 < requests.length ? base + BigInt(at + IBV_SEND_WR.size) : 0n;
    view.setBigUint64(at + f.next.offset, next, true);
    view.setBigUint64(at + f.sg_list.offset, list.length ? base + BigInt(sgeAt) : 0n, true);
    view.setInt32(at + f.num_sge.offset, list.length, true);
    view.setUint32(at + f.opcode.offset, r.opcode, true);
    view.setUint32(at + f.send_flags.offset, r.flags ?? 0, true);
    // __be32: network byte order.
    view.setUint32(at + f.imm_data.offset, (r.immData ?? 0) >>> 0, false);
    view.setBigUint64(at + f["wr.rdma.remote_addr"].offset, r.remoteAddress ?? 0n, true);
    view.setUint32(at + f["wr.rdma.rkey"].offset, r.rkey ?? 0, true);
    writeSges(view, sgeAt, list);
    sgeAt += list.length * IBV_SGE.size;
  });
  const bad = new BigUint64Array(1);
  const rc = contextOps(contextOf(qp, IBV_QP.fields.context.offset)).postSend.call(qp, buffer, bad);
  if (rc !== 0) {
    const index = badIndex(bad, base, IBV_SEND_WR.size);
    throw new IbverbsError(`ibv_post_send(request ${index} of ${requests.length})`, errnoOf(rc));
  }
}

/**
 * Posts receive work requests on a queue pair, as `ibv_post_recv` does: through
 * `qp->context->ops.post_recv`.
 *
 * @param qp A `struct ibv_qp *`.
 * @param requests The requests, posted as one linked list in this order.
 * @throws {IbverbsError} If the provider refuses one (e.g. ENOMEM: the receive queue is full).
 */
export function postRecv(qp: Deno.PointerObject, requests: readonly RecvRequest[]): void {
  if (requests.length === 0) return;
  const sges = requests.reduce((n, r) => n + (r.sgList?.length ?? 0), 0);
  const buffer = new ArrayBuffer(requests.length * IBV_RECV_WR.size + sges * IBV_SGE.size);
  const view = new DataView(buffer);
  const base = Deno.UnsafePointer.value(Deno.UnsafePointer.of(buffer));
  const f = IBV_RECV_WR.fields;
  let sgeAt = requests.length * IBV_RECV_WR.size;
  requests.forEach((r, i) => {
    const at = i * IBV_RECV_WR.size;
    const list = r.sgList ?? [];
    view.setBigUint64(at + f.wr_id.offset, BigInt.asUintN(64, r.wrId), true);
    const next = i + 1 < requests.length ? base + BigInt(at + IBV_RECV_WR.size) : 0n;
    view.setBigUint64(at + f.next.offset, next, true);
    view.setBigUint64(at + f.sg_list.offset, list.length ? base + BigInt(sgeAt) : 0n, true);
    view.setInt32(at + f.num_sge.offset, list.length, true);
    writeSges(view, sgeAt, list);
    sgeAt += list.length * IBV_SGE.size;
  });
  const bad = new BigUint64Array(1);
  const rc = contextOps(contextOf(qp, IBV_QP.fields.context.offset)).postRecv.call(qp, buffer, bad);
  if (rc !== 0) {
    const index = badIndex(bad, base, IBV_RECV_WR.size);
    throw new IbverbsError(`ibv_post_recv(request ${index} of ${requests.length})`, errnoOf(rc));
  }
}

/** One work completion, as read from `struct ibv_wc`. */
export interface WorkCompletion {
  /** The request's `wrId`. */
  readonly wrId: bigint;
  /** `IBV_WC_STATUS.*`. */
  readonly status: number;
  /** `IBV_WC_OPCODE.*` (undefined by the spec when `status` is not SUCCESS). */
  readonly opcode: number;
  /** The provider's own error code. */
  readonly vendorErr: number;
  /** Bytes received (receives) . */
  readonly byteLen: number;
  /** The immediate data (host order), valid when `wcFlags` has `IBV_WC_FLAGS.WITH_IMM`. */
  readonly immData: number;
  /** The local queue pair's number. */
  readonly qpNum: number;
  /** `IBV_WC_FLAGS.*` bits. */
  readonly wcFlags: number;
}

/** A reusable array of `struct ibv_wc`, filled by {@linkcode pollCq}. */
export class WorkCompletions {
  /** How many completions fit. */
  readonly capacity: number;
  /** The raw entries (`capacity` × `IBV_WC.size` bytes). */
  readonly bytes: Uint8Array<ArrayBuffer>;
  readonly #view: DataView<ArrayBuffer>;

  /**
   * Allocates the array.
   *
   * @param capacity How many completions one poll may return.
   */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`Expected a capacity >= 1, found ${capacity}`);
    }
    this.capacity = capacity;
    this.bytes = new Uint8Array(capacity * IBV_WC.size);
    this.#view = new DataView(this.bytes.buffer);
  }

  /**
   * The `i`-th entry's request id.
   *
   * @param i The entry.
   * @returns `wr_id`.
   */
  wrId(i: number): bigint {
    return this.#view.getBigUint64(i * IBV_WC.size + IBV_WC.fields.wr_id.offset, true);
  }

  /**
   * The `i`-th entry's status.
   *
   * @param i The entry.
   * @returns `status` (`IBV_WC_STATUS.*`).
   */
  status(i: number): number {
    return this.#view.getUint32(i * IBV_WC.size + IBV_WC.fields.status.offset, true);
  }

  /**
   * The `i`-th entry, all fields.
   *
   * @param i The entry.
   * @returns The completion.
   */
  at(i: number): WorkCompletion {
    if (!Number.isInteger(i) || i < 0 || i >= this.capacity) {
      throw new RangeError(`Expected an entry in 0..${this.capacity - 1}, found ${i}`);
    }
    const v = this.#view;
    const base = i * IBV_WC.size;
    const f = IBV_WC.fields;
    return {
      wrId: v.getBigUint64(base + f.wr_id.offset, true),
      status: v.getUint32(base + f.status.offset, true),
      opcode: v.getUint32(base + f.opcode.offset, true),
      vendorErr: v.getUint32(base + f.vendor_err.offset, true),
      byteLen: v.getUint32(base + f.byte_len.offset, true),
      immData: v.getUint32(base + f.imm_data.offset, false),
      qpNum: v.getUint32(base + f.qp_num.offset, true),
      wcFlags: v.getUint32(base + f.wc_flags.offset, true),
    };
  }
}

/**
 * Polls a completion queue, as `ibv_poll_cq` does: through `cq->context->ops.poll_cq`.
 *
 * @param cq A `struct ibv_cq *`.
 * @param into Where the completions go.
 * @param max At most this many. @default {into.capacity}
 * @returns How many completions were written (0 when none were waiting).
 * @throws {IbverbsError} If the provider reports an error (a negative return: the CQ overran or broke).
 */
export function pollCq(cq: Deno.PointerObject, into: WorkCompletions, max: number = into.capacity): number {
  const n = Math.min(max, into.capacity);
  const found = contextOps(contextOf(cq, IBV_CQ.fields.context.offset)).pollCq.call(cq, n, into.bytes);
  if (found < 0) {
    // Providers return a negative code of their own here (mlx5: -2), not always an errno.
    throw new IbverbsError(`ibv_poll_cq(${n} entries)`, 0, { hint: `the provider returned ${found}` });
  }
  return found;
}

/**
 * Arms a completion queue's notification, as `ibv_req_notify_cq` does: through
 * `cq->context->ops.req_notify_cq`. The next completion then raises one event on the CQ's channel.
 *
 * @param cq A `struct ibv_cq *` created with a completion channel.
 * @param solicitedOnly Only for completions of solicited messages. @default {false}
 * @throws {IbverbsError} If the provider refuses.
 */
export function reqNotifyCq(cq: Deno.PointerObject, solicitedOnly = false): void {
  const rc = contextOps(contextOf(cq, IBV_CQ.fields.context.offset)).reqNotifyCq.call(
    cq,
    solicitedOnly ? 1 : 0,
  );
  if (rc !== 0) throw new IbverbsError("ibv_req_notify_cq", errnoOf(rc));
}
