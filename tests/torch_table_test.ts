/**
 * `docs/torch.md` against the code and against torch: every public function of the installed
 * `torch.distributed` has a row; every `pg.` member a row names exists on a real process group (a method
 * where the row calls it); every row without a dcomm form says why ("not planned: ..." or "not yet: ...
 * (issue N)"); every reduce op it maps is one dcomm takes.
 */
import assert from "node:assert/strict";
import { init } from "../backend/init.ts";
import * as dcomm from "../mod.ts";
import { doctor } from "../cli/doctor.ts";
import { REDUCE_OPS } from "../core/dtype.ts";
import { gatedTest } from "./_util/skip.ts";
import { whyNoTorch } from "./_util/torch.ts";

const TABLE = new URL("../docs/torch.md", import.meta.url);

interface Row {
  torch: string;
  dcomm: string;
}

/** The rows of the table under `heading`. */
function rows(heading: string): Row[] {
  const text = Deno.readTextFileSync(TABLE);
  const section = text.split(/^## /m).find((s) => s.startsWith(heading));
  assert.ok(section, `docs/torch.md has no section "${heading}"`);
  return section.split("\n")
    .filter((l) => /^\| `/.test(l))
    .map((l) => l.split(/(?<!\\)\|/).map((c) => c.trim()))
    .map((cells) => ({ torch: cells[1].replace(/`/g, ""), dcomm: cells[2] }));
}

/** Why a row has no dcomm form, or undefined when it has one. */
function noForm(dcomm: string): string | undefined {
  return /^not (planned|yet)\b/.test(dcomm) ? dcomm : undefined;
}

Deno.test("every row of docs/torch.md has a dcomm form or says why not; every pg member it names exists", async () => {
  await using pg = await init({ rank: 0, worldSize: 1, env: {} });
  const functions = rows("Functions");
  assert.ok(functions.length >= 60, `only ${functions.length} rows`);
  for (const { torch, dcomm: form } of functions) {
    const why = noForm(form);
    if (why !== undefined) {
      assert.match(why, /^not (planned|yet): \S/, `${torch}: say why`);
      if (why.startsWith("not yet")) assert.match(why, /\(issue \d+\)/, `${torch}: name the issue`);
      continue;
    }
    const code = [...form.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    assert.ok(code.length > 0, `${torch}: the dcomm form is not code: ${form}`);
    for (const c of code) {
      for (const m of c.matchAll(/\bpg\.(\w+)(\()?/g)) {
        const member = (pg as unknown as Record<string, unknown>)[m[1]];
        assert.notEqual(member, undefined, `${torch}: pg.${m[1]} does not exist`);
        if (m[2]) assert.equal(typeof member, "function", `${torch}: pg.${m[1]} is not a method`);
      }
      for (const m of c.matchAll(/^(?:await )?(\w+)\(/g)) {
        if (m[1] === "doctor") assert.equal(typeof doctor, "function");
        else assert.equal(typeof (dcomm as Record<string, unknown>)[m[1]], "function", `${torch}: ${m[1]}`);
      }
    }
  }
});

Deno.test("every reduce op docs/torch.md maps is an op dcomm takes", () => {
  for (const { torch, dcomm: form } of rows("Reduce ops")) {
    if (noForm(form) !== undefined) {
      assert.match(form, /\(issue \d+\)/, torch);
      continue;
    }
    const op = /^`"(\w+)"`$/.exec(form)?.[1];
    assert.ok(op && (REDUCE_OPS as readonly string[]).includes(op), `${torch}: ${form}`);
  }
});

gatedTest("docs/torch.md has a row for every public function of the installed torch.distributed", {
  missing: whyNoTorch(),
  ciCanSatisfy: true,
}, () => {
  const out = new Deno.Command("python3", {
    args: [
      "-c",
      "import torch.distributed as d, inspect\n" +
      "print('\\n'.join(sorted(n for n in dir(d) if not n.startswith('_') and " +
      "(inspect.isfunction(getattr(d, n)) or inspect.isbuiltin(getattr(d, n))))))",
    ],
    stdout: "piped",
    stderr: "piped",
  }).outputSync();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const torch = new TextDecoder().decode(out.stdout).trim().split("\n");
  const table = new Set(rows("Functions").map((r) => r.torch));
  assert.deepEqual(
    torch.filter((name) => !table.has(name)),
    [],
    "functions of torch.distributed without a row",
  );
  const ops = new Set(rows("Reduce ops").map((r) => r.torch));
  const torchOps = new TextDecoder().decode(
    new Deno.Command("python3", {
      args: ["-c", "import torch.distributed as d\nprint(' '.join(d.ReduceOp.RedOpType.__members__))"],
      stdout: "piped",
    }).outputSync().stdout,
  ).trim().split(/\s+/).filter((n) => n !== "UNUSED");
  assert.deepEqual(torchOps.filter((n) => !ops.has(n)), [], "ReduceOp members without a row");
});
