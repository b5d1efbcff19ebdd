/**
 * A store server in another process: `deno run -A store_server.ts`. It prints its port on the first line
 * of stdout and serves until it is killed.
 *
 * @module
 */
import { TcpStoreServer } from "../../../store/tcp_store_server.ts";

const server = await TcpStoreServer.listen({ secret: "", log: (line) => console.error(line) });
console.log(server.port);
