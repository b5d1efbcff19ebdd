/**
 * The verbs objects: the device list, an open device ({@linkcode VerbsContext}), protection domains,
 * memory regions, completion channels and queues (queue pairs are in `queue_pair.ts`, re-exported here). Each object owns its C object and frees it through `Symbol.dispose`;
 * free children before their parents (queue pairs and regions, then queues, channels and domains, then
 * the context), as libibverbs requires.
 *
 * `ibv_get_device_list` says "no device" in two ways, and both become a {@linkcode NoRdmaDeviceError}:
 * NULL with errno (ENOSYS where the kernel has no RDMA stack, as on machines without RDMA hardware), or
 * an empty list (the stack is loaded but no device is bound).
 *
 * @example Opening the first device (without one, the error says why)
 * ```ts
 * import { openDevice } from "./verbs.ts";
 * import { DistError } from "../../core/errors.ts";
 * try {
 *   using context = openDevice();
 *   console.log(context.device.name, context.queryPort(1).state);
 * } catch (e) {
 *   // NoRdmaDeviceError without a device, LibraryNotFoundError without libibverbs
 *   if (!(e instanceof DistError)) throw e;
 *   console.log(e.message.split("\n")[0]);
 * }
 * ```
 *
 * @module
 */
import { UnsupportedError } from "../../core/errors.ts";
import { errno, pollReadable } from "../libc/libc.ts";
import {
  checkPointer,
  checkRc,
  ibverbs,
  IbverbsError,
  type IbverbsSymbols,
  NoRdmaDeviceError,
} from "./ibverbs.ts";
import {
  IBV_ACCESS,
  IBV_COMP_CHANNEL,
  IBV_CONTEXT,
  IBV_CQ,
  IBV_DEVICE,
  IBV_DEVICE_ATTR,
  IBV_GID,
  IBV_MR,
  IBV_PORT_ATTR,
  IBV_QP_INIT_ATTR,
  IBV_QPT,
} from "./layout.ts";
import { forgetContextOps, pollCq, queryPortExtended, reqNotifyCq, type WorkCompletions } from "./ops.ts";
import { QueuePair, type QueuePairOptions } from "./queue_pair.ts";

export {
  type QpInitOptions,
  type QpRemote,
  type QpRtrOptions,
  type QpRtsOptions,
  QueuePair,
  type QueuePairCapabilities,
  type QueuePairOptions,
  RC_TRANSITION_MASKS,
} from "./queue_pair.ts";
import { Struct } from "../_struct.ts";

/**
 * What the device list says of one device.
 *
 * @example The devices' names and node GUIDs, as `ibv_devices` prints them
 * ```ts
 * import { type RdmaDeviceInfo, rdmaDevices } from "@dcomm/dcomm/rdma";
 * const infos: RdmaDeviceInfo[] = [...rdmaDevices().devices];
 * console.log(infos.map((d) => `${d.name.padEnd(16)} ${d.guid}`).join("\n") || "no RDMA devices");
 * ```
 */
export interface RdmaDeviceInfo {
  /** The device's name, e.g. `"mlx5_0"`. */
  readonly name: string;
  /** The node GUID as `ibv_devinfo` prints it, e.g. `"0c42:a103:0065:1f3e"`. */
  readonly guid: string;
  /** `IBV_NODE.*` (1: a channel adapter). */
  readonly nodeType: number;
  /** `IBV_TRANSPORT.*` (0: InfiniBand, also RoCE). */
  readonly transportType: number;
  /** The device's sysfs folder, e.g. `"/sys/class/infiniband/mlx5_0"`. */
  readonly ibdevPath: string;
}

/** What "no device" says when `ibv_get_device_list` returns an empty list. */
export const EMPTY_DEVICE_LIST: string =
  "No RDMA devices: ibv_get_device_list found none (the kernel's RDMA stack is loaded but no device is bound " +
  "to it, or the device's provider library is missing from /etc/libibverbs.d)";

const ERRNO_HINTS: Readonly<Record<number, string>> = {
  38: "the kernel has no RDMA stack",
  1: "no permission to open /dev/infiniband/uverbs*",
  13: "no permission to open /dev/infiniband/uverbs*",
};

function formatGuid(bigEndian: bigint): string {
  // The value is __be64 read as a host (little-endian) integer: its bytes in memory are the GUID's.
  const bytes = new Uint8Array(new BigUint64Array([bigEndian]).buffer);
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return hex.match(/.{4}/g)?.join(":") ?? hex;
}

/**
 * Formats a GID as 8 groups of 4 hex digits (IPv6 style, unabbreviated).
 *
 * @param gid 16 bytes.
 * @returns For example `"fe80:0000:0000:0000:0e42:a1ff:fe65:1f3e"`.
 */
export function formatGid(gid: Uint8Array): string {
  return [...gid].map((b) => b.toString(16).padStart(2, "0")).join("").match(/.{4}/g)?.join(":") ?? "";
}

/**
 * Runs `use` on the device list, and frees the list after.
 *
 * @throws {NoRdmaDeviceError} If `ibv_get_device_list` returns NULL.
 */
function withDeviceList<T>(
  use: (devices: { pointer: Deno.PointerObject; info: RdmaDeviceInfo }[], lib: IbverbsSymbols) => T,
): T {
  const lib = ibverbs();
  const count = new Int32Array(1);
  const list = lib.ibv_get_device_list(count);
  if (list === null) {
    const code = errno();
    throw new NoRdmaDeviceError(
      `No RDMA devices: ${
        new IbverbsError("ibv_get_device_list", code, { hint: ERRNO_HINTS[code] }).message
      }`,
      { errno: code },
    );
  }
  try {
    const view = new Deno.UnsafePointerView(list);
    const devices = [];
    for (let i = 0; i < count[0]; i++) {
      const pointer = view.getPointer(i * 8);
      if (pointer === null) break;
      devices.push({ pointer, info: deviceInfo(lib, pointer) });
    }
    return use(devices, lib);
  } finally {
    lib.ibv_free_device_list(list);
  }
}

function deviceInfo(lib: IbverbsSymbols, device: Deno.PointerObject): RdmaDeviceInfo {
  const s = Struct.at(IBV_DEVICE, device);
  const name = lib.ibv_get_device_name(device);
  return {
    name: name === null ? s.getString("name") : Deno.UnsafePointerView.getCString(name),
    guid: formatGuid(lib.ibv_get_device_guid(device)),
    nodeType: s.getInt("node_type"),
    transportType: s.getInt("transport_type"),
    ibdevPath: s.getString("ibdev_path"),
  };
}

/**
 * Lists the RDMA devices.
 *
 * @returns The devices; empty when the kernel's RDMA stack is loaded but has no device.
 * @throws {NoRdmaDeviceError} If `ibv_get_device_list` returns NULL (errno ENOSYS: no kernel RDMA stack).
 * @throws {LibraryNotFoundError} If libibverbs is not installed.
 */
export function listDevices(): RdmaDeviceInfo[] {
  return withDeviceList((devices) => devices.map((d) => d.info));
}

/**
 * Opens an RDMA device.
 *
 * @param name The device's name. @default the first device listed
 * @returns The open device.
 * @throws {NoRdmaDeviceError} If there is no device (either shape of "none"), or none of that name.
 * @throws {IbverbsError} If `ibv_open_device` fails.
 * @throws {LibraryNotFoundError} If libibverbs is not installed.
 */
export function openDevice(name?: string): VerbsContext {
  return withDeviceList((devices, lib) => {
    if (devices.length === 0) throw new NoRdmaDeviceError(EMPTY_DEVICE_LIST);
    const chosen = name === undefined ? devices[0] : devices.find((d) => d.info.name === name);
    if (chosen === undefined) {
      throw new NoRdmaDeviceError(
        `No RDMA device named ${name}: found ${devices.map((d) => d.info.name).join(", ")}`,
      );
    }
    const context = checkPointer(
      lib.ibv_open_device(chosen.pointer),
      `ibv_open_device(${chosen.info.name})`,
    );
    return new VerbsContext(context, chosen.info);
  });
}

/** What `ibv_query_device` says of a device (the fields the project uses). */
export interface DeviceAttributes {
  /** Firmware version. */
  readonly firmware: string;
  /** Vendor id (IEEE OUI; 0x02c9 for Mellanox/NVIDIA). */
  readonly vendorId: number;
  /** The vendor's part number. */
  readonly vendorPartId: number;
  /** Hardware version. */
  readonly hardwareVersion: number;
  /** The largest region `ibv_reg_mr` accepts. */
  readonly maxMrSize: bigint;
  /** Most queue pairs. */
  readonly maxQp: number;
  /** Most work requests per queue. */
  readonly maxQpWr: number;
  /** Most scatter/gather elements per work request. */
  readonly maxSge: number;
  /** Most completion queues. */
  readonly maxCq: number;
  /** Most entries per completion queue. */
  readonly maxCqe: number;
  /** Most memory regions. */
  readonly maxMr: number;
  /** Most outstanding RDMA reads a queue pair can receive. */
  readonly maxQpRdAtom: number;
  /** Most outstanding RDMA reads a queue pair can issue. */
  readonly maxQpInitRdAtom: number;
  /** How many ports. */
  readonly physPortCount: number;
}

/** What a port query says. */
export interface PortAttributes {
  /** `IBV_PORT_STATE.*` (4: active). */
  readonly state: number;
  /** Largest MTU (`IBV_MTU.*`). */
  readonly maxMtu: number;
  /** The MTU in use (`IBV_MTU.*`). */
  readonly activeMtu: number;
  /** Entries in the GID table. */
  readonly gidTableLength: number;
  /** Capability bits. */
  readonly portCapFlags: number;
  /** Largest message. */
  readonly maxMessageBytes: number;
  /** The port's LID (InfiniBand; 0 on RoCE). */
  readonly lid: number;
  /** The subnet manager's LID. */
  readonly smLid: number;
  /** LID mask control. */
  readonly lmc: number;
  /** Encoded link width. */
  readonly activeWidth: number;
  /** Encoded link speed. */
  readonly activeSpeed: number;
  /** Physical state (5: LinkUp). */
  readonly physState: number;
  /** `IBV_LINK_LAYER.*` (1: InfiniBand, 2: Ethernet, i.e. RoCE). */
  readonly linkLayer: number;
  /** More capability bits; only the full query fills them (`undefined` after the compatibility query). */
  readonly portCapFlags2: number | undefined;
  /** Whether the extended context's full `query_port` answered (else the exported 48-byte one). */
  readonly extended: boolean;
}

/** An open RDMA device. */
export class VerbsContext implements Disposable {
  /** The `struct ibv_context *`. */
  readonly pointer: Deno.PointerObject;
  /** The device. */
  readonly device: RdmaDeviceInfo;
  #closed = false;

  /**
   * Wraps an open context (use {@linkcode openDevice}).
   *
   * @param pointer The `struct ibv_context *`.
   * @param device What the list said of it.
   */
  constructor(pointer: Deno.PointerObject, device: RdmaDeviceInfo) {
    this.pointer = pointer;
    this.device = device;
  }

  #live(): Deno.PointerObject {
    if (this.#closed) throw new TypeError(`Cannot use RDMA device ${this.device.name}: it was closed`);
    return this.pointer;
  }

  /** How many completion vectors (interrupt lines) the device has. */
  get numCompVectors(): number {
    return Struct.at(IBV_CONTEXT, this.#live()).getInt("num_comp_vectors");
  }

  /**
   * Queries the device.
   *
   * @returns Its attributes.
   * @throws {IbverbsError} If `ibv_query_device` fails.
   */
  queryDevice(): DeviceAttributes {
    const a = new Struct(IBV_DEVICE_ATTR);
    checkRc(ibverbs().ibv_query_device(this.#live(), a.bytes), `ibv_query_device(${this.device.name})`);
    return {
      firmware: a.getString("fw_ver"),
      vendorId: a.get("vendor_id"),
      vendorPartId: a.get("vendor_part_id"),
      hardwareVersion: a.get("hw_ver"),
      maxMrSize: a.getBig("max_mr_size"),
      maxQp: a.get("max_qp"),
      maxQpWr: a.get("max_qp_wr"),
      maxSge: a.get("max_sge"),
      maxCq: a.get("max_cq"),
      maxCqe: a.get("max_cqe"),
      maxMr: a.get("max_mr"),
      maxQpRdAtom: a.get("max_qp_rd_atom"),
      maxQpInitRdAtom: a.get("max_qp_init_rd_atom"),
      physPortCount: a.get("phys_port_cnt"),
    };
  }

  /**
   * Queries a port: through the extended context's full `query_port` when the provider has one (as the
   * header's `ibv_query_port` macro does), else through the exported compatibility symbol.
   *
   * @param port The port number, from 1.
   * @returns Its attributes.
   * @throws {IbverbsError} If the query fails (EINVAL: no such port).
   */
  queryPort(port: number): PortAttributes {
    checkPort(port);
    const a = new Struct(IBV_PORT_ATTR);
    const context = this.#live();
    const extended = queryPortExtended(context, port, a.bytes);
    if (!extended) {
      checkRc(
        ibverbs().ibv_query_port(context, port, a.bytes),
        `ibv_query_port(${this.device.name}, ${port})`,
      );
    }
    return portAttributes(a, extended);
  }

  /**
   * Reads one entry of a port's GID table.
   *
   * @param port The port number, from 1.
   * @param index The entry.
   * @returns The 16 bytes (network order); all zero for an empty entry.
   * @throws {IbverbsError} If `ibv_query_gid` fails.
   */
  queryGid(port: number, index: number): Uint8Array {
    checkPort(port);
    const gid = new Struct(IBV_GID);
    checkRc(
      ibverbs().ibv_query_gid(this.#live(), port, index, gid.bytes),
      `ibv_query_gid(${this.device.name}, port ${port}, index ${index})`,
    );
    return gid.fieldBytes("raw").slice();
  }

  /**
   * Allocates a protection domain.
   *
   * @returns The domain.
   * @throws {IbverbsError} If `ibv_alloc_pd` fails.
   */
  allocPd(): ProtectionDomain {
    const pd = checkPointer(ibverbs().ibv_alloc_pd(this.#live()), `ibv_alloc_pd(${this.device.name})`);
    return new ProtectionDomain(this, pd);
  }

  /**
   * Creates a completion channel: a file descriptor that becomes readable when an armed completion queue
   * gets a completion.
   *
   * @returns The channel.
   * @throws {IbverbsError} If `ibv_create_comp_channel` fails.
   */
  createCompletionChannel(): CompletionChannel {
    const channel = checkPointer(
      ibverbs().ibv_create_comp_channel(this.#live()),
      `ibv_create_comp_channel(${this.device.name})`,
    );
    return new CompletionChannel(channel);
  }

  /**
   * Creates a completion queue.
   *
   * @param entries At least this many entries (the provider may round up).
   * @param options The channel for events, and the completion vector.
   * @returns The queue.
   * @throws {IbverbsError} If `ibv_create_cq` fails.
   */
  createCq(entries: number, options: CompletionQueueOptions = {}): CompletionQueue {
    if (!Number.isInteger(entries) || entries < 1) {
      throw new RangeError(`Expected entries >= 1, found ${entries}`);
    }
    const cq = checkPointer(
      ibverbs().ibv_create_cq(
        this.#live(),
        entries,
        null,
        options.channel?.pointer ?? null,
        options.compVector ?? 0,
      ),
      `ibv_create_cq(${this.device.name}, ${entries} entries)`,
    );
    const queue = new CompletionQueue(cq, options.channel);
    options.channel?.attach(queue);
    return queue;
  }

  /**
   * Closes the device. Every object made from it must be freed first.
   *
   * @throws {IbverbsError} If `ibv_close_device` fails.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    forgetContextOps(this.pointer);
    checkRc(ibverbs().ibv_close_device(this.pointer), `ibv_close_device(${this.device.name})`);
  }

  /** Same as {@linkcode VerbsContext.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 255) {
    throw new RangeError(`Expected a port in 1..255, found ${port}`);
  }
}

function portAttributes(a: Struct<keyof typeof IBV_PORT_ATTR.fields>, extended: boolean): PortAttributes {
  return {
    state: a.get("state"),
    maxMtu: a.get("max_mtu"),
    activeMtu: a.get("active_mtu"),
    gidTableLength: a.getInt("gid_tbl_len"),
    portCapFlags: a.get("port_cap_flags"),
    maxMessageBytes: a.get("max_msg_sz"),
    lid: a.get("lid"),
    smLid: a.get("sm_lid"),
    lmc: a.get("lmc"),
    activeWidth: a.get("active_width"),
    activeSpeed: a.get("active_speed"),
    physState: a.get("phys_state"),
    linkLayer: a.get("link_layer"),
    portCapFlags2: extended ? a.get("port_cap_flags2") : undefined,
    extended,
  };
}

/** Options of {@linkcode VerbsContext.createCq}. */
export interface CompletionQueueOptions {
  /** The channel that receives the queue's events. @default {none: no events} */
  channel?: CompletionChannel;
  /** The completion vector (interrupt line). @default {0} */
  compVector?: number;
}

/** A completion channel: a file descriptor that is readable while a completion event waits. */
export class CompletionChannel implements Disposable {
  /** The `struct ibv_comp_channel *`. */
  readonly pointer: Deno.PointerObject;
  /** Its file descriptor. */
  readonly fd: number;
  readonly #queues = new Map<bigint, CompletionQueue>();
  #closed = false;

  /**
   * Wraps a channel (use `VerbsContext.createCompletionChannel`).
   *
   * @param pointer The `struct ibv_comp_channel *`.
   */
  constructor(pointer: Deno.PointerObject) {
    this.pointer = pointer;
    this.fd = Struct.at(IBV_COMP_CHANNEL, pointer).getInt("fd");
  }

  /**
   * Records a queue created on this channel, so events can name it.
   *
   * @param queue The queue.
   */
  attach(queue: CompletionQueue): void {
    this.#queues.set(Deno.UnsafePointer.value(queue.pointer), queue);
  }

  /**
   * Forgets a queue (it is being destroyed).
   *
   * @param queue The queue.
   */
  detach(queue: CompletionQueue): void {
    this.#queues.delete(Deno.UnsafePointer.value(queue.pointer));
  }

  /**
   * Waits on a pool thread until an event is ready or `timeoutMs` passed.
   *
   * @param timeoutMs The longest wait.
   * @returns Whether an event is ready ({@linkcode CompletionChannel.takeEvent} will not block).
   */
  wait(timeoutMs: number): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    return pollReadable(this.fd, timeoutMs);
  }

  /**
   * Takes one event (`ibv_get_cq_event`); call it only after {@linkcode CompletionChannel.wait} said an
   * event is ready, since it blocks the thread otherwise. The event is acknowledged later by its queue.
   *
   * @returns The queue that had the completion (re-arm it before polling it empty).
   * @throws {IbverbsError} If `ibv_get_cq_event` fails.
   */
  takeEvent(): CompletionQueue | undefined {
    const cq = new BigUint64Array(1);
    const context = new BigUint64Array(1);
    checkRc(ibverbs().ibv_get_cq_event(this.pointer, cq, context), `ibv_get_cq_event(fd ${this.fd})`);
    const queue = this.#queues.get(cq[0]);
    queue?.noteEvent();
    return queue;
  }

  /**
   * Destroys the channel. Every queue on it must be destroyed first.
   *
   * @throws {IbverbsError} If `ibv_destroy_comp_channel` fails (EBUSY: a queue still uses it).
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    checkRc(ibverbs().ibv_destroy_comp_channel(this.pointer), `ibv_destroy_comp_channel(fd ${this.fd})`);
  }

  /** Same as {@linkcode CompletionChannel.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A completion queue. */
export class CompletionQueue implements Disposable {
  /** The `struct ibv_cq *`. */
  readonly pointer: Deno.PointerObject;
  /** Entries the provider granted. */
  readonly capacity: number;
  readonly #channel: CompletionChannel | undefined;
  #unacked = 0;
  #closed = false;

  /**
   * Wraps a queue (use `VerbsContext.createCq`).
   *
   * @param pointer The `struct ibv_cq *`.
   * @param channel Its channel, if any.
   */
  constructor(pointer: Deno.PointerObject, channel?: CompletionChannel) {
    this.pointer = pointer;
    this.capacity = Struct.at(IBV_CQ, pointer).getInt("cqe");
    this.#channel = channel;
  }

  #live(): Deno.PointerObject {
    if (this.#closed) throw new TypeError("Cannot use a completion queue that was destroyed");
    return this.pointer;
  }

  /**
   * Polls for completions.
   *
   * @param into Where they go.
   * @param max At most this many. @default {into.capacity}
   * @returns How many were written.
   * @throws {IbverbsError} If the provider fails.
   */
  poll(into: WorkCompletions, max?: number): number {
    return pollCq(this.#live(), into, max);
  }

  /**
   * Arms the queue: its next completion raises an event on its channel.
   *
   * @param solicitedOnly Only for solicited messages. @default {false}
   * @throws {IbverbsError} If the provider refuses.
   */
  requestNotify(solicitedOnly = false): void {
    reqNotifyCq(this.#live(), solicitedOnly);
  }

  /** Counts an event taken from the channel; they are acknowledged in batches. */
  noteEvent(): void {
    if (++this.#unacked >= 64) this.#ack();
  }

  #ack(): void {
    if (this.#unacked > 0) ibverbs().ibv_ack_cq_events(this.pointer, this.#unacked);
    this.#unacked = 0;
  }

  /**
   * Destroys the queue (acknowledging its events first). Its queue pairs must be destroyed first.
   *
   * @throws {IbverbsError} If `ibv_destroy_cq` fails.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#ack();
    this.#channel?.detach(this);
    checkRc(ibverbs().ibv_destroy_cq(this.pointer), "ibv_destroy_cq");
  }

  /** Same as {@linkcode CompletionQueue.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A protection domain: memory regions and queue pairs in one domain may be used together. */
export class ProtectionDomain implements Disposable {
  /** The `struct ibv_pd *`. */
  readonly pointer: Deno.PointerObject;
  /** The device it belongs to. */
  readonly context: VerbsContext;
  #closed = false;

  /**
   * Wraps a domain (use `VerbsContext.allocPd`).
   *
   * @param context The device.
   * @param pointer The `struct ibv_pd *`.
   */
  constructor(context: VerbsContext, pointer: Deno.PointerObject) {
    this.context = context;
    this.pointer = pointer;
  }

  #live(): Deno.PointerObject {
    if (this.#closed) throw new TypeError("Cannot use a protection domain that was deallocated");
    return this.pointer;
  }

  /**
   * Registers memory at an address with `ibv_reg_mr`: host memory, or CUDA device memory where the
   * peer-memory kernel module (nvidia-peermem) lets the kernel pin it.
   *
   * @param address The first byte.
   * @param length Bytes (at least 1).
   * @param access `IBV_ACCESS.*` bits.
   * @param keepAlive An object the region holds until it is deregistered (the JS buffer behind `address`).
   * @returns The region.
   * @throws {IbverbsError} If `ibv_reg_mr` fails.
   */
  registerAddress(address: bigint, length: number, access: number, keepAlive?: unknown): MemoryRegion {
    checkLength(length);
    const mr = checkPointer(
      ibverbs().ibv_reg_mr(this.#live(), Deno.UnsafePointer.create(address), BigInt(length), access),
      `ibv_reg_mr(0x${address.toString(16)}, ${length} bytes, access 0x${access.toString(16)})`,
    );
    return new MemoryRegion(mr, keepAlive);
  }

  /**
   * Registers host memory.
   *
   * @param memory The bytes; the region keeps them alive until it is deregistered.
   * @param access `IBV_ACCESS.*` bits. @default {IBV_ACCESS.LOCAL_WRITE}
   * @returns The region.
   * @throws {IbverbsError} If `ibv_reg_mr` fails.
   */
  registerHost(memory: ArrayBufferView | ArrayBuffer, access: number = IBV_ACCESS.LOCAL_WRITE): MemoryRegion {
    const address = Deno.UnsafePointer.value(Deno.UnsafePointer.of(memory as Uint8Array));
    return this.registerAddress(address, memory.byteLength, access, memory);
  }

  /**
   * Registers memory exported as a dma-buf (GPU memory, through `cuMemGetHandleForAddressRange`) with
   * `ibv_reg_dmabuf_mr`.
   *
   * @param region The dma-buf's fd, the offset into it, the length, and the address the region is known
   * by (`iova`, usually the GPU address).
   * @param access `IBV_ACCESS.*` bits.
   * @returns The region; the fd may be closed once it is registered.
   * @throws {UnsupportedError} If libibverbs is older than rdma-core 34 (no `ibv_reg_dmabuf_mr`).
   * @throws {IbverbsError} If `ibv_reg_dmabuf_mr` fails (EOPNOTSUPP: the kernel or NIC driver lacks dma-buf).
   */
  registerDmaBuf(region: DmaBufRegion, access: number): MemoryRegion {
    checkLength(region.length);
    const reg = dmaBufSymbol();
    const mr = checkPointer(
      reg(this.#live(), region.offset, BigInt(region.length), region.iova, region.fd, access),
      `ibv_reg_dmabuf_mr(fd ${region.fd}, offset ${region.offset}, ${region.length} bytes)`,
    );
    return new MemoryRegion(mr, region.keepAlive);
  }

  /**
   * Probes the kernel's dma-buf support as NCCL does: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)` fails with
   * EBADF where the kernel would accept a real dma-buf, and with EOPNOTSUPP or EPROTONOSUPPORT where not.
   *
   * @returns `"supported"`, `"unsupported"`, or `"unknown"` with the errno seen.
   */
  probeDmaBuf(): { result: "supported" | "unsupported" | "unknown"; errno: number } {
    const reg = ibverbs().ibv_reg_dmabuf_mr;
    if (reg === null) return { result: "unsupported", errno: 95 };
    const mr = reg(this.#live(), 0n, 0n, 0n, -1, 0);
    const code = mr === null ? errno() : 0;
    if (mr !== null) ibverbs().ibv_dereg_mr(mr);
    if (code === 9) return { result: "supported", errno: code };
    if (code === 95 || code === 93) return { result: "unsupported", errno: code };
    return { result: "unknown", errno: code };
  }

  /**
   * Creates a queue pair.
   *
   * @param options The queues and capacities.
   * @returns The queue pair, in state RESET.
   * @throws {IbverbsError} If `ibv_create_qp` fails.
   */
  createQp(options: QueuePairOptions): QueuePair {
    const a = new Struct(IBV_QP_INIT_ATTR);
    a.setPointer("send_cq", options.sendCq.pointer)
      .setPointer("recv_cq", (options.recvCq ?? options.sendCq).pointer)
      .set("cap.max_send_wr", options.maxSendWr)
      .set("cap.max_recv_wr", options.maxRecvWr)
      .set("cap.max_send_sge", options.maxSendSge ?? 1)
      .set("cap.max_recv_sge", options.maxRecvSge ?? 1)
      .set("cap.max_inline_data", options.maxInlineData ?? 0)
      .set("qp_type", IBV_QPT.RC)
      .set("sq_sig_all", 0);
    const qp = checkPointer(
      ibverbs().ibv_create_qp(this.#live(), a.bytes),
      `ibv_create_qp(RC, ${options.maxSendWr} send / ${options.maxRecvWr} receive requests)`,
    );
    return new QueuePair(qp, {
      maxSendWr: a.get("cap.max_send_wr"),
      maxRecvWr: a.get("cap.max_recv_wr"),
      maxInlineData: a.get("cap.max_inline_data"),
    });
  }

  /**
   * Deallocates the domain. Its regions and queue pairs must be freed first.
   *
   * @throws {IbverbsError} If `ibv_dealloc_pd` fails (EBUSY: still in use).
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    checkRc(ibverbs().ibv_dealloc_pd(this.pointer), "ibv_dealloc_pd");
  }

  /** Same as {@linkcode ProtectionDomain.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}

function checkLength(length: number): void {
  if (!Number.isSafeInteger(length) || length < 1) {
    throw new RangeError(`Expected a region of at least 1 byte, found ${length}`);
  }
}

function dmaBufSymbol(): NonNullable<IbverbsSymbols["ibv_reg_dmabuf_mr"]> {
  const reg = ibverbs().ibv_reg_dmabuf_mr;
  if (reg === null) {
    throw new UnsupportedError(
      "Cannot register a dma-buf: this libibverbs has no ibv_reg_dmabuf_mr (it needs rdma-core 34 or newer)",
    );
  }
  return reg;
}

/** A dma-buf range to register. */
export interface DmaBufRegion {
  /** The dma-buf file descriptor. */
  readonly fd: number;
  /** Offset of the first byte in the dma-buf. */
  readonly offset: bigint;
  /** Bytes. */
  readonly length: number;
  /** The address the region is known by in work requests (usually the GPU virtual address). */
  readonly iova: bigint;
  /** An object the region holds until it is deregistered. */
  readonly keepAlive?: unknown;
}

/** A registered memory region. */
export class MemoryRegion implements Disposable {
  /** The `struct ibv_mr *`. */
  readonly pointer: Deno.PointerObject;
  /** The address of its first byte, as work requests name it. */
  readonly address: bigint;
  /** Bytes. */
  readonly length: number;
  /** The key local work requests use. */
  readonly lkey: number;
  /** The key a peer uses to write or read it. */
  readonly rkey: number;
  // Held (never read) so that the memory C points to outlives the registration.
  #keepAlive: unknown;
  #closed = false;

  /**
   * Wraps a registration (use the `ProtectionDomain` methods).
   *
   * @param pointer The `struct ibv_mr *`.
   * @param keepAlive What to keep alive until deregistration.
   */
  constructor(pointer: Deno.PointerObject, keepAlive?: unknown) {
    this.pointer = pointer;
    const s = Struct.at(IBV_MR, pointer);
    this.address = s.getBig("addr");
    this.length = Number(s.getBig("length"));
    this.lkey = s.get("lkey");
    this.rkey = s.get("rkey");
    this.#keepAlive = keepAlive;
  }

  /** Whether it was deregistered. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Deregisters the region; then the memory may be freed.
   *
   * @throws {IbverbsError} If `ibv_dereg_mr` fails.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      checkRc(ibverbs().ibv_dereg_mr(this.pointer), `ibv_dereg_mr(${this.length} bytes)`);
    } finally {
      this.#keepAlive = undefined;
    }
  }

  /** Same as {@linkcode MemoryRegion.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}
