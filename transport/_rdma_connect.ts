/**
 * The connect phase of the RDMA transport: open a device and pick an active port, create the verbs
 * objects (one protection domain, one completion queue with its channel, and per peer a reliable-connected
 * queue pair, a registered receive ring and a registered send staging area), exchange the connection
 * details through the store, bring every queue pair through INIT → RTR → RTS, and wait until every rank is
 * ready to receive. {@linkcode releaseRdma} frees it all in the order libibverbs requires.
 *
 * Store keys (under the caller's prefix): `qp/<from>/<to>`, what rank `from` tells rank `to` (JSON: world
 * size, slots and slot size, LID, GID or null, link layer, MTU, queue pair number, first PSN, and the
 * address and rkey of its receive ring for `to`); `ready/<rank>`, set once all of that rank's queue pairs
 * are ready to send (so no write reaches a queue pair that is not yet ready to receive).
 *
 * @module
 */
import { TimeoutError, TransportError, UnsupportedError } from "../core/errors.ts";
import { IBV_ACCESS, IBV_LINK_LAYER, IBV_PORT_STATE } from "../ffi/ibverbs/layout.ts";
import { NoRdmaDeviceError } from "../ffi/ibverbs/ibverbs.ts";
import {
  type CompletionChannel,
  type CompletionQueue,
  EMPTY_DEVICE_LIST,
  listDevices,
  type MemoryRegion,
  openDevice,
  type PortAttributes,
  type ProtectionDomain,
  type QueuePair,
  type VerbsContext,
} from "../ffi/ibverbs/verbs.ts";
import type { Store } from "../store/store.ts";

/** Bytes at the end of each ring (and each staging area) for an ABORT's reason. */
export const CONTROL_BYTES = 4096;
/** Send requests a pair keeps beyond its data slots: credits (2), a heartbeat, ABORT or CLOSE, spare. */
export const EXTRA_SEND_WR = 8;
/** Receive requests a pair keeps beyond its data slots: the peer's credits, ABORT, CLOSE, spare. */
export const EXTRA_RECV_WR = 8;

/** Everything the connect phase needs, already checked. */
export interface RdmaConnectOptions {
  /** This rank. */
  rank: number;
  /** The number of ranks. */
  size: number;
  /** The device's name, or `undefined` for the first with an active port. */
  device: string | undefined;
  /** The port, or `undefined` for the device's first active one. */
  port: number | undefined;
  /** The GID index; `undefined`: 0 on RoCE, none (LID only) on InfiniBand. */
  gidIndex: number | undefined;
  /** Slots per receive ring. */
  slots: number;
  /** Bytes per slot. */
  slotBytes: number;
  /** The whole phase's deadline. */
  timeoutMs: number;
  /** The store key prefix. */
  prefix: string;
}

/** What one rank publishes for one peer. */
interface Endpoint {
  v: 1;
  rank: number;
  size: number;
  slots: number;
  slotBytes: number;
  lid: number;
  gid: string | null;
  linkLayer: number;
  mtu: number;
  qpn: number;
  psn: number;
  addr: string;
  rkey: number;
}

/** The verbs objects of one peer. */
export interface PeerLink {
  /** The peer's rank. */
  readonly peer: number;
  /** The queue pair to the peer. */
  readonly qp: QueuePair;
  /** Where the peer writes: `slots` slots, then the control area. */
  readonly ring: Uint8Array<ArrayBuffer>;
  /** Its registration. */
  readonly ringMr: MemoryRegion;
  /** Where this rank stages what it writes to the peer: `slots` slots, then the control area. */
  readonly staging: Uint8Array<ArrayBuffer>;
  /** Its registration. */
  readonly stagingMr: MemoryRegion;
  /** The peer's ring for this rank. */
  readonly remoteAddress: bigint;
  /** Its rkey. */
  readonly remoteKey: number;
  /** Send requests the queue pair holds. */
  readonly sendDepth: number;
  /** Receive requests the queue pair holds. */
  readonly recvDepth: number;
}

/** Every verbs object of a connected rank. */
export interface RdmaResources {
  /** The open device. */
  readonly context: VerbsContext;
  /** The port used. */
  readonly port: number;
  /** Its link layer (`IBV_LINK_LAYER.*`). */
  readonly linkLayer: number;
  /** The protection domain. */
  readonly pd: ProtectionDomain;
  /** The completion channel. */
  readonly channel: CompletionChannel;
  /** The one completion queue of every queue pair. */
  readonly cq: CompletionQueue;
  /** One link per peer (`undefined` for this rank). */
  readonly links: readonly (PeerLink | undefined)[];
}

/**
 * Opens the device and port to use: the one named, or the first device with an active port.
 *
 * @throws {NoRdmaDeviceError} If there is no device.
 * @throws {UnsupportedError} If no port is active.
 */
function openPort(
  device: string | undefined,
  port: number | undefined,
): { context: VerbsContext; port: number; attr: PortAttributes } {
  const names = device === undefined ? listDevices().map((d) => d.name) : [device];
  if (names.length === 0) throw new NoRdmaDeviceError(EMPTY_DEVICE_LIST);
  const seen: string[] = [];
  for (const name of names) {
    const context = openDevice(name);
    try {
      const ports = port !== undefined
        ? [port]
        : Array.from({ length: context.queryDevice().physPortCount }, (_, i) => i + 1);
      for (const p of ports) {
        const attr = context.queryPort(p);
        if (attr.state === IBV_PORT_STATE.ACTIVE) return { context, port: p, attr };
        seen.push(`${name} port ${p} is ${stateName(attr.state)}`);
      }
    } catch (error) {
      context.close();
      throw error;
    }
    context.close();
  }
  throw new UnsupportedError(
    `No active RDMA port: ${seen.join(", ") || "no device listed"} (check the cable and the subnet manager)`,
  );
}

function stateName(state: number): string {
  return Object.entries(IBV_PORT_STATE).find(([, v]) => v === state)?.[0] ?? `state ${state}`;
}

function hexBytes(bytes: Uint8Array): string {
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function fromHex(hex: string): Uint8Array {
  return new Uint8Array(hex.match(/../g)?.map((h) => parseInt(h, 16)) ?? []);
}

/**
 * Releases everything made so far, children first (queue pairs, then regions, then the queue, channel,
 * domain and device); every step runs, and the first failure is thrown at the end.
 *
 * @param resources What was made (possibly partly).
 * @throws {IbverbsError} The first failure.
 */
export function releaseRdma(resources: {
  readonly context?: VerbsContext;
  readonly pd?: ProtectionDomain;
  readonly channel?: CompletionChannel;
  readonly cq?: CompletionQueue;
  readonly links?: readonly (Partial<PeerLink> | undefined)[];
}): void {
  const links = resources.links ?? [];
  const steps: (() => void)[] = [
    ...links.map((link) => () => link?.qp?.close()),
    ...links.flatMap((link) => [() => link?.ringMr?.close(), () => link?.stagingMr?.close()]),
    () => resources.cq?.close(),
    () => resources.channel?.close(),
    () => resources.pd?.close(),
    () => resources.context?.close(),
  ];
  let first: unknown;
  for (const step of steps) {
    try {
      step();
    } catch (error) {
      first ??= error;
    }
  }
  if (first !== undefined) throw first;
}

/** Makes one peer's queue pair and memory, and brings the queue pair to INIT. */
function makeLink(
  pd: ProtectionDomain,
  cq: CompletionQueue,
  port: number,
  peer: number,
  options: RdmaConnectOptions,
  made: Partial<PeerLink>[],
): Omit<PeerLink, "remoteAddress" | "remoteKey"> {
  const bytes = options.slots * options.slotBytes + CONTROL_BYTES;
  const partial: Partial<PeerLink> = { peer };
  made.push(partial);
  const sendDepth = options.slots + EXTRA_SEND_WR;
  const recvDepth = options.slots + EXTRA_RECV_WR;
  const ring = new Uint8Array(bytes);
  const staging = new Uint8Array(bytes);
  const ringMr = pd.registerHost(ring, IBV_ACCESS.LOCAL_WRITE | IBV_ACCESS.REMOTE_WRITE);
  Object.assign(partial, { ring, ringMr });
  const stagingMr = pd.registerHost(staging, IBV_ACCESS.LOCAL_WRITE);
  Object.assign(partial, { staging, stagingMr });
  const qp = pd.createQp({
    sendCq: cq,
    maxSendWr: sendDepth,
    maxRecvWr: recvDepth,
    maxSendSge: 1,
    maxRecvSge: 1,
  });
  Object.assign(partial, { qp });
  qp.toInit({ port, access: IBV_ACCESS.LOCAL_WRITE | IBV_ACCESS.REMOTE_WRITE });
  return { peer, qp, ring, ringMr, staging, stagingMr, sendDepth, recvDepth };
}

/**
 * Runs the connect phase.
 *
 * @param store Where the connection details are exchanged.
 * @param options The checked options.
 * @param postReceives Posts the initial receives of a link (called between INIT and RTR).
 * @returns The resources, every queue pair ready to send.
 * @throws {NoRdmaDeviceError | UnsupportedError} If there is no usable device or port.
 * @throws {TimeoutError} If some peer did not publish its details or become ready in time.
 * @throws {TransportError} If a peer runs with other settings.
 * @throws {IbverbsError} If a verbs call fails.
 */
export async function connectRdma(
  store: Store,
  options: RdmaConnectOptions,
  postReceives: (link: Omit<PeerLink, "remoteAddress" | "remoteKey">) => void,
): Promise<RdmaResources> {
  const { rank, size, prefix } = options;
  const deadline = performance.now() + options.timeoutMs;
  const { context, port, attr } = openPort(options.device, options.port);
  const made: Partial<PeerLink>[] = [];
  const resources: {
    context: VerbsContext;
    pd?: ProtectionDomain;
    channel?: CompletionChannel;
    cq?: CompletionQueue;
    links: Partial<PeerLink>[];
  } = { context, links: made };
  try {
    const roce = attr.linkLayer === IBV_LINK_LAYER.ETHERNET;
    const gidIndex = options.gidIndex ?? (roce ? 0 : undefined);
    const gid = gidIndex === undefined ? undefined : context.queryGid(port, gidIndex);
    if (gid !== undefined && gid.every((b) => b === 0)) {
      throw new UnsupportedError(
        `Cannot use GID index ${gidIndex} of ${context.device.name} port ${port}: the entry is empty ` +
          "(choose another with the gidIndex option; show_gids lists them)",
      );
    }
    const pd = context.allocPd();
    resources.pd = pd;
    const channel = context.createCompletionChannel();
    resources.channel = channel;
    const peers = size - 1;
    const cq = context.createCq(Math.max(1, peers * (2 * options.slots + EXTRA_SEND_WR + EXTRA_RECV_WR)), {
      channel,
    });
    resources.cq = cq;
    const links: (Omit<PeerLink, "remoteAddress" | "remoteKey"> | undefined)[] = [];
    for (let peer = 0; peer < size; peer++) {
      if (peer === rank) {
        links.push(undefined);
        continue;
      }
      const link = makeLink(pd, cq, port, peer, options, made);
      postReceives(link);
      links.push(link);
    }
    const psns = links.map(() => crypto.getRandomValues(new Uint32Array(1))[0] & 0xffffff);
    await Promise.all(links.map((link, peer) => {
      if (link === undefined) return undefined;
      const endpoint: Endpoint = {
        v: 1,
        rank,
        size,
        slots: options.slots,
        slotBytes: options.slotBytes,
        lid: attr.lid,
        gid: gid === undefined ? null : hexBytes(gid),
        linkLayer: attr.linkLayer,
        mtu: attr.activeMtu,
        qpn: link.qp.qpNum,
        psn: psns[peer],
        addr: `0x${link.ringMr.address.toString(16)}`,
        rkey: link.ringMr.rkey,
      };
      return store.set(`${prefix}qp/${rank}/${peer}`, JSON.stringify(endpoint));
    }));
    const remotes = await getAll(store, options, deadline, "qp", (peer) => `${prefix}qp/${peer}/${rank}`);
    const finished: (PeerLink | undefined)[] = [];
    for (const [peer, link] of links.entries()) {
      if (link === undefined) {
        finished.push(undefined);
        continue;
      }
      const remote = parseEndpoint(remotes[peer] as Uint8Array, peer, options, attr.linkLayer);
      link.qp.toRtr(
        {
          qpn: remote.qpn,
          psn: remote.psn,
          lid: remote.lid,
          gid: remote.gid === null ? undefined : fromHex(remote.gid),
        },
        { port, mtu: Math.min(remote.mtu, attr.activeMtu), sgidIndex: gidIndex ?? 0 },
      );
      link.qp.toRts({ psn: psns[peer] });
      finished.push({ ...link, remoteAddress: BigInt(remote.addr), remoteKey: remote.rkey });
    }
    await store.set(`${prefix}ready/${rank}`, "1");
    await getAll(store, options, deadline, "ready", (peer) => `${prefix}ready/${peer}`);
    return { context, port, linkLayer: attr.linkLayer, pd, channel, cq, links: finished };
  } catch (error) {
    try {
      releaseRdma(resources);
    } catch {
      // The connect failure is the one to report.
    }
    throw error;
  }
}

/** Waits for one key per peer; on timeout, names the ranks whose key is missing. */
async function getAll(
  store: Store,
  options: RdmaConnectOptions,
  deadline: number,
  what: "qp" | "ready",
  key: (peer: number) => string,
): Promise<(Uint8Array | undefined)[]> {
  const { rank, size } = options;
  const peers = Array.from({ length: size }, (_, p) => p).filter((p) => p !== rank);
  try {
    // One request for every peer's key (a world's N² keys in N requests).
    const values = await store.multiGet(peers.map(key), {
      timeoutMs: Math.max(1, deadline - performance.now()),
    });
    const out: (Uint8Array | undefined)[] = Array(size).fill(undefined);
    peers.forEach((p, i) => out[p] = values[i]);
    return out;
  } catch (error) {
    if (!(error instanceof TimeoutError)) throw error;
    const missing: number[] = [];
    for (const p of peers) if (!(await store.check([key(p)]))) missing.push(p);
    const why = what === "qp" ? "never published its queue pair" : "never became ready";
    throw new TimeoutError(
      `Cannot connect rank ${rank} of ${size} within ${options.timeoutMs} ms: missing rank${
        missing.length === 1 ? "" : "s"
      } ${missing.join(", ")}: rank ${missing[0]} ${why}`,
      { cause: error },
    );
  }
}

function parseEndpoint(
  bytes: Uint8Array,
  peer: number,
  options: RdmaConnectOptions,
  linkLayer: number,
): Endpoint {
  let e: Endpoint;
  try {
    e = JSON.parse(new TextDecoder().decode(bytes));
  } catch (error) {
    throw new TransportError(`Rank ${peer} published malformed RDMA connection details`, {
      peer,
      cause: error,
    });
  }
  const { rank, size, slots, slotBytes } = options;
  const differ = (what: string, theirs: unknown, ours: unknown): TransportError =>
    new TransportError(`Rank ${peer} runs with ${what} ${theirs} but rank ${rank} with ${ours}`, { peer });
  if (e.v !== 1 || e.rank !== peer) {
    throw new TransportError(`Rank ${peer} published RDMA connection details of another version or rank`, {
      peer,
    });
  }
  if (e.size !== size) throw differ("a world of", `${e.size} ranks`, size);
  if (e.slots !== slots) throw differ("slots", e.slots, slots);
  if (e.slotBytes !== slotBytes) throw differ("slotBytes", e.slotBytes, slotBytes);
  if (e.linkLayer !== linkLayer) {
    throw differ("link layer", linkName(e.linkLayer), linkName(linkLayer));
  }
  return e;
}

function linkName(layer: number): string {
  return layer === IBV_LINK_LAYER.ETHERNET
    ? "Ethernet (RoCE)"
    : layer === IBV_LINK_LAYER.INFINIBAND
    ? "InfiniBand"
    : `${layer}`;
}
