/**
 * A rank of `tests/backend/pmi_test.ts`, run under MPICH's `mpiexec`: finds the rendezvous store through
 * the launcher's PMI (`pmiStoreAddress`, with rank 0 serving a real `TcpStoreServer`) and prints
 * `RESULT {json}`. Cases (the first argument):
 *
 * - `address`: every rank connects to the address it got and publishes its rank; each reads all ranks'.
 * - `twice`: two rendezvous one after the other (two stores, two keys), each used as in `address`.
 * - `then-mpi`: the rendezvous, then the mpi backend in the same process (`MPI_Init` speaks PMI on the same
 *   socket), an all-reduce of rank + 1, and its close (`MPI_Finalize`).
 * - `mpi-first`: the mpi backend first, a rendezvous while MPI is initialised, the all-reduce, the close
 *   (`MPI_Finalize` closes the socket), and one more rendezvous, which must fail saying why.
 * - `serve-fails`: rank 0's `serve` throws; every rank reports the error it got.
 * - `straggler`: the last rank never joins; the others report their timeout (after 3 s) by a file in
 *   `$PMI_TEST_DIR`, which the last rank waits for before it ends.
 *
 * @module
 */
import { type PmiStoreAddress, pmiStoreAddress, type PmiStoreAddressOptions } from "../../../backend/_pmi.ts";
import { isLoopback } from "../../../backend/env.ts";
import { TcpStore } from "../../../store/tcp_store.ts";
import { TcpStoreServer } from "../../../store/tcp_store_server.ts";
import { generateSecret } from "../../../store/secret.ts";

/** What a rank prints. */
export interface PmiRankResult {
  /** PMI_RANK. */
  rank: number;
  /** The addresses it got, one per rendezvous. */
  addresses: PmiStoreAddress[];
  /** Per rendezvous, every rank's number as read back from the store (proof that all reached one store). */
  seen: number[][];
  /** The error's name and message, if the rendezvous failed. */
  error?: { name: string; message: string; code?: string };
  /** The mpi backend's all-reduce of rank + 1 (`then-mpi`). */
  mpiSum?: number;
  /** The mpi backend's world size (`then-mpi`). */
  mpiSize?: number;
}

const env = Deno.env.toObject();
const rank = Number(env["PMI_RANK"]);
const size = Number(env["PMI_SIZE"]);
const mode = Deno.args[0] ?? "address";
const result: PmiRankResult = { rank, addresses: [], seen: [] };

/** One rendezvous: the address, then every rank's number through the store at it. */
async function rendezvous(round: number, options: PmiStoreAddressOptions = {}): Promise<void> {
  let server: TcpStoreServer | undefined;
  let address: PmiStoreAddress | undefined;
  try {
    // As the rendezvous does: rank 0 makes the store's secret and publishes it with the address.
    const secret = rank === 0 ? generateSecret() : undefined;
    address = await pmiStoreAddress(env, async (hostname) => {
      server = await TcpStoreServer.listen({
        hostname: isLoopback(hostname) ? "127.0.0.1" : "0.0.0.0",
        port: 0,
        secret,
      });
      return server.port;
    }, { timeoutMs: 60_000, secret, ...options });
  } catch (e) {
    // The store rank 0 started is the caller's to close when the rendezvous fails after it.
    await server?.close();
    throw e;
  }
  if (address === undefined) throw new Error("Expected an address under mpiexec, found undefined");
  result.addresses.push(address);
  await using store = await TcpStore.connect({ ...address, timeoutMs: 30_000 });
  await store.set(`rank/${round}/${rank}`, String(rank));
  const keys = Array.from({ length: size }, (_, r) => `rank/${round}/${r}`);
  await store.wait(keys);
  const seen: number[] = [];
  for (const key of keys) seen.push(Number(new TextDecoder().decode(await store.get(key))));
  result.seen.push(seen);
  // Rank 0 serves: it stops only once every rank has read.
  await store.set(`done/${round}/${rank}`, "1");
  if (server) {
    await store.wait(Array.from({ length: size }, (_, r) => `done/${round}/${r}`));
    await server.close();
  }
}

function report(e: unknown): void {
  result.error = e instanceof Error
    ? { name: e.name, message: e.message, code: (e as { code?: string }).code }
    : { name: "unknown", message: String(e) };
}

if (mode === "address") {
  await rendezvous(0);
} else if (mode === "twice") {
  await rendezvous(0);
  await rendezvous(1);
} else if (mode === "then-mpi") {
  await rendezvous(0);
  const { init } = await import("../../../backend/init.ts");
  const pg = await init({ backend: "mpi" });
  const x = new Float64Array([rank + 1]);
  await pg.allReduce(x);
  result.mpiSum = x[0];
  result.mpiSize = pg.size;
  await pg.close();
} else if (mode === "mpi-first") {
  const { init } = await import("../../../backend/init.ts");
  const pg = await init({ backend: "mpi" });
  await rendezvous(0);
  const x = new Float64Array([rank + 1]);
  await pg.allReduce(x);
  result.mpiSum = x[0];
  result.mpiSize = pg.size;
  await pg.close();
  try {
    await rendezvous(1);
  } catch (e) {
    report(e);
  }
} else if (mode === "serve-fails") {
  try {
    await pmiStoreAddress(env, () => Promise.reject(new Error("Cannot listen on port 1: in use")), {
      timeoutMs: 60_000,
    });
  } catch (e) {
    report(e);
  }
} else if (mode === "straggler") {
  const dir = env["PMI_TEST_DIR"];
  if (rank === size - 1) {
    // Never joins: waits (at most 60 s) until every other rank has given up.
    const deadline = Date.now() + 60_000;
    const others = Array.from({ length: size - 1 }, (_, r) => `${dir}/${r}`);
    while (Date.now() < deadline && !others.every((f) => exists(f))) {
      await new Promise((r) => setTimeout(r, 50));
    }
  } else {
    try {
      await rendezvous(0, { timeoutMs: 3_000 });
    } catch (e) {
      report(e);
    }
    Deno.writeTextFileSync(`${dir}/${rank}`, "gave up");
  }
} else {
  throw new Error(
    `Unknown case: expected address, twice, then-mpi, mpi-first, serve-fails or straggler, found ${mode}`,
  );
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

console.log("RESULT " + JSON.stringify(result));
