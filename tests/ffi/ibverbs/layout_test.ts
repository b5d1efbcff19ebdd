import assert from "node:assert/strict";
import { CONSTANT_GROUPS, LAYOUTS } from "../../../ffi/ibverbs/layout.ts";
import { gatedTest } from "../../_util/skip.ts";
import { compile, compilerMissing } from "./_cc.ts";

/**
 * A C program that prints, for every struct of `LAYOUTS`, its sizeof and each field's offsetof and size,
 * and the value of every constant of `CONSTANT_GROUPS`, one `key value` per line, as measured by gcc
 * against the installed verbs.h.
 */
function probeSource(): string {
  const lines: string[] = [];
  for (const { type, fields } of LAYOUTS) {
    lines.push(`  printf("%s sizeof %zu\\n", "${type}", sizeof(${type}));`);
    for (const field of Object.keys(fields)) {
      lines.push(
        `  printf("%s .${field} %zu %zu\\n", "${type}", offsetof(${type}, ${field}), ` +
          `sizeof(((${type} *)0)->${field}));`,
      );
    }
  }
  for (const { prefix, values } of CONSTANT_GROUPS) {
    for (const key of Object.keys(values)) {
      lines.push(`  printf("const ${prefix}${key} %lld\\n", (long long)${prefix}${key});`);
    }
  }
  return [
    "#include <stddef.h>",
    "#include <stdio.h>",
    "#include <infiniband/verbs.h>",
    "int main(void) {",
    ...lines,
    "  return 0;",
    "}",
  ].join("\n");
}

/** The same lines, from the TypeScript tables. */
function expectedLines(): string[] {
  const lines: string[] = [];
  for (const { type, size, fields } of LAYOUTS) {
    lines.push(`${type} sizeof ${size}`);
    for (const [field, { offset, size }] of Object.entries(fields)) {
      lines.push(`${type} .${field} ${offset} ${size}`);
    }
  }
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
    const wrong = expected.filter((line, i) => measured[i] !== line).map((line) =>
      `TypeScript says "${line}", gcc says "${measured[expected.indexOf(line)]}"`
    );
    assert.deepEqual(wrong, []);
    assert.equal(measured.length, expected.length);
    // The tables are not trivially small: every struct and constant group the binding uses is there.
    assert.ok(LAYOUTS.length >= 17 && expected.length > 250, `only ${expected.length} lines compared`);
  },
);
