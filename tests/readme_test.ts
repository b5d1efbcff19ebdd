/**
 * The README's table of algorithm names per collective is the registry's list, name for name and in order;
 * docs/launching.md's table of variables is the code's.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ALGORITHMS } from "../collectives/mod.ts";

Deno.test("README lists every algorithm name of every collective, as the registry does", () => {
  const readme = Deno.readTextFileSync(new URL("../README.md", import.meta.url));
  // The algorithm table's rows: a collective's name, then its algorithms (not the variables' table).
  const rows = [...readme.matchAll(/^\s*\| `(\w+)`\s*\| (`[^|]*)\|$/gm)].filter(([, name]) =>
    !name.startsWith("DCOMM_")
  );
  const table = Object.fromEntries(
    rows.map(([, collective, cell]) => [collective, [...cell.matchAll(/`([\w-]+)`/g)].map((m) => m[1])]),
  );
  assert.deepEqual(
    table,
    Object.fromEntries(Object.entries(ALGORITHMS).map(([c, names]) => [c, [...names]])),
  );
});

/** Every `DCOMM_*` name the library's code (not its tests or benchmarks) mentions. */
function variablesInCode(): Set<string> {
  const found = new Set<string>();
  const root = new URL("../", import.meta.url);
  const walk = (dir: URL): void => {
    for (const entry of Deno.readDirSync(dir)) {
      const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
      if (entry.isDirectory) walk(url);
      else if (entry.name.endsWith(".ts")) {
        for (const m of Deno.readTextFileSync(url).matchAll(/\bDCOMM_[A-Z0-9_]*[A-Z0-9]\b/g)) found.add(m[0]);
      }
    }
  };
  for (
    const dir of [
      "backend",
      "cli",
      "collectives",
      "compression",
      "core",
      "ddp",
      "ffi",
      "gpu",
      "sim",
      "store",
      "transport",
      "wasm",
    ]
  ) {
    try {
      walk(new URL(`${dir}/`, root));
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  }
  return found;
}

Deno.test("docs/launching.md's table of DCOMM_* variables lists every one the code reads, and no other", () => {
  const doc = Deno.readTextFileSync(new URL("../docs/launching.md", import.meta.url));
  const rows = [...doc.matchAll(/^\| `(DCOMM_[A-Z0-9_]+)`/gm)].map((m) => m[1]);
  assert.equal(new Set(rows).size, rows.length, "a variable has two rows");
  assert.deepEqual([...rows].sort(), [...variablesInCode()].sort());
});
