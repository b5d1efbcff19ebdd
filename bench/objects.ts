/**
 * `deno task bench:objects`: the latency of the object collectives (`broadcastObject`, `allGatherObject`,
 * `gatherObject`, `scatterObject`: torch's `broadcast_object_list`, `all_gather_object`, `gather_object`,
 * `scatter_object_list`) for a 1 KiB and a 1 MiB object (a plain object holding a string and a
 * Float32Array, exactly that size serialised; `--sizes` takes others), on 2 and 4 ranks of the cpu backend under
 * dcomm's launcher (`_objects_rank.ts`). Per call and size: `-w` untimed calls, then `-n` calls, each after
 * a barrier and timed alone (the slowest rank's time); the median and the fastest, beside the median of the
 * same collective on a Uint8Array of as many bytes (what serialising, the lengths' round and deserialising
 * add). Every result is checked against the objects sent: `#wrong` counts wrong calls, and any makes the
 * exit code 1. Rows go to `bench/results/objects.json` (`--out`).
 *
 * ```sh
 * deno task bench:objects                      # --ranks 2,4 --sizes 1K,1M -n 50 -w 5
 * deno task bench:objects --ranks 2 -n 20 --transport tcp
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { launch } from "../cli/launch.ts";
import { parseBytes } from "./_rows.ts";
import type { ObjectRow, ObjectsConfig } from "./_objects_rank.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "2,4" },
    sizes: { type: "string", default: "1K,1M" },
    iters: { type: "string", short: "n", default: "50" },
    warmup: { type: "string", short: "w", default: "5" },
    root: { type: "string", short: "r", default: "0" },
    transport: { type: "string", default: "auto" },
    out: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (values.help) {
  console.log(
    `Usage: deno task bench:objects [--ranks 2,4] [--sizes 1K,1M] [-n 50] [-w 5] [-r 0] [--transport auto|shm|tcp]
  [--out bench/results/objects.json]`,
  );
  Deno.exit(0);
}

/** A whole number at least `min`, or a RangeError naming the flag. */
function whole(flag: string, text: string, min: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) {
    throw new RangeError(`Invalid ${flag}: expected a whole number >= ${min}, found "${text}"`);
  }
  return n;
}

const worlds = values.ranks.split(",").map((r) => whole("--ranks", r, 1));
const root = whole("-r", values.root, 0);
const bad = worlds.find((n) => root >= n);
if (bad !== undefined) {
  throw new RangeError(`Invalid -r: expected a root below every --ranks, found ${root} on ${bad}`);
}
const config: ObjectsConfig = {
  sizes: values.sizes.split(",").map(parseBytes),
  iters: whole("-n", values.iters, 1),
  warmup: whole("-w", values.warmup, 0),
  root,
};
const script = new URL("./_objects_rank.ts", import.meta.url).pathname;
const rows: ObjectRow[] = [];
let failed = 0;
for (const ranks of worlds) {
  let found: ObjectRow[] | undefined;
  const result = await launch({
    nprocPerNode: ranks,
    command: [script, JSON.stringify(config)],
    env: values.transport === "auto" ? {} : { DCOMM_TRANSPORT: values.transport },
    write: (line, stream) => {
      const text = line.replace(/^\[rank\d+\]: /, "");
      if (text.startsWith("RESULTS ")) found = JSON.parse(text.slice(8));
      else if (line.startsWith("[rank0]: ") || stream === "stderr") console.log(text);
    },
  });
  if (result.code !== 0) {
    console.error(`bench:objects: ${ranks} ranks exited with code ${result.code}`);
    failed = result.code;
  }
  rows.push(...(found ?? []));
}
const out = values.out ?? new URL("./results/objects.json", import.meta.url).pathname;
Deno.writeTextFileSync(out, JSON.stringify(rows, null, 2) + "\n");
const wrong = rows.reduce((s, r) => s + r.wrong, 0);
console.log(`# ${rows.length} rows, ${wrong} wrong calls; wrote ${out}`);
if (failed !== 0 || wrong > 0 || rows.length === 0) Deno.exit(failed || 1);
