import assert from "node:assert/strict";
import { CONSTANT_GROUPS, LAYOUTS } from "../../../ffi/ibverbs/layout.ts";
import { gatedTest } from "../../_util/skip.ts";
import { differences, layoutLines, layoutStatements, probeProgram } from "../_layout_probe.ts";
import { compile, compilerMissing } from "./_cc.ts";

/**
 * A C program that prints, for every struct of `LAYOUTS`, its sizeof and each field's offsetof and size,
 * and the value of every constant of `CONSTANT_GROUPS`, one `key value` per line, as measured by gcc
 * against the installed verbs.h.
 */
function probeSource(): string {
  const constants: string[] = [];
  for (const { prefix, values } of CONSTANT_GROUPS) {
    for (const key of Object.keys(values)) {
      constants.push(`  printf("const ${prefix}${key} %lld\\n", (long long)${prefix}${key});`);
    }
  }
  return probeProgram(["infiniband/verbs.h"], [...layoutStatements(LAYOUTS), ...constants]);
}

/** The same lines, from the TypeScript tables. */
function expectedLines(): string[] {
  const lines = layoutLines(LAYOUTS);
  for (const { prefix, values } of CONSTANT_GROUPS) {
    for (const [key, value] of Object.entries(values)) lines.push(`const ${prefix}${key} ${value}`);
  }
  return lines;
}

gatedTest(
  "ffi/ibverbs/layout.ts matches offsetof/sizeof and the constants of the installed verbs.h",
  { missing: compilerMissing() },
  async () => {
    await using probe = await compile(probeSource());
    const output = await new Deno.Command(probe.path, { stdout: "piped" }).output();
    assert.ok(output.success);
    const measured = new TextDecoder().decode(output.stdout).trim().split("\n");
    const expected = expectedLines();
    assert.deepEqual(differences(expected, measured), []);
    // The tables are not trivially small: every struct and constant group the binding uses is there.
    assert.ok(LAYOUTS.length >= 17 && expected.length > 250, `only ${expected.length} lines compared`);
  },
);
