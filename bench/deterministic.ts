/**
 * `deno task bench:deterministic`: what deterministic mode costs. The all-reduce sweep (float32 sum) on
 * `--ranks` ranks over `--transport`, deterministic mode timed round by round with the default mode on
 * the same tensors in the same processes (`_deterministic_rank.ts`); the paired ratio is the median over
 * rounds of one's time over the other's, so the machine's drift cancels. Over shared memory both take the
 * host segment (deterministic already: it folds in member order), so the cost shows over TCP, where the
 * default picks the ring (or another) and deterministic mode the `ordered` algorithm. Rows go to
 * `bench/results/deterministic-<transport>.json`.
 *
 * ```sh
 * deno task bench:deterministic --ranks 4 --transport tcp -b 64K -e 16M -f 4 -n 10 -r 5
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { parseBytes } from "./_rows.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    ranks: { type: "string", default: "4" },
    transport: { type: "string", default: "tcp" },
    b: { type: "string", short: "b", default: "64K" },
    e: { type: "string", short: "e", default: "16M" },
    f: { type: "string", short: "f", default: "4" },
    n: { type: "string", short: "n", default: "10" },
    r: { type: "string", short: "r", default: "5" },
    out: { type: "string" },
  },
});
const script = new URL("./_deterministic_rank.ts", import.meta.url).pathname;
const launch = new URL("../cli/launch.ts", import.meta.url).pathname;
const child = new Deno.Command(Deno.execPath(), {
  args: [
    "run",
    "-A",
    launch,
    "--nproc-per-node",
    values.ranks,
    script,
    String(parseBytes(values.b)),
    String(parseBytes(values.e)),
    values.f,
    values.n,
    values.r,
  ],
  env: { DCOMM_TRANSPORT: values.transport },
  stdout: "piped",
  stderr: "inherit",
}).spawn();
let text = "";
for await (const chunk of child.stdout) {
  const s = new TextDecoder().decode(chunk);
  text += s;
  for (const line of s.split("\n")) if (line && !line.includes("RESULTS ")) console.log(line);
}
const status = await child.status;
const rows = /RESULTS (.*)$/m.exec(text)?.[1];
if (rows) {
  const out = values.out ??
    new URL(`./results/deterministic-${values.transport}.json`, import.meta.url).pathname;
  Deno.writeTextFileSync(out, JSON.stringify(JSON.parse(rows), null, 2) + "\n");
  console.log(`# wrote ${out}`);
}
Deno.exit(status.code);
