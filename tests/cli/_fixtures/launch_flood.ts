/**
 * A rank that floods its stdout without a newline, as a progress bar does: `bar` writes `MiB` MiB of `#`
 * with no line break at all; `progress` writes the same bytes as `\r`-separated updates of 100 `#`. Then it
 * prints `WROTE <bytes> <ms>` on stderr (how long its writes were blocked by the reader).
 *
 * @module
 */
const [mode, mib] = Deno.args;
const total = Number(mib ?? "32") << 20;
const chunk = new Uint8Array(64 << 10).fill(0x23); // "#"
if (mode === "progress") { for (let i = 99; i < chunk.length; i += 100) chunk[i] = 0x0d; // "\r"
 }
const t0 = performance.now();
for (let off = 0; off < total; off += chunk.length) {
  const piece = chunk.subarray(0, Math.min(chunk.length, total - off));
  for (let w = 0; w < piece.length;) w += Deno.stdout.writeSync(piece.subarray(w));
}
console.error(`WROTE ${total} ${Math.round(performance.now() - t0)}`);
