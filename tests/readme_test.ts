/**
 * The README's table of algorithm names per collective is the registry's list, name for name and in order.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ALGORITHMS } from "../collectives/mod.ts";

Deno.test("README lists every algorithm name of every collective, as the registry does", () => {
  const readme = Deno.readTextFileSync(new URL("../README.md", import.meta.url));
  const rows = [...readme.matchAll(/^\s*\| `(\w+)`\s*\| (`[^|]*)\|$/gm)];
  const table = Object.fromEntries(
    rows.map(([, collective, cell]) => [collective, [...cell.matchAll(/`([\w-]+)`/g)].map((m) => m[1])]),
  );
  assert.deepEqual(
    table,
    Object.fromEntries(Object.entries(ALGORITHMS).map(([c, names]) => [c, [...names]])),
  );
});
