/**
 * The rendezvous stores (`@dcomm/dcomm/store`), as torch.distributed's: a key-value {@linkcode Store}
 * every rank of a world shares. `init()` makes its own; use these to coordinate anything else across ranks,
 * or to serve a store yourself. {@linkcode TcpStore} connects to a {@linkcode TcpStoreServer} (with a
 * shared secret, `DCOMM_STORE_SECRET`), {@linkcode MemoryStore} serves the threads of one process, and
 * {@linkcode PrefixStore} gives a part of a world a namespace of its own. {@linkcode TorchStore} and
 * {@linkcode TorchStoreServer} speak PyTorch's own `TCPStore` protocol instead (torchrun's agent store, a
 * Python job's `TCPStore`; no secret, as torch's has none).
 *
 * @example A store served and used in one process
 * ```ts
 * import { TcpStore, TcpStoreServer } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * await using server = await TcpStoreServer.listen({ hostname: "127.0.0.1", port: 0 });
 * await using store = await TcpStore.connect({ hostname: "127.0.0.1", port: server.port });
 * await store.set("epoch", "3");
 * assert.equal(new TextDecoder().decode(await store.get("epoch")), "3");
 * ```
 *
 * @module
 */
export type { Store, StoreOptions, StoreValue, StoreWaitOptions } from "./store.ts";
export { MemoryStore, type MemoryStoreOptions } from "./memory_store.ts";
export { PrefixStore, type PrefixStoreOptions } from "./prefix_store.ts";
export { TcpStore, type TcpStoreConnectOptions } from "./tcp_store.ts";
export { TcpStoreServer, type TcpStoreServerOptions } from "./tcp_store_server.ts";
export { TorchStore, type TorchStoreConnectOptions } from "./torch_store.ts";
export { TorchStoreServer, type TorchStoreServerOptions } from "./torch_store_server.ts";
export { generateSecret, secretFromEnv, STORE_INSECURE_ENV, STORE_SECRET_ENV } from "./secret.ts";
