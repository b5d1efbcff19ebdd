/**
 * One rank of `bench/init.ts`'s ring world: a few ring all-reduces over TCP, then the TCP connections this
 * process holds to its peers, printed as `peer_sockets <n> init_ms <ms>`. A peer socket is an established
 * TCP socket of this process with neither end at the store's port (`MASTER_PORT`): read from
 * `/proc/self/fd` (the process's socket inodes) and `/proc/net/tcp` (every socket's ends and state).
 *
 * @module
 */
import { init } from "../mod.ts";

const t0 = performance.now();
const pg = await init();
const initMs = performance.now() - t0;
for (let i = 0; i < 3; i++) await pg.allReduce(new Float32Array(4096), { algorithm: "ring" });

const inodes = new Set<string>();
for (const entry of Deno.readDirSync("/proc/self/fd")) {
  try {
    const m = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/self/fd/${entry.name}`));
    if (m) inodes.add(m[1]);
  } catch { /* closed meanwhile */ }
}
const storePort = Number(Deno.env.get("MASTER_PORT"));
let peers = 0;
for (const line of Deno.readTextFileSync("/proc/net/tcp").split("\n").slice(1)) {
  const f = line.trim().split(/\s+/);
  if (f.length < 10 || f[3] !== "01" || !inodes.has(f[9])) continue; // 01: ESTABLISHED
  const [local, remote] = [f[1], f[2]].map((a) => parseInt(a.split(":")[1], 16));
  if (local !== storePort && remote !== storePort) peers++;
}
console.log(`peer_sockets ${peers} init_ms ${initMs.toFixed(1)}`);
await pg.close();
