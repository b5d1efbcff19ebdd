/**
 * The store server of `bench/init.ts`, in a process of its own (as rank 0's or the launcher's would be):
 * `deno run -A bench/_init_store_server.ts <maxConnections> <secret>`. Prints its port, then serves until
 * killed; the bench reads its RSS from `/proc`.
 *
 * @module
 */
import { TcpStoreServer } from "../store/tcp_store_server.ts";

const [max, secret] = Deno.args;
const server = await TcpStoreServer.listen({
  secret: secret ?? "",
  maxConnections: Number(max),
  maxWaiters: Number(max) * 4,
  log: () => {},
});
console.log(server.port);
