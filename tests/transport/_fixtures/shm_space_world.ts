/**
 * A world of shared-memory ranks in this process, for the `/dev/shm` space tests, run (in a mount
 * namespace with a small tmpfs on /dev/shm) as
 * `deno run -A shm_space_world.ts <size> <ringBytes> <segment: none|default> <fitSegment: 0|1>`.
 * It connects every rank (with the default 300 s timeout: a peer that waits for it fails the test) and
 * prints one JSON line: how each rank's connect ended (after how many ms), the lines logged, the layout of
 * the segment each connected rank got, and what is left in /dev/shm once all ended.
 *
 * @module
 */
import { MemoryStore } from "../../../store/memory_store.ts";
import { ShmTransport } from "../../../transport/shm.ts";
import { DEFAULT_SEGMENT_LAYOUT } from "../../../transport/segment.ts";

const [sizeArg, ringArg, segmentArg, fitArg] = Deno.args;
const size = Number(sizeArg);
const logs: string[] = [];
await using store = new MemoryStore();
const start = performance.now();
const results = await Promise.all(
  Array.from({ length: size }, (_, rank) =>
    ShmTransport.connect(store, {
      rank,
      size,
      ringBytes: Number(ringArg),
      segment: segmentArg === "default" ? DEFAULT_SEGMENT_LAYOUT : undefined,
      fitSegment: fitArg !== "0",
      log: (line) => logs.push(line),
    }).then(
      async (transport) => {
        const layout = transport.segment?.layout ?? null;
        transport.segment?.close();
        await transport.close();
        return { rank, ok: true, layout, ms: performance.now() - start };
      },
      (error: Error & { peer?: number }) => ({
        rank,
        ok: false,
        name: error.name,
        message: error.message,
        peer: error.peer,
        ms: performance.now() - start,
      }),
    )),
);
const left = [...Deno.readDirSync("/dev/shm")].map((entry) => entry.name);
console.log(JSON.stringify({ results, logs, left }));
