/**
 * Tensors from `pg.alloc()` in the host segment's pool: all-reduces of them run in place (nothing copied
 * in or out), on 2 and 3 processes, checked by formula; alloc and release keep the pool's account; a call
 * where one rank passes an ordinary tensor fails on every rank, saying so.
 */
import assert from "node:assert/strict";

const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const FIXTURE = new URL("./_fixtures/pool_rank.ts", import.meta.url).pathname;

async function launched(size: number, mode: string): Promise<{ code: number; text: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", LAUNCH, "--nproc-per-node", String(size), FIXTURE, mode],
    env: { DCOMM_TRANSPORT: "shm" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  return {
    code: out.code,
    text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
  };
}

for (const size of [2, 3]) {
  Deno.test(`pg.alloc() tensors all-reduce in place through the pool on ${size} processes`, async () => {
    const { code, text } = await launched(size, "run");
    assert.equal(code, 0, text.slice(-3000));
    const results = [...text.matchAll(/RESULT (\{.*\})/g)].map((m) => JSON.parse(m[1]));
    assert.equal(results.length, size, text.slice(-3000));
    for (const r of results) {
      assert.deepEqual(r.failures, []);
      assert.equal(r.ran, 7);
    }
    assert.equal([...text.matchAll(/AFTER 0\b/g)].length, size, "a pool tensor after close() reads as zeros");
  });
}

Deno.test("a call where one rank passes an ordinary tensor and the others pool tensors fails on every rank", async () => {
  const { text } = await launched(3, "mixed");
  const lines = [...text.matchAll(/MIXED (.*)/g)].map((m) => m[1]);
  assert.equal(lines.length, 3, text.slice(-3000));
  const detail = lines.find((l) => /pg\.alloc\(\)/.test(l));
  assert.ok(detail, lines.join("\n"));
  assert.match(
    detail,
    /^MismatchError: Mismatched calls: rank [02] passed a tensor from pg\.alloc\(\).*but rank 1/,
  );
  for (const l of lines) assert.match(l, /pg\.alloc\(\)|aborted/);
});
