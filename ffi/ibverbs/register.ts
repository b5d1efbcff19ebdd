/**
 * Memory registration for RDMA, and what `doctor` reports about RDMA.
 *
 * - {@linkcode registerMemory} registers host memory (any TypedArray, DataView or ArrayBuffer) or GPU
 *   memory (anything shaped like {@linkcode DeviceMemory}, such as the CUDA binding's `DeviceBuffer`), and
 *   returns a {@linkcode RegisteredMemory} that keeps the JS buffer alive until it is disposed. GPU memory
 *   goes through dma-buf (`cuMemGetHandleForAddressRange` + `ibv_reg_dmabuf_mr`) when the machine
 *   supports it, else through the peer-memory module (`ibv_reg_mr` on the GPU address); where neither
 *   works the error lists each missing prerequisite.
 * - {@linkcode gpuDirectStatus} probes the GPUDirect RDMA prerequisites the way NCCL does.
 * - {@linkcode rdmaDevices} summarises the devices and ports, or says why there are none.
 *
 * Neither report throws: they are for printing.
 *
 * @example Registering a host buffer (without an RDMA device, the error says why)
 * ```ts
 * import { registerMemory } from "./register.ts";
 * import { DistError } from "../../core/errors.ts";
 * const bytes = new Uint8Array(1 << 20);
 * try {
 *   using region = registerMemory(bytes, { access: ["local-write", "remote-write"] });
 *   console.log(region.address, region.lkey, region.rkey);
 * } catch (e) {
 *   // NoRdmaDeviceError without a device, LibraryNotFoundError without libibverbs
 *   if (!(e instanceof DistError)) throw e;
 *   console.log(e.message.split("\n")[0]);
 * }
 * ```
 *
 * @module
 */
import { LibraryNotFoundError, UnsupportedError } from "../../core/errors.ts";
import { close as closeFd, pageSize } from "../libc/libc.ts";
import {
  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
  CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
  deviceAttribute,
  deviceCount,
  driverVersion,
  exportDmaBuf,
} from "./_cuda_driver.ts";
import {
  decideGpuPath,
  type GpuDirectFacts,
  type GpuRegistrationPath,
  PEER_MEMORY_FILES,
} from "./_gpudirect.ts";
import { ibverbs, ibverbsMissing, ibverbsPath, NoRdmaDeviceError } from "./ibverbs.ts";
import { IBV_ACCESS, IBV_LINK_LAYER, IBV_PORT_STATE } from "./layout.ts";
import {
  EMPTY_DEVICE_LIST,
  formatGid,
  listDevices,
  type MemoryRegion,
  openDevice,
  type ProtectionDomain,
  type RdmaDeviceInfo,
  type VerbsContext,
} from "./verbs.ts";

export type { GpuRegistrationPath } from "./_gpudirect.ts";

/**
 * GPU memory as the CUDA binding's `DeviceBuffer` describes it (any object of this shape is accepted).
 *
 * @example A `DeviceBuffer` is one (without a GPU, `cudaStatus` says why; without RDMA, the error does)
 * ```ts
 * import { type DeviceMemory, registerMemory } from "@dcomm/dcomm/rdma";
 * import { cudaStatus, DeviceBuffer } from "@dcomm/dcomm/gpu";
 * import { DistError } from "@dcomm/dcomm";
 * const status = cudaStatus();
 * if (status.available) {
 *   using grad = DeviceBuffer.alloc(1 << 20);
 *   const memory: DeviceMemory = grad; // its pointer, byteLength and device
 *   try {
 *     using region = registerMemory(memory, { access: ["remote-write"] });
 *     console.log(`GPU memory registered through ${region.path}`);
 *   } catch (e) {
 *     if (!(e instanceof DistError)) throw e;
 *     console.log(e.message); // no RDMA device, or the GPUDirect prerequisites missing
 *   }
 * } else {
 *   console.log(`No GPU: ${status.reason}`);
 * }
 * ```
 */
export interface DeviceMemory {
  /** The device address of the first byte. */
  readonly pointer: Deno.PointerValue;
  /** Bytes. */
  readonly byteLength: number;
  /** The CUDA device ordinal holding it. */
  readonly device: number;
}

/**
 * What may be registered: host memory, or GPU memory.
 *
 * @example Host memory of every shape, and what is refused before any device is opened
 * ```ts
 * import { type RegisterableMemory, registerMemory } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * const bytes = new ArrayBuffer(4096);
 * const shapes: RegisterableMemory[] = [bytes, new Float32Array(bytes, 1024), new DataView(bytes, 0, 64)];
 * console.log(shapes.map((m) => m.byteLength)); // [4096, 3072, 64]
 * assert.throws(() => registerMemory(new Float32Array(0)), RangeError);
 * ```
 */
export type RegisterableMemory = ArrayBufferView | ArrayBuffer | DeviceMemory;

/**
 * What a peer (or the local NIC) may do with registered memory.
 *
 * @example A buffer peers write into and read from; an unknown name is refused
 * ```ts
 * import { type MemoryAccess, registerMemory } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * const access: MemoryAccess[] = ["remote-write", "remote-read"]; // "local-write" is implied
 * console.log(access);
 * assert.throws(() => registerMemory(new Uint8Array(8), { access: ["write" as MemoryAccess] }), TypeError);
 * ```
 */
export type MemoryAccess =
  | "local-write"
  | "remote-write"
  | "remote-read"
  | "remote-atomic"
  | "relaxed-ordering";

const ACCESS_BITS: Readonly<Record<MemoryAccess, number>> = {
  "local-write": IBV_ACCESS.LOCAL_WRITE,
  "remote-write": IBV_ACCESS.REMOTE_WRITE,
  "remote-read": IBV_ACCESS.REMOTE_READ,
  "remote-atomic": IBV_ACCESS.REMOTE_ATOMIC,
  "relaxed-ordering": IBV_ACCESS.RELAXED_ORDERING,
};

/** Options of {@linkcode registerMemory}. */
export interface RegisterMemoryOptions {
  /**
   * What the memory may be used for. `"remote-write"` and `"remote-atomic"` imply `"local-write"`
   * (verbs requires it).
   *
   * @default {["local-write"]}
   */
  access?: readonly MemoryAccess[];
  /**
   * The protection domain to register in (the queue pairs that use the region must be in the same one).
   * Without it, the region opens `device` and allocates its own domain, and frees both when disposed.
   *
   * @default {a domain of its own}
   */
  pd?: ProtectionDomain;
  /** The RDMA device to open when no `pd` is given. @default {the first device} */
  device?: string;
}

/** How a region was registered. */
export type RegistrationPath = "host" | Exclude<GpuRegistrationPath, "none">;

/** A registered memory region; disposing it deregisters it and lets the buffer go. */
export class RegisteredMemory implements Disposable {
  /** The address work requests name its first byte by. */
  readonly address: bigint;
  /** Bytes. */
  readonly length: number;
  /** Its local key. */
  readonly lkey: number;
  /** Its remote key. */
  readonly rkey: number;
  /** How it was registered. */
  readonly path: RegistrationPath;
  /** The verbs region. */
  readonly region: MemoryRegion;
  // Held (never read) so the buffer outlives the registration.
  #buffer: unknown;
  #owned: (ProtectionDomain | VerbsContext)[];

  /**
   * Wraps a registration (use {@linkcode registerMemory}).
   *
   * @param region The verbs region.
   * @param path How it was registered.
   * @param buffer The JS object holding the memory.
   * @param owned A domain and context this region opened and frees.
   */
  constructor(
    region: MemoryRegion,
    path: RegistrationPath,
    buffer: unknown,
    owned: (ProtectionDomain | VerbsContext)[],
  ) {
    this.region = region;
    this.path = path;
    this.address = region.address;
    this.length = region.length;
    this.lkey = region.lkey;
    this.rkey = region.rkey;
    this.#buffer = buffer;
    this.#owned = owned;
  }

  /**
   * Deregisters the region, frees the domain and device it opened (if any), and lets the buffer go.
   *
   * @throws {IbverbsError} If deregistration fails.
   */
  [Symbol.dispose](): void {
    try {
      this.region.close();
    } finally {
      for (const o of this.#owned.splice(0)) o.close();
      this.#buffer = undefined;
    }
  }
}

function isDeviceMemory(value: unknown): value is DeviceMemory {
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return false;
  const v = value as Record<string, unknown>;
  return "pointer" in v && typeof v.byteLength === "number" && typeof v.device === "number";
}

function accessBits(access: readonly MemoryAccess[]): number {
  let bits = 0;
  for (const a of access) {
    const bit = ACCESS_BITS[a];
    if (bit === undefined) {
      throw new TypeError(
        `Expected an access in ${Object.keys(ACCESS_BITS).join(", ")}, found ${JSON.stringify(a)}`,
      );
    }
    bits |= bit;
  }
  if (bits & (IBV_ACCESS.REMOTE_WRITE | IBV_ACCESS.REMOTE_ATOMIC)) bits |= IBV_ACCESS.LOCAL_WRITE;
  return bits;
}

function mib(bytes: number): string {
  return bytes >= 1 << 20 ? `${bytes} bytes (${(bytes / (1 << 20)).toFixed(1)} MiB)` : `${bytes} bytes`;
}

/**
 * Registers memory with an RDMA device.
 *
 * @param buffer Host memory (TypedArray, DataView, ArrayBuffer) or GPU memory ({@linkcode DeviceMemory}).
 * @param options Access, protection domain or device.
 * @returns The region; dispose it to deregister.
 * @throws {TypeError | RangeError} If `buffer` or `access` is not valid, or the buffer is empty.
 * @throws {NoRdmaDeviceError} If there is no RDMA device; the message says what was being registered.
 * @throws {GpuDirectUnavailableError} For GPU memory, if neither dma-buf nor the peer-memory module works;
 * the message lists each missing prerequisite.
 * @throws {IbverbsError | CudaError} If a call fails.
 * @throws {LibraryNotFoundError} If libibverbs is not installed.
 * @example Registering a receive ring for remote writes
 * ```ts
 * import { rdmaDevices, registerMemory } from "./register.ts";
 * import { DistError } from "../../core/errors.ts";
 * import assert from "node:assert/strict";
 * const ring = new Uint8Array(4 << 20);
 * if (rdmaDevices().devices.some((d) => d.ports.some((p) => p.state === "ACTIVE"))) {
 *   using region = registerMemory(ring, { access: ["remote-write"] });
 *   assert.equal(region.length, ring.byteLength);
 * } else {
 *   assert.throws(() => registerMemory(ring, { access: ["remote-write"] }), DistError);
 * }
 * assert.throws(() => registerMemory(new Uint8Array(0)), RangeError); // checked before any device is opened
 * ```
 */
export function registerMemory(
  buffer: RegisterableMemory,
  options: RegisterMemoryOptions = {},
): RegisteredMemory {
  const device = isDeviceMemory(buffer);
  if (!device && !(buffer instanceof ArrayBuffer) && !ArrayBuffer.isView(buffer)) {
    throw new TypeError(
      "Expected a TypedArray, DataView, ArrayBuffer or device buffer ({ pointer, byteLength, device }), " +
        `found ${Object.prototype.toString.call(buffer)}`,
    );
  }
  const bytes = buffer.byteLength;
  if (!Number.isSafeInteger(bytes) || bytes < 1) {
    throw new RangeError(`Expected at least 1 byte to register, found ${bytes}`);
  }
  const access = accessBits(options.access ?? ["local-write"]);
  const what = device
    ? `Cannot register ${mib(bytes)} of GPU memory (CUDA device ${(buffer as DeviceMemory).device})`
    : `Cannot register ${mib(bytes)} of host memory`;
  const owned: (ProtectionDomain | VerbsContext)[] = [];
  let pd = options.pd;
  try {
    if (pd === undefined) {
      const context = openDevice(options.device);
      owned.unshift(context);
      pd = context.allocPd();
      owned.unshift(pd);
    }
    const region = device ? registerGpu(pd, buffer as DeviceMemory, access, what) : {
      region: pd.registerHost(buffer as ArrayBufferView | ArrayBuffer, access),
      path: "host" as const,
    };
    return new RegisteredMemory(region.region, region.path, buffer, owned);
  } catch (error) {
    for (const o of owned) {
      try {
        o.close();
      } catch {
        // The first failure is the one to report.
      }
    }
    if (error instanceof NoRdmaDeviceError) {
      const gpu = device ? ` (GPUDirect: ${gpuDirectSummary((buffer as DeviceMemory).device)})` : "";
      throw new NoRdmaDeviceError(`${what}: ${error.message}${gpu}`, { errno: error.errno, cause: error });
    }
    throw error;
  }
}

function gpuDirectSummary(ordinal: number): string {
  const facts = gatherFacts(undefined);
  const { path, missing } = decideGpuPath(facts, ordinal);
  return path === "none" ? missing.join("; ") : `${path} would be used`;
}

function registerGpu(
  pd: ProtectionDomain,
  memory: DeviceMemory,
  access: number,
  what: string,
): { region: MemoryRegion; path: RegistrationPath } {
  const address = memory.pointer === null ? 0n : Deno.UnsafePointer.value(memory.pointer);
  if (address === 0n) throw new TypeError(`${what}: its pointer is NULL`);
  const { path, missing } = decideGpuPath(gatherFacts(pd), memory.device);
  if (path === "none") {
    throw new GpuDirectUnavailableError(`${what}: GPUDirect RDMA is not available here`, missing);
  }
  if (path === "peer-memory") {
    return { region: pd.registerAddress(address, memory.byteLength, access, memory), path };
  }
  // dma-buf: export the page-aligned range that covers the buffer, register the buffer's part of it.
  const page = BigInt(pageSize());
  const start = address - (address % page);
  const end = address + BigInt(memory.byteLength);
  const alignedEnd = (end + page - 1n) / page * page;
  const fd = exportDmaBuf(memory.device, start, Number(alignedEnd - start));
  try {
    const region = pd.registerDmaBuf(
      { fd, offset: address - start, length: memory.byteLength, iova: address, keepAlive: memory },
      access,
    );
    return { region, path };
  } finally {
    closeFd(fd);
  }
}

/**
 * GPU memory cannot be registered here: neither dma-buf nor the peer-memory module works.
 *
 * @example Its list of what is missing
 * ```ts
 * import { GpuDirectUnavailableError, UnsupportedError } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * const error = new GpuDirectUnavailableError("Cannot register 1048576 bytes of GPU memory", [
 *   "peer-memory: no peer-memory module is loaded",
 * ]);
 * assert.ok(error instanceof UnsupportedError);
 * assert.equal(error.code, "GPUDIRECT_UNAVAILABLE");
 * assert.equal(error.message, "Cannot register 1048576 bytes of GPU memory:\n  - peer-memory: no peer-memory module is loaded");
 * assert.deepEqual(error.missing, ["peer-memory: no peer-memory module is loaded"]);
 * ```
 */
export class GpuDirectUnavailableError extends UnsupportedError {
  /** Each missing prerequisite, in words. */
  readonly missing: readonly string[];
  /**
   * Creates the error.
   *
   * @param message What could not be registered.
   * @param missing Each missing prerequisite; the message lists them.
   */
  constructor(message: string, missing: readonly string[]) {
    super(`${message}:\n  - ${missing.join("\n  - ")}`, { code: "GPUDIRECT_UNAVAILABLE" });
    this.missing = missing;
  }
}

function readText(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path).trim();
  } catch {
    return undefined;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message.split("\n")[0] : String(error);
}

/** Gathers the GPUDirect facts; probes the kernel with `pd`, or with a device it opens, when it can. */
function gatherFacts(pd: ProtectionDomain | undefined): GpuDirectFacts & { rdmaDevice: string | undefined } {
  let peerMemory: GpuDirectFacts["peerMemory"];
  for (const file of PEER_MEMORY_FILES) {
    const version = readText(file);
    if (version !== undefined) {
      peerMemory = { file, version };
      break;
    }
  }
  const libraryProblem = ibverbsMissing();
  const rdmaCoreDmaBuf = libraryProblem === undefined && ibverbs().ibv_reg_dmabuf_mr !== null;
  let kernelDmaBuf: GpuDirectFacts["kernelDmaBuf"] = "not probed";
  let kernelDetail = "";
  let rdmaDevice: string | undefined;
  if (libraryProblem !== undefined) {
    kernelDetail = `not probed: ${libraryProblem.split("\n")[0]}`;
  } else if (!rdmaCoreDmaBuf) {
    kernelDmaBuf = "unsupported";
    kernelDetail = "libibverbs has no ibv_reg_dmabuf_mr";
  } else {
    try {
      const probe = (domain: ProtectionDomain): void => {
        const { result, errno } = domain.probeDmaBuf();
        kernelDmaBuf = result;
        rdmaDevice = domain.context.device.name;
        kernelDetail = `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) on ${rdmaDevice} ` +
          (errno === 0 ? "succeeded" : `failed with errno ${errno}`) +
          (result === "supported" ? " (EBADF: supported)" : result === "unsupported" ? " (unsupported)" : "");
      };
      if (pd !== undefined) probe(pd);
      else {
        using context = openDevice();
        using domain = context.allocPd();
        probe(domain);
      }
    } catch (error) {
      kernelDetail = `not probed: ${describe(error)}`;
    }
  }
  let version: number | undefined;
  let driverProblem: string | undefined;
  const gpus: { ordinal: number; dmaBuf: boolean; gpuDirectRdma: boolean }[] = [];
  try {
    version = driverVersion();
    for (let ordinal = 0; ordinal < deviceCount(); ordinal++) {
      gpus.push({
        ordinal,
        dmaBuf: deviceAttribute(ordinal, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) === 1,
        gpuDirectRdma: deviceAttribute(ordinal, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED) === 1,
      });
    }
  } catch (error) {
    driverProblem = error instanceof LibraryNotFoundError
      ? "libcuda.so.1 not found: no NVIDIA driver"
      : describe(error);
  }
  return {
    peerMemory,
    rdmaCoreDmaBuf,
    kernelDmaBuf,
    kernelDetail,
    driverVersion: version,
    driverProblem,
    gpus,
    rdmaDevice,
  };
}

/** What {@linkcode gpuDirectStatus} reports. */
export interface GpuDirectStatus {
  /** The path GPU memory of GPU 0 (or the GPU asked about) would take. */
  readonly path: GpuRegistrationPath;
  /** The peer-memory module: the file found and its version, or `undefined`. */
  readonly peerMemory: { readonly file: string; readonly version: string } | undefined;
  /** The dma-buf path's prerequisites. */
  readonly dmaBuf: {
    /** Whether libibverbs has `ibv_reg_dmabuf_mr` (rdma-core 34+). */
    readonly rdmaCore: boolean;
    /** NCCL's kernel probe result. */
    readonly kernel: "supported" | "unsupported" | "unknown" | "not probed";
    /** The probe in words. */
    readonly kernelDetail: string;
    /** The CUDA driver's version (13000 for 13.0), if the driver is usable. */
    readonly driverVersion: number | undefined;
    /** Why the CUDA driver is unusable, if it is. */
    readonly driverProblem: string | undefined;
  };
  /** Per GPU: dma-buf and GPUDirect RDMA attributes. */
  readonly gpus: readonly {
    readonly ordinal: number;
    readonly dmaBuf: boolean;
    readonly gpuDirectRdma: boolean;
  }[];
  /** The RDMA device the kernel probe used, if any. */
  readonly rdmaDevice: string | undefined;
  /** Each unmet prerequisite, in words. */
  readonly missing: readonly string[];
}

/** Options of {@linkcode gpuDirectStatus}. */
export interface GpuDirectStatusOptions {
  /** The GPU whose registration path is reported. @default {0} */
  gpu?: number;
}

/**
 * Probes the GPUDirect RDMA prerequisites as NCCL does: the peer-memory module's sysfs files; for dma-buf,
 * `ibv_reg_dmabuf_mr` in libibverbs, the kernel probe `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)` on the first
 * RDMA device (EBADF: supported; EOPNOTSUPP/EPROTONOSUPPORT: not), the CUDA driver's version (11.7+) and
 * each GPU's `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`. Never throws.
 *
 * @param options The GPU to decide for.
 * @returns What was found and the path registration would take.
 * @example Printing it
 * ```ts
 * import { gpuDirectStatus } from "./register.ts";
 * const status = gpuDirectStatus(); // never throws
 * console.log(`GPUDirect RDMA: ${status.path}`, status.missing);
 * ```
 */
export function gpuDirectStatus(options: GpuDirectStatusOptions = {}): GpuDirectStatus {
  const facts = gatherFacts(undefined);
  const { path, missing } = decideGpuPath(facts, options.gpu ?? 0);
  return {
    path,
    peerMemory: facts.peerMemory,
    dmaBuf: {
      rdmaCore: facts.rdmaCoreDmaBuf,
      kernel: facts.kernelDmaBuf,
      kernelDetail: facts.kernelDetail,
      driverVersion: facts.driverVersion,
      driverProblem: facts.driverProblem,
    },
    gpus: facts.gpus,
    rdmaDevice: facts.rdmaDevice,
    missing,
  };
}

/**
 * One port, as {@linkcode rdmaDevices} reports it.
 *
 * @example The active ports of every device
 * ```ts
 * import { type RdmaPortSummary, rdmaDevices } from "@dcomm/dcomm/rdma";
 * const active: RdmaPortSummary[] = rdmaDevices().devices.flatMap((d) => d.ports)
 *   .filter((p) => p.state === "ACTIVE");
 * console.log(active.map((p) => `port ${p.port}: ${p.linkLayer}, MTU ${p.mtu}, GID ${p.gid0}`));
 * ```
 */
export interface RdmaPortSummary {
  /** The port number. */
  readonly port: number;
  /** `"ACTIVE"`, `"DOWN"`, ... */
  readonly state: string;
  /** `"InfiniBand"`, `"Ethernet"` (RoCE) or `"unspecified"`. */
  readonly linkLayer: string;
  /** The LID (InfiniBand). */
  readonly lid: number;
  /** The active MTU in bytes. */
  readonly mtu: number;
  /** GID index 0, formatted. */
  readonly gid0: string | undefined;
}

/**
 * One device, as {@linkcode rdmaDevices} reports it.
 *
 * @example A line per device
 * ```ts
 * import { type RdmaDeviceSummary, rdmaDevices } from "@dcomm/dcomm/rdma";
 * const line = (d: RdmaDeviceSummary): string =>
 *   d.problem ? `${d.name}: ${d.problem}` : `${d.name} (firmware ${d.firmware}): ${d.ports.length} port(s)`;
 * rdmaDevices().devices.forEach((d) => console.log(line(d)));
 * ```
 */
export interface RdmaDeviceSummary extends RdmaDeviceInfo {
  /** Firmware version, when the device could be queried. */
  readonly firmware: string | undefined;
  /** Its ports. */
  readonly ports: readonly RdmaPortSummary[];
  /** Why it could not be opened or queried, if so. */
  readonly problem: string | undefined;
}

/**
 * What {@linkcode rdmaDevices} reports.
 *
 * @example Is there an RDMA device here?
 * ```ts
 * import { type RdmaDevicesSummary, rdmaDevices } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * const summary: RdmaDevicesSummary = rdmaDevices(); // never throws
 * if (summary.devices.length) console.log(`libibverbs at ${summary.library}`);
 * else console.log(`No RDMA here: ${summary.problem}`);
 * assert.equal(summary.devices.length === 0, summary.problem !== undefined);
 * ```
 */
export interface RdmaDevicesSummary {
  /** Where libibverbs was loaded from, or `undefined` if it was not found. */
  readonly library: string | undefined;
  /** The devices (empty when there are none). */
  readonly devices: readonly RdmaDeviceSummary[];
  /** Why there are no devices (the library missing, or `ibv_get_device_list`'s answer), if so. */
  readonly problem: string | undefined;
}

const STATE_NAMES = Object.fromEntries(Object.entries(IBV_PORT_STATE).map(([k, v]) => [v, k]));
const LINK_NAMES: Record<number, string> = {
  [IBV_LINK_LAYER.INFINIBAND]: "InfiniBand",
  [IBV_LINK_LAYER.ETHERNET]: "Ethernet",
  [IBV_LINK_LAYER.UNSPECIFIED]: "unspecified",
};

function summarise(info: RdmaDeviceInfo): RdmaDeviceSummary {
  try {
    using context = openDevice(info.name);
    const attributes = context.queryDevice();
    const ports: RdmaPortSummary[] = [];
    for (let port = 1; port <= attributes.physPortCount; port++) {
      const p = context.queryPort(port);
      let gid0: string | undefined;
      try {
        gid0 = formatGid(context.queryGid(port, 0));
      } catch {
        gid0 = undefined;
      }
      ports.push({
        port,
        state: STATE_NAMES[p.state] ?? String(p.state),
        linkLayer: LINK_NAMES[p.linkLayer] ?? String(p.linkLayer),
        lid: p.lid,
        mtu: 128 << p.activeMtu,
        gid0,
      });
    }
    return { ...info, firmware: attributes.firmware, ports, problem: undefined };
  } catch (error) {
    return { ...info, firmware: undefined, ports: [], problem: describe(error) };
  }
}

/**
 * Summarises the RDMA devices and their ports, or says why there are none. Never throws.
 *
 * @returns The library path, the devices, and the problem if there are none.
 * @example Printing it
 * ```ts
 * import { rdmaDevices } from "@dcomm/dcomm/rdma";
 * const { devices, problem } = rdmaDevices(); // never throws
 * console.log(problem ?? devices.map((d) => `${d.name}: ${d.ports.map((p) => p.state).join(", ")}`));
 * ```
 */
export function rdmaDevices(): RdmaDevicesSummary {
  const missing = ibverbsMissing();
  if (missing !== undefined) return { library: undefined, devices: [], problem: missing };
  const library = ibverbsPath();
  try {
    const devices = listDevices().map(summarise);
    return {
      library,
      devices,
      problem: devices.length === 0 ? EMPTY_DEVICE_LIST : undefined,
    };
  } catch (error) {
    return { library, devices: [], problem: describe(error) };
  }
}
