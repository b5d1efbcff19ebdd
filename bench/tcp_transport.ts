/**
 * Throughput of {@linkcode TcpTransport} between two processes on loopback, against raw Deno TCP sockets
 * moving the same bytes (the peer that counts, per docs: "raw TCP for the TCP transport").
 *
 * Each iteration sends one message of `--bytes` from rank 0 to rank 1, which answers with an empty message
 * once every byte is in its view; the time is rank 0's, from send to answer. GB/s = bytes / median time.
 *
 * ```sh
 * deno run -A bench/tcp_transport.ts [--bytes 67108864] [--iters 10] [--sockets 1,2,4]
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { TcpStore } from "../store/tcp_store.ts";
import { TcpStoreServer } from "../store/tcp_store_server.ts";
import { TcpTransport } from "../transport/tcp.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    bytes: { type: "string", default: String(64 << 20) },
    iters: { type: "string", default: "10" },
    sockets: { type: "string", default: "1,2,4" },
    // Internal: how the parent starts the receiving process.
    child: { type: "string" },
    port: { type: "string" },
  },
});
const bytes = Number(values.bytes);
const iters = Number(values.iters);
const WARMUP = 2;
const desc = new Uint8Array(32);

if (values.child === "raw") {
  // Receiver of the raw baseline: read every byte straight into one view, answer one byte.
  const conn = await Deno.connect({ port: Number(values.port) });
  conn.setNoDelay(true);
  const into = new Uint8Array(bytes);
  for (let i = 0; i < WARMUP + iters; i++) {
    let off = 0;
    while (off < bytes) {
      const n = await conn.read(into.subarray(off));
      if (n === null) throw new Error("Raw baseline: the sender closed early");
      off += n;
    }
    await conn.write(new Uint8Array(1));
  }
  conn.close();
} else if (values.child === "transport") {
  await using store = await TcpStore.connect({ port: Number(values.port) });
  for (const sockets of values.sockets.split(",").map(Number)) {
    await using t = await TcpTransport.connect(store, {
      rank: 1,
      size: 2,
      socketsPerPeer: sockets,
      prefix: `s${sockets}/`,
    });
    const into = new Uint8Array(bytes);
    for (let i = 0; i < WARMUP + iters; i++) {
      await t.pair(0).recv(into);
      await t.pair(0).send(desc, new Uint8Array(0));
    }
    await t.pair(0).recv(new Uint8Array(0)); // rank 0 is done with this world before it closes
  }
} else {
  const payload = new Uint8Array(bytes).fill(0x5a);
  const rows: string[] = [];
  const report = (what: string, times: number[]): void => {
    const median = times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
    rows.push(
      `${what.padEnd(26)} ${String(bytes).padStart(10)} ${median.toFixed(2).padStart(9)} ${
        (bytes / median / 1e6).toFixed(2).padStart(6)
      } ${(bytes / times[0] / 1e6).toFixed(2).padStart(6)}`,
    );
  };
  const spawn = (mode: string, port: number): Deno.ChildProcess =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        import.meta.filename ?? "",
        "--child",
        mode,
        "--port",
        String(port),
        "--bytes",
        String(bytes),
        "--iters",
        String(iters),
        "--sockets",
        values.sockets,
      ],
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();

  // Raw baseline.
  {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const child = spawn("raw", listener.addr.port);
    const conn = await listener.accept();
    conn.setNoDelay(true);
    const ack = new Uint8Array(1);
    const times: number[] = [];
    for (let i = 0; i < WARMUP + iters; i++) {
      const t0 = performance.now();
      let off = 0;
      while (off < bytes) off += await conn.write(payload.subarray(off));
      if (await conn.read(ack) === null) throw new Error("Raw baseline: the receiver closed early");
      if (i >= WARMUP) times.push(performance.now() - t0);
    }
    conn.close();
    listener.close();
    await child.status;
    report("raw Deno TCP", times);
  }

  await using server = await TcpStoreServer.listen();
  await using store = await TcpStore.connect({ port: server.port });
  const child = spawn("transport", server.port);
  for (const sockets of values.sockets.split(",").map(Number)) {
    await using t = await TcpTransport.connect(store, {
      rank: 0,
      size: 2,
      socketsPerPeer: sockets,
      prefix: `s${sockets}/`,
    });
    const ack = new Uint8Array(0);
    const times: number[] = [];
    for (let i = 0; i < WARMUP + iters; i++) {
      const t0 = performance.now();
      await t.pair(1).send(desc, payload);
      await t.pair(1).recv(ack);
      if (i >= WARMUP) times.push(performance.now() - t0);
    }
    await t.pair(1).send(desc, ack);
    report(`TcpTransport sockets=${sockets}`, times);
  }
  await child.status;
  console.log(
    `${"path".padEnd(26)} ${"bytes".padStart(10)} ${"median ms".padStart(9)} ${"GB/s".padStart(6)} ${
      "best".padStart(6)
    }`,
  );
  for (const row of rows) console.log(row);
}
