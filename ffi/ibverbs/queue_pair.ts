/**
 * Reliable-connected queue pairs: creation options, the INIT → RTR → RTS transitions with the attribute
 * masks the InfiniBand spec requires for each (`RC_TRANSITION_MASKS`), the move to ERROR, and posting work
 * requests (through `ops.ts`). Made by `ProtectionDomain.createQp` (`verbs.ts`).
 *
 * @module
 */
import { checkRc, errnoOf, ibverbs, IbverbsError } from "./ibverbs.ts";
import { IBV_ACCESS, IBV_QP, IBV_QP_ATTR, IBV_QP_ATTR_MASK, IBV_QP_INIT_ATTR, IBV_QPS } from "./layout.ts";
import { postRecv, postSend, type RecvRequest, type SendRequest } from "./ops.ts";
import { Struct } from "../_struct.ts";
import type { CompletionQueue } from "./verbs.ts";

/** Options of {@linkcode ProtectionDomain.createQp}. */
export interface QueuePairOptions {
  /** The queue of send completions. */
  sendCq: CompletionQueue;
  /** The queue of receive completions. @default {sendCq} */
  recvCq?: CompletionQueue;
  /** Outstanding send requests. */
  maxSendWr: number;
  /** Outstanding receive requests. */
  maxRecvWr: number;
  /** Scatter/gather elements per send. @default {1} */
  maxSendSge?: number;
  /** Scatter/gather elements per receive. @default {1} */
  maxRecvSge?: number;
  /** Bytes a send may carry inline. @default {0} */
  maxInlineData?: number;
}

/** The capacities a queue pair was granted. */
export interface QueuePairCapabilities {
  /** Outstanding send requests. */
  readonly maxSendWr: number;
  /** Outstanding receive requests. */
  readonly maxRecvWr: number;
  /** Bytes a send may carry inline. */
  readonly maxInlineData: number;
}

/** Options of {@linkcode QueuePair.toInit}. */
export interface QpInitOptions {
  /** The local port. */
  port: number;
  /** What the peer may do to this side's memory (`IBV_ACCESS.*`). @default {LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ} */
  access?: number;
  /** The partition key's index. @default {0} */
  pkeyIndex?: number;
}

/** The other end of a connection, as it published itself. */
export interface QpRemote {
  /** Its queue pair number. */
  readonly qpn: number;
  /** Its first packet sequence number (24 bits). */
  readonly psn: number;
  /** Its port's LID (InfiniBand). */
  readonly lid: number;
  /** Its GID (RoCE, or InfiniBand across subnets); `undefined` to address by LID alone. */
  readonly gid?: Uint8Array;
}

/** Options of {@linkcode QueuePair.toRtr}. */
export interface QpRtrOptions {
  /** The local port. */
  port: number;
  /** Path MTU (`IBV_MTU.*`): the smaller of both ports' active MTUs. */
  mtu: number;
  /** The local GID index used with a GID. @default {0} */
  sgidIndex?: number;
  /** Hops a routed (GRH) packet may take. @default {255} */
  hopLimit?: number;
  /** Traffic class of GRH packets. @default {0} */
  trafficClass?: number;
  /** Service level. @default {0} */
  serviceLevel?: number;
  /** How long the peer waits before retrying when no receive is posted (encoded; 12 = 0.64 ms). @default {12} */
  minRnrTimer?: number;
  /** RDMA reads the peer may have outstanding on this side. @default {1} */
  maxDestRdAtomic?: number;
}

/** Options of {@linkcode QueuePair.toRts}. */
export interface QpRtsOptions {
  /** This side's first packet sequence number (24 bits), as published. */
  psn: number;
  /** Ack timeout, encoded as 4.096 µs · 2^timeout. @default {14} (67 ms) */
  timeout?: number;
  /** Retries after a timeout (0-7). @default {7} */
  retryCount?: number;
  /** Retries when the peer has no receive posted (7 = forever). @default {7} */
  rnrRetry?: number;
  /** RDMA reads this side may have outstanding. @default {1} */
  maxRdAtomic?: number;
}

/** The attribute masks of the three transitions of a reliable-connected queue pair (IB spec 11.2.4.2). */
export const RC_TRANSITION_MASKS: {
  readonly init: number;
  readonly rtr: number;
  readonly rts: number;
} = {
  init: IBV_QP_ATTR_MASK.STATE | IBV_QP_ATTR_MASK.PKEY_INDEX | IBV_QP_ATTR_MASK.PORT |
    IBV_QP_ATTR_MASK.ACCESS_FLAGS,
  rtr: IBV_QP_ATTR_MASK.STATE | IBV_QP_ATTR_MASK.AV | IBV_QP_ATTR_MASK.PATH_MTU | IBV_QP_ATTR_MASK.DEST_QPN |
    IBV_QP_ATTR_MASK.RQ_PSN | IBV_QP_ATTR_MASK.MAX_DEST_RD_ATOMIC | IBV_QP_ATTR_MASK.MIN_RNR_TIMER,
  rts: IBV_QP_ATTR_MASK.STATE | IBV_QP_ATTR_MASK.TIMEOUT | IBV_QP_ATTR_MASK.RETRY_CNT |
    IBV_QP_ATTR_MASK.RNR_RETRY | IBV_QP_ATTR_MASK.SQ_PSN | IBV_QP_ATTR_MASK.MAX_QP_RD_ATOMIC,
};

const QP_STATE_NAMES = Object.fromEntries(Object.entries(IBV_QPS).map(([k, v]) => [v, k]));

/** A reliable-connected queue pair. */
export class QueuePair implements Disposable {
  /** The `struct ibv_qp *`. */
  readonly pointer: Deno.PointerObject;
  /** Its number, which the peer addresses. */
  readonly qpNum: number;
  /** The capacities granted. */
  readonly capabilities: QueuePairCapabilities;
  #closed = false;

  /**
   * Wraps a queue pair (use `ProtectionDomain.createQp`).
   *
   * @param pointer The `struct ibv_qp *`.
   * @param capabilities The capacities granted.
   */
  constructor(pointer: Deno.PointerObject, capabilities: QueuePairCapabilities) {
    this.pointer = pointer;
    this.qpNum = Struct.at(IBV_QP, pointer).get("qp_num");
    this.capabilities = capabilities;
  }

  #live(): Deno.PointerObject {
    if (this.#closed) throw new TypeError(`Cannot use queue pair ${this.qpNum}: it was destroyed`);
    return this.pointer;
  }

  /**
   * Modifies the queue pair (`ibv_modify_qp`).
   *
   * @param attr The attributes: the bytes of a `struct ibv_qp_attr` (`IBV_QP_ATTR.size`).
   * @param mask Which attributes to apply (`IBV_QP_ATTR_MASK.*` bits).
   * @throws {IbverbsError} If the provider refuses (EINVAL: a wrong mask or value for the transition).
   */
  modify(attr: Uint8Array, mask: number): void {
    if (attr.length !== IBV_QP_ATTR.size) {
      throw new RangeError(`Expected ${IBV_QP_ATTR.size} bytes for ibv_qp_attr, found ${attr.length}`);
    }
    const rc = ibverbs().ibv_modify_qp(this.#live(), attr, mask);
    if (rc !== 0) {
      const state = new DataView(attr.buffer, attr.byteOffset).getUint32(
        IBV_QP_ATTR.fields.qp_state.offset,
        true,
      );
      const to = QP_STATE_NAMES[state] ?? state;
      throw new IbverbsError(
        `ibv_modify_qp(qp ${this.qpNum} to ${to}, mask 0x${mask.toString(16)})`,
        errnoOf(rc),
      );
    }
  }

  /**
   * RESET → INIT.
   *
   * @param options The port, the remote access allowed and the partition key index.
   * @throws {IbverbsError} If the provider refuses.
   */
  toInit(options: QpInitOptions): void {
    const a = new Struct(IBV_QP_ATTR);
    a.set("qp_state", IBV_QPS.INIT)
      .set("pkey_index", options.pkeyIndex ?? 0)
      .set("port_num", options.port)
      .set(
        "qp_access_flags",
        options.access ?? (IBV_ACCESS.LOCAL_WRITE | IBV_ACCESS.REMOTE_WRITE | IBV_ACCESS.REMOTE_READ),
      );
    this.modify(a.bytes, RC_TRANSITION_MASKS.init);
  }

  /**
   * INIT → RTR (ready to receive): connects to the remote queue pair.
   *
   * @param remote The peer's queue pair number, first PSN, LID and GID.
   * @param options Path MTU, port, GID index and timers.
   * @throws {IbverbsError} If the provider refuses.
   */
  toRtr(remote: QpRemote, options: QpRtrOptions): void {
    const a = new Struct(IBV_QP_ATTR);
    a.set("qp_state", IBV_QPS.RTR)
      .set("path_mtu", options.mtu)
      .set("dest_qp_num", remote.qpn)
      .set("rq_psn", remote.psn & 0xffffff)
      .set("max_dest_rd_atomic", options.maxDestRdAtomic ?? 1)
      .set("min_rnr_timer", options.minRnrTimer ?? 12)
      .set("ah_attr.dlid", remote.lid)
      .set("ah_attr.sl", options.serviceLevel ?? 0)
      .set("ah_attr.src_path_bits", 0)
      .set("ah_attr.port_num", options.port);
    if (remote.gid !== undefined) {
      if (remote.gid.length !== 16) {
        throw new RangeError(`Expected a GID of 16 bytes, found ${remote.gid.length}`);
      }
      a.set("ah_attr.is_global", 1)
        .set("ah_attr.grh.sgid_index", options.sgidIndex ?? 0)
        .set("ah_attr.grh.hop_limit", options.hopLimit ?? 255)
        .set("ah_attr.grh.traffic_class", options.trafficClass ?? 0);
      a.fieldBytes("ah_attr.grh.dgid").set(remote.gid);
    }
    this.modify(a.bytes, RC_TRANSITION_MASKS.rtr);
  }

  /**
   * RTR → RTS (ready to send).
   *
   * @param options This side's PSN, the timeout and retry counts.
   * @throws {IbverbsError} If the provider refuses.
   */
  toRts(options: QpRtsOptions): void {
    const a = new Struct(IBV_QP_ATTR);
    a.set("qp_state", IBV_QPS.RTS)
      .set("sq_psn", options.psn & 0xffffff)
      .set("timeout", options.timeout ?? 14)
      .set("retry_cnt", options.retryCount ?? 7)
      .set("rnr_retry", options.rnrRetry ?? 7)
      .set("max_rd_atomic", options.maxRdAtomic ?? 1);
    this.modify(a.bytes, RC_TRANSITION_MASKS.rts);
  }

  /**
   * Moves to ERROR: every outstanding request completes with WR_FLUSH_ERR.
   *
   * @throws {IbverbsError} If the provider refuses.
   */
  toError(): void {
    this.modify(new Struct(IBV_QP_ATTR).set("qp_state", IBV_QPS.ERR).bytes, IBV_QP_ATTR_MASK.STATE);
  }

  /**
   * The current state (`ibv_query_qp`).
   *
   * @returns `IBV_QPS.*`.
   * @throws {IbverbsError} If the query fails.
   */
  state(): number {
    const a = new Struct(IBV_QP_ATTR);
    const init = new Struct(IBV_QP_INIT_ATTR);
    checkRc(
      ibverbs().ibv_query_qp(this.#live(), a.bytes, IBV_QP_ATTR_MASK.STATE, init.bytes),
      `ibv_query_qp(qp ${this.qpNum})`,
    );
    return a.get("qp_state");
  }

  /**
   * Posts send requests.
   *
   * @param requests The requests, in order.
   * @throws {IbverbsError} If the provider refuses one.
   */
  postSend(requests: readonly SendRequest[]): void {
    postSend(this.#live(), requests);
  }

  /**
   * Posts receive requests.
   *
   * @param requests The requests, in order.
   * @throws {IbverbsError} If the provider refuses one.
   */
  postRecv(requests: readonly RecvRequest[]): void {
    postRecv(this.#live(), requests);
  }

  /**
   * Destroys the queue pair.
   *
   * @throws {IbverbsError} If `ibv_destroy_qp` fails.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    checkRc(ibverbs().ibv_destroy_qp(this.pointer), `ibv_destroy_qp(qp ${this.qpNum})`);
  }

  /** Same as {@linkcode QueuePair.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}
