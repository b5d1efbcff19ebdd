/**
 * `bench/deterministic.ts` runs: a tiny sweep on 2 ranks prints deterministic mode against the default,
 * paired, with no wrong element, and writes its rows.
 */
import assert from "node:assert/strict";

Deno.test("bench:deterministic prints the paired cost of deterministic mode and writes its rows", async () => {
  const out = await Deno.makeTempFile({ suffix: ".json" });
  try {
    const run = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("../../bench/deterministic.ts", import.meta.url).pathname,
        ...["--ranks", "2", "-b", "4K", "-e", "16K", "-f", "4", "-n", "2", "-r", "2", "--out", out],
      ],
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const text = new TextDecoder().decode(run.stdout) + new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 0, text.slice(-2000));
    assert.match(text, /default \(\w[\w-]*\) against deterministic mode \(ordered\)/);
    const lines = [...text.matchAll(/^\[rank0\]: +(\d+) +[\d.]+ +[\d.]+ +([\d.]+)× +wrong (\d+)\/(\d+)$/gm)];
    assert.deepEqual(lines.map((m) => Number(m[1])), [4096, 16384]);
    for (const m of lines) assert.deepEqual([m[3], m[4]], ["0", "0"]);
    const rows = JSON.parse(Deno.readTextFileSync(out)) as { runner: string }[];
    assert.deepEqual(rows.map((r) => r.runner), ["dcomm", "deterministic", "dcomm", "deterministic"]);
  } finally {
    await Deno.remove(out);
  }
});
