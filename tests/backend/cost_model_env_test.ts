/**
 * `DCOMM_COST_MODEL`: the constants `"auto"` prices with, given as JSON (what `bench/network.ts` passes its
 * ranks after fitting them on the emulated links), merged over the measured ones; a bad value is a
 * TypeError naming what was expected. Each case runs in a process of its own (the table is read once).
 */
import assert from "node:assert/strict";

const DISPATCH = new URL("../../backend/cpu/_dispatch.ts", import.meta.url).href;

async function table(value: string): Promise<{ code: number; out: string; err: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `import { constantsTable } from "${DISPATCH}"; console.log(JSON.stringify(constantsTable()));`,
    ],
    env: { DCOMM_COST_MODEL: value },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: out.code,
    out: new TextDecoder().decode(out.stdout),
    err: new TextDecoder().decode(out.stderr),
  };
}

Deno.test("DCOMM_COST_MODEL replaces the constants of the transports it names, and only those", async () => {
  const given = { alpha: 5e-5, beta: 8e-8, gamma: 2e-10 };
  const r = await table(JSON.stringify({ tcp: given }));
  assert.equal(r.code, 0, r.err);
  const t = JSON.parse(r.out);
  assert.deepEqual(t.tcp, given);
  const { DEFAULT_SHM_CONSTANTS } = await import("../../sim/cost_model.ts");
  assert.deepEqual(t.shm, { ...DEFAULT_SHM_CONSTANTS });
});

Deno.test("a DCOMM_COST_MODEL that is not { transport: { alpha, beta, gamma } } is refused naming it", async () => {
  const r = await table(JSON.stringify({ tcp: { alpha: -1, beta: 1, gamma: 1 } }));
  assert.notEqual(r.code, 0);
  assert.match(
    r.err,
    /Invalid DCOMM_COST_MODEL: expected \{ tcp \| shm \| inproc: \{ alpha, beta, gamma \} \}/,
  );
  const s = await table(JSON.stringify({ segment: { alpha: 1, beta: 1, gamma: 1 } }));
  assert.match(s.err, /Invalid DCOMM_COST_MODEL.*found \{"segment"/);
  const j = await table("tcp=1");
  assert.match(j.err, /Invalid DCOMM_COST_MODEL: expected JSON, found "tcp=1"/);
});
