/**
 * A rank in another process: `deno run -A store_client.ts <port> <rank>`. It connects (secret from
 * DCOMM_STORE_SECRET), counts itself in, announces itself, waits for "go" and reports done. Any failure
 * is an uncaught error, so the process exits non-zero.
 *
 * @module
 */
import { TcpStore } from "../../../store/tcp_store.ts";

const [port, rank] = Deno.args.map(Number);
await using store = await TcpStore.connect({ port, timeoutMs: 10_000 });
await store.add("arrived", 1);
await store.set(`rank/${rank}`, `pid ${Deno.pid}`);
await store.get("go");
await store.set(`done/${rank}`, "ok");
