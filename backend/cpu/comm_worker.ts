/**
 * The communication thread of a CPU rank: a module Worker that connects the transport, then runs the
 * engine for the main thread's calls. Its own event loop keeps the sockets and rings moving while the
 * main thread computes.
 *
 * @module
 */
import { type MessagePort, parentPort } from "node:worker_threads";
import { DistError, TransportError } from "../../core/errors.ts";
import { TcpStore } from "../../store/tcp_store.ts";
import { PrefixStore } from "../../store/prefix_store.ts";
import type { Store } from "../../store/store.ts";
import type { Transport } from "../../transport/transport.ts";
import { Engine } from "./engine.ts";
import { kernels } from "../../wasm/kernels.ts";
import { Reducer } from "./_reducer.ts";
import type { EngineConfig, FromEngine, ToEngine, WireError } from "./_protocol.ts";
import { connectTransport } from "./_connect.ts";
import { CompletionWriter } from "./_completions.ts";
import { ALGORITHM_NAMES } from "./_dispatch.ts";

function wire(e: unknown): WireError {
  if (e instanceof Error) {
    return {
      name: e.name,
      message: e.message,
      code: e instanceof DistError ? e.code : undefined,
      peer: e instanceof TransportError ? e.peer : undefined,
    };
  }
  return { name: "Error", message: String(e) };
}

// A node:worker_threads Worker, so that the main thread can unref it while no call is pending.
const port = parentPort as MessagePort;

function post(message: FromEngine): void {
  port.postMessage(message);
}

let engine: Engine | undefined;
let store: Store | undefined;
let transport: Transport | undefined;
let completions: CompletionWriter | undefined;

async function start(config: EngineConfig): Promise<void> {
  const client = await TcpStore.connect({
    hostname: config.store.hostname,
    port: config.store.port,
    secret: config.store.secret,
    timeoutMs: config.timeoutMs,
  });
  store = new PrefixStore(config.prefix, client);
  completions = config.completions ? new CompletionWriter(config.completions) : undefined;
  transport = await connectTransport(store, config);
  const k = await kernels();
  engine = new Engine(transport, new Reducer(k, config.size), {
    chunkBytes: config.chunkBytes,
    checkCalls: config.checkCalls,
  });
  transport.failed.then((e) => post({ type: "failed", error: wire(e) }));
  post({ type: "ready", transport: transport.kind });
}

async function close(): Promise<void> {
  try {
    await engine?.close();
  } catch {
    // The engine already reported its failure; closing must still release everything.
  }
  try {
    await transport?.close();
    await store?.[Symbol.asyncDispose]();
  } finally {
    post({ type: "closed" });
  }
}

port.on("message", (msg: ToEngine): void => {
  switch (msg.type) {
    case "init":
      start(msg.config).catch((e) => post({ type: "failed", error: wire(e) }));
      break;
    case "op": {
      const { id } = msg.op;
      if (!engine) {
        post({ type: "error", id, error: wire(new DistError("The communication thread is not connected")) });
        break;
      }
      engine.submit(msg.op).then(
        (report) => {
          // The ring wakes the main thread sooner than a message; a message when it is full.
          const algorithm = ALGORITHM_NAMES.indexOf(report.algorithm);
          if (algorithm >= 0 && completions?.write({ ...report, id, algorithm })) return;
          post({ type: "done", id, report });
        },
        (e) => post({ type: "error", id, error: wire(e) }),
      );
      break;
    }
    case "group":
      engine?.addGroup(msg.id, msg.ranks);
      break;
    case "cancel":
      engine?.cancel(msg.id, msg.reason);
      break;
    case "close":
      close();
      break;
  }
});
