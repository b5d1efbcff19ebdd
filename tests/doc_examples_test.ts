/**
 * Every public symbol of `mod.ts` has a JSDoc example, and every example in the files that define them
 * runs (`deno test --doc`): the examples are code that works, not prose.
 *
 * @module
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

interface DocNode {
  name: string;
  declarations: { location: { filename: string }; jsDoc?: { tags?: { kind: string }[] } }[];
}

async function publicSymbols(entry: string): Promise<DocNode[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--json", entry],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const doc = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    nodes: Record<string, { symbols: DocNode[] }>;
  };
  return Object.values(doc.nodes).flatMap((n) => n.symbols);
}

const symbols = await publicSymbols("mod.ts");

Deno.test("every public symbol of mod.ts has a JSDoc example", () => {
  assert.ok(symbols.length > 20, `only ${symbols.length} symbols found`);
  const missing = symbols.filter((s) =>
    !s.declarations.some((d) => d.jsDoc?.tags?.some((t) => t.kind === "example"))
  ).map((s) => `${s.name} (${s.declarations[0].location.filename.replace(ROOT.href, "")})`);
  assert.deepEqual(missing, [], `symbols without an @example:\n${missing.join("\n")}`);
});

Deno.test("the examples of mod.ts and of every file its symbols come from run (deno test --doc)", async () => {
  const files = new Set(["mod.ts"]);
  for (const s of symbols) {
    for (const d of s.declarations) files.add(d.location.filename.replace(ROOT.href, ""));
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["test", "-A", "--doc", "--no-check=remote", ...[...files].sort()],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
    signal: AbortSignal.timeout(300_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-6000));
  assert.match(text, /ok \| [1-9]\d* passed \| 0 failed/);
});
