/** `sim/init_model.ts`: the requests and bytes of each rendezvous, the prediction and the fit. */
import assert from "node:assert/strict";
import { fitInitConstants, initCost, type InitShape, initTraffic } from "../../sim/init_model.ts";

const table = (ranks: number): InitShape => ({ ranks, pattern: "one-table", connections: "lazy" });

Deno.test("initTraffic(): the one-table exchange is linear in requests, the per-key one quadratic", () => {
  // 2N + 2 for the hosts (host_table_test.ts counts them) and 3N + 1 for the TCP mesh (tcp_test.ts).
  assert.equal(initTraffic(table(64)).requests, 2 * 64 + 2 + 3 * 64 + 1);
  const perKey = (n: number) => initTraffic({ ranks: n, pattern: "per-key", connections: "eager" }).requests;
  // bench:init's "old" host exchange alone is N² + 2N; with the mesh's reads of lower ranks' addresses more.
  assert.ok(perKey(1024) > 1024 * 1024 + 2 * 1024);
  assert.ok(perKey(4096) / perKey(1024) > 15, "quadratic");
  assert.ok(initTraffic(table(4096)).requests / initTraffic(table(1024)).requests < 4.01, "linear");
});

Deno.test("fitInitConstants() recovers the constants of rows it made; initCost() adds the connections", () => {
  const k = { requestS: 40e-6, byteS: 2e-9, connectS: 0.8e-3 };
  const rows = [256, 1024, 4096].map((n) => ({
    shape: table(n),
    seconds: initCost(table(n), k).rendezvousS,
  }));
  const connects: [number, number][] = [[2, 0.3 + 2 * k.connectS], [63, 0.3 + 63 * k.connectS]];
  const fit = fitInitConstants(rows, connects);
  for (const name of ["requestS", "byteS", "connectS"] as const) {
    assert.ok(Math.abs(fit[name] - k[name]) / k[name] < 1e-6, `${name}: ${fit[name]}`);
  }
  const eager = initCost({ ranks: 64, pattern: "one-table", connections: "eager" }, k);
  const lazy = initCost(table(64), k);
  assert.equal(eager.connectS, 63 * k.connectS);
  assert.equal(lazy.connectS, 2 * k.connectS);
  assert.equal(lazy.totalS, lazy.rendezvousS + lazy.connectS);
  assert.throws(() => fitInitConstants(rows.slice(0, 1), connects), /do not tell requests from bytes/);
  assert.throws(() => fitInitConstants(rows, [[2, 1]]), /at least two connection counts/);
  assert.throws(() => initTraffic({ ranks: 0, pattern: "one-table", connections: "lazy" }), RangeError);
});
