/**
 * The two sides of a header layout probe, for any table of `ffi/_layout.ts`: C statements that print,
 * for every layout, its `sizeof` and each field's `offsetof` and size (a field the header lacks fails the
 * build), and the same lines as the TypeScript tables say them, compared line by line.
 *
 * @module
 */
import type { StructLayout } from "../../ffi/_layout.ts";

/**
 * C statements (for `main`) printing `<type> sizeof <n>`, then `<type> .<field> <offset> <size>` for
 * each field, for every layout.
 *
 * @param layouts The tables.
 * @returns One `printf` statement per line.
 */
export function layoutStatements(layouts: readonly StructLayout[]): string[] {
  const lines: string[] = [];
  for (const { type, fields } of layouts) {
    lines.push(`  printf("%s sizeof %zu\\n", "${type}", sizeof(${type}));`);
    for (const field of Object.keys(fields)) {
      lines.push(
        `  printf("%s .${field} %zu %zu\\n", "${type}", offsetof(${type}, ${field}), ` +
          `sizeof(((${type} *)0)->${field}));`,
      );
    }
  }
  return lines;
}

/**
 * The lines {@linkcode layoutStatements} prints when the tables are right.
 *
 * @param layouts The tables.
 * @returns The lines, in the same order.
 */
export function layoutLines(layouts: readonly StructLayout[]): string[] {
  const lines: string[] = [];
  for (const { type, size, fields } of layouts) {
    lines.push(`${type} sizeof ${size}`);
    for (const [field, { offset, size }] of Object.entries(fields)) {
      lines.push(`${type} .${field} ${offset} ${size}`);
    }
  }
  return lines;
}

/**
 * A C program that includes `headers` and runs `statements`.
 *
 * @param headers The headers, as `<...>` includes, after `stddef.h` and `stdio.h`.
 * @param statements The body of `main`.
 * @returns The source.
 */
export function probeProgram(headers: readonly string[], statements: readonly string[]): string {
  return [
    "#include <stddef.h>",
    "#include <stdio.h>",
    ...headers.map((h) => `#include <${h}>`),
    "int main(void) {",
    ...statements,
    "  return 0;",
    "}",
  ].join("\n") + "\n";
}

/**
 * Where the lines gcc's program printed differ from those the tables say.
 *
 * @param expected The lines from the TypeScript tables.
 * @param measured The lines the program printed.
 * @returns One message per differing line (none when they agree, in number too).
 */
export function differences(expected: readonly string[], measured: readonly string[]): string[] {
  const wrong: string[] = [];
  for (let i = 0; i < Math.max(expected.length, measured.length); i++) {
    if (expected[i] !== measured[i]) {
      wrong.push(`TypeScript says "${expected[i] ?? "nothing"}", gcc says "${measured[i] ?? "nothing"}"`);
    }
  }
  return wrong;
}
