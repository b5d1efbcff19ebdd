/**
 * The communication thread of a CPU rank: a module Worker that connects the transport, then runs the
 * engine for the main thread's calls. Its own event loop keeps the sockets and rings moving while the
 * main thread computes.
 *
 * @module
 */
import { setPhases } from "../../core/phases.ts";
import { Heartbeat } from "./_heartbeat.ts";
import { type MessagePort, parentPort } from "node:worker_threads";
import { DistError } from "../../core/errors.ts";
import { openStore } from "../_rendezvous.ts";
import { PrefixStore } from "../../store/prefix_store.ts";
import type { Store } from "../../store/store.ts";
import type { Transport } from "../../transport/transport.ts";
import { Engine } from "./engine.ts";
import { kernels } from "../../wasm/kernels.ts";
import { Reducer } from "./_reducer.ts";
import type { EngineConfig, FromEngine, ToEngine } from "./_protocol.ts";
import { fromWire, toWire } from "../../core/wire_error.ts";
import { connectTransport } from "./_connect.ts";
import { CompletionWriter } from "./_completions.ts";
import { decodeRequest, InOrder, RequestReader } from "./_requests.ts";
import type { OpRequest } from "./_protocol.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";
import { ShmTransport } from "../../transport/shm.ts";
import { SegmentExecutor } from "./_segment_exec.ts";

// A node:worker_threads Worker, so that the main thread can unref it while no call is pending.
const port = parentPort as MessagePort;

function post(message: FromEngine): void {
  port.postMessage(message);
}

let engine: Engine | undefined;
let store: Store | undefined;
/** This rank's heartbeat in the store, once connected. */
let heartbeat: Heartbeat | undefined;
let transport: Transport | undefined;
let completions: CompletionWriter | undefined;
let requests: RequestReader | undefined;
let segment: SegmentExecutor | undefined;
/** Calls, groups and close, in the main thread's order, whether they came by message or by the ring. */
const order = new InOrder();
/** The staging buffers by number, for the ring's calls. */
const buffers = new Map<number, SharedArrayBuffer>();

async function start(config: EngineConfig): Promise<void> {
  setPhases(config.phases === true);
  const client = await openStore(config.store, config.timeoutMs);
  store = new PrefixStore(config.prefix, client);
  completions = config.completions ? new CompletionWriter(config.completions) : undefined;
  const connected = await connectTransport(store, config);
  transport = connected.transport;
  const k = await kernels();
  const shared = transport instanceof ShmTransport ? transport.segment : undefined;
  segment = shared === undefined ? undefined : new SegmentExecutor(shared, k);
  engine = new Engine(transport, new Reducer(k, config.size), {
    chunkBytes: config.chunkBytes,
    checkCalls: config.checkCalls,
    segment,
    segmentSpinMs: config.segmentSpinMs,
    hosts: connected.hosts,
  });
  // The engine's failure (its reaction to the transport's runs first): a peer's mismatch stays one.
  transport.failed.then((e) => post({ type: "failed", error: toWire(engine?.failure ?? e) }));
  if (config.requests) {
    requests = new RequestReader(config.requests);
    requests.run((record) =>
      order.arrive(
        record[0],
        () => run(decodeRequest(record, ALGORITHM_NAMES, (id) => buffers.get(id) as SharedArrayBuffer)),
      )
    );
  }
  const beat = config.heartbeatMs ?? 500;
  if (beat > 0 && config.size > 1) heartbeat = new Heartbeat(store, config.rank, config.size, beat);
  post({ type: "ready", transport: transport.kind, hosts: connected.hosts, segment: shared?.address });
}

async function close(): Promise<void> {
  requests?.stop();
  heartbeat?.stop();
  try {
    await engine?.close();
  } catch {
    // The engine already reported its failure; closing must still release everything.
  }
  try {
    await transport?.close();
    await store?.[Symbol.asyncDispose]();
  } finally {
    segment?.close();
    segment?.segment.close();
    post({ type: "closed" });
  }
}

/** Runs a call on the engine and reports how it ended. */
function run(op: OpRequest): void {
  const { id } = op;
  if (!engine) {
    post({ type: "error", id, error: toWire(new DistError("The communication thread is not connected")) });
    return;
  }
  engine.submit(op).then(
    (report) => {
      // The ring wakes the main thread sooner than a message; a message when it is full.
      const algorithm = ALGORITHM_NAMES.indexOf(report.algorithm);
      if (algorithm >= 0 && completions?.write({ ...report, id, algorithm })) return;
      post({ type: "done", id, report });
    },
    (e) => post({ type: "error", id, error: toWire(e) }),
  );
}

port.on("message", (msg: ToEngine): void => {
  switch (msg.type) {
    case "init":
      start(msg.config).catch((e) => post({ type: "failed", error: toWire(e) }));
      break;
    case "op":
      order.arrive(msg.op.id, () => run(msg.op));
      break;
    case "buffer":
      buffers.set(msg.id, msg.buffer);
      break;
    case "group":
      order.arrive(msg.seq, () => engine?.addGroup(msg.id, msg.ranks));
      break;
    case "cancel":
      engine?.cancel(msg.id, msg.reason);
      break;
    case "abort":
      // The main thread failed a call it ran itself (through the segment): fail the world as the engine
      // would have.
      engine?.abort(fromWire(msg.error));
      break;
    case "close":
      order.arrive(msg.seq, () => close());
      break;
  }
});
