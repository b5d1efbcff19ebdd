/**
 * The examples are code that works, written as users write it: every public symbol of every entry point
 * of `deno.json`'s `exports` has a JSDoc example, every example in the library runs (`deno test --doc` on
 * every file that has one, found by scanning, so a new file is covered without being listed here), those
 * of public symbols import dcomm by its name (`@dcomm/dcomm`, through `deno.json`'s self-import map), and
 * `deno doc --lint` in `check:static` covers every entry point.
 *
 * @module
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
const CONFIG = JSON.parse(Deno.readTextFileSync(new URL("deno.json", ROOT))) as {
  exports: Record<string, string>;
  imports?: Record<string, string>;
  tasks: Record<string, string>;
};
/** The entry points' files, as `deno doc` and `deno test` take them (`mod.ts`, `store/mod.ts`, ...). */
const ENTRY_FILES = Object.values(CONFIG.exports).map((file) => file.replace(/^\.\//, ""));
/** What is not the library, besides hidden folders (`.git`, `.ci`, `.device`): tests and benchmarks. */
const NOT_LIBRARY = new Set(["tests", "bench", "node_modules"]);
/** The languages `deno test --doc` runs (any other fence, `sh` or `json`, is prose). */
const RUN_LANGS = new Set(["ts", "typescript", "mts", "cts", "tsx", "js", "javascript", "mjs", "cjs", "jsx"]);

interface Location {
  filename: string;
  line: number;
}

interface DocNode {
  name: string;
  declarations: { location: Location; kind?: string; def?: { target?: Location } }[];
}

function relative(url: string): string {
  return url.replace(ROOT.href, "");
}

/** Every symbol of the entry points, as `deno doc --json` sees them (one run for all). */
async function publicSymbols(): Promise<DocNode[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--json", ...ENTRY_FILES],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const json = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    nodes: Record<string, { symbols: DocNode[] }>;
  };
  return Object.values(json.nodes).flatMap((n) => n.symbols);
}

/** A JSDoc comment as `deno doc --json` gives it. */
interface JsDoc {
  doc?: string;
  tags?: { kind: string; doc?: string }[];
}

/** Every `jsDoc` object in the JSON of `deno doc` (symbols, class and interface members, ...). */
function jsDocs(value: unknown, found: JsDoc[] = []): JsDoc[] {
  if (Array.isArray(value)) { for (const v of value) jsDocs(v, found); }
  else if (value !== null && typeof value === "object") {
    for (const [key, v] of Object.entries(value)) {
      if (key === "jsDoc" && v !== null && typeof v === "object") found.push(v);
      jsDocs(v, found);
    }
  }
  return found;
}

function hasExample(symbol: DocNode): boolean {
  return jsDocs(symbol.declarations).some((d) => d.tags?.some((t) => t.kind === "example") ?? false);
}

function at(location: Location): string {
  return `${location.filename}:${location.line}`;
}

/**
 * The symbols without an example. A symbol an entry point re-exports from another one is a reference to
 * the other's declaration (`deno doc` given several files documents each declaration once): it has the
 * example of the symbol it refers to.
 */
function withoutExample(symbols: readonly DocNode[]): DocNode[] {
  const documented = new Map<string, boolean>();
  for (const s of symbols) {
    for (const d of s.declarations) if (d.kind !== "reference") documented.set(at(d.location), hasExample(s));
  }
  return symbols.filter((s) =>
    !s.declarations.some((d) =>
      d.kind === "reference" && d.def?.target ? documented.get(at(d.def.target)) === true : hasExample(s)
    )
  );
}

/** One fenced block of a JSDoc comment: where it starts, its language and attributes, its first line. */
interface Fence {
  line: number;
  lang: string;
  attributes: string[];
  first: string;
}

/** The fenced blocks of the JSDoc comments of a source file. */
function fences(text: string): Fence[] {
  const found: Fence[] = [];
  for (const comment of text.matchAll(/\/\*\*[\s\S]*?\*\//g)) {
    const startLine = text.slice(0, comment.index).split("\n").length;
    const lines = comment[0].split("\n").map((l) => l.replace(/^\s*\*? ?/, ""));
    let open: Fence | undefined;
    for (const [i, line] of lines.entries()) {
      const fence = /^(`{3,}|~{3,})\s*(\S*)\s*(.*)$/.exec(line.trim());
      if (!fence) {
        if (open && open.first === "") open.first = line.trim();
        continue;
      }
      if (open) {
        open = undefined;
        continue;
      }
      open = {
        line: startLine + i,
        lang: fence[2],
        attributes: fence[3].split(/\s+/).filter(Boolean),
        first: "",
      };
      found.push(open);
    }
  }
  return found;
}

function runs(fence: Fence): boolean {
  return RUN_LANGS.has(fence.lang) && !fence.attributes.includes("ignore");
}

/** The library's source files that hold an example: everything but tests/, bench/ and hidden folders. */
function filesWithExamples(): Map<string, Fence[]> {
  const files = new Map<string, Fence[]>();
  const walk = (dir: URL, path: string): void => {
    for (const entry of Deno.readDirSync(dir)) {
      const name = path + entry.name;
      if (entry.isDirectory) {
        if (!entry.name.startsWith(".") && !NOT_LIBRARY.has(name)) {
          walk(new URL(`${entry.name}/`, dir), `${name}/`);
        }
      } else if (/\.(m|c)?[jt]sx?$/.test(entry.name)) {
        const text = Deno.readTextFileSync(new URL(entry.name, dir));
        const blocks = fences(text);
        if (text.includes("@example") || blocks.some((f) => RUN_LANGS.has(f.lang))) files.set(name, blocks);
      }
    }
  };
  walk(ROOT, "");
  return files;
}

const symbols = await publicSymbols();
const examples = filesWithExamples();

Deno.test("every public symbol of every entry point in deno.json's exports has a JSDoc example", () => {
  assert.ok(ENTRY_FILES.length >= 9, `only ${ENTRY_FILES.length} entry points found`);
  assert.ok(symbols.length > 150, `only ${symbols.length} symbols found`);
  const missing = withoutExample(symbols).map((s) => {
    const { filename, line } = s.declarations[0].location;
    return `${s.name} (${relative(filename)}:${line})`;
  });
  assert.deepEqual([...new Set(missing)], [], `symbols without an @example:\n${missing.join("\n")}`);
});

Deno.test("the examples of public symbols import dcomm as users do, by name (@dcomm/dcomm)", () => {
  const relativeImport = /^\s*(import|export)\b[^;]*?\bfrom\s*["']\.\.?\/|\bimport\(\s*["']\.\.?\//m;
  const offending = new Set<string>();
  for (const s of symbols) {
    for (const doc of jsDocs(s.declarations)) {
      for (const tag of doc.tags ?? []) {
        if (tag.kind === "example" && relativeImport.test(tag.doc ?? "")) {
          offending.add(`${s.name} (${relative(s.declarations[0].location.filename)})`);
        }
      }
    }
  }
  // The module docs of the entry points are what JSR shows first.
  for (const file of ENTRY_FILES) {
    const moduleDoc = /^\/\*\*[\s\S]*?\*\//.exec(Deno.readTextFileSync(new URL(file, ROOT)))?.[0] ?? "";
    const code = moduleDoc.split("\n").map((l) => l.replace(/^\s*\*? ?/, "")).join("\n");
    if (relativeImport.test(code)) offending.add(`the module doc of ${file}`);
  }
  assert.deepEqual(
    [...offending],
    [],
    `examples that import dcomm by a relative path:\n${[...offending].join("\n")}`,
  );
});

Deno.test("deno.json maps @dcomm/dcomm and each sub-path to its export, for the examples", () => {
  const expected = Object.fromEntries(
    Object.entries(CONFIG.exports).map(([path, file]) => [`@dcomm/dcomm${path.slice(1)}`, file]),
  );
  const mapped = Object.fromEntries(
    Object.entries(CONFIG.imports ?? {}).filter(([name]) =>
      name === "@dcomm/dcomm" || name.startsWith("@dcomm/dcomm/")
    ),
  );
  assert.deepEqual(mapped, expected);
});

Deno.test("check:static runs deno doc --lint on every entry point", () => {
  const commands = CONFIG.tasks["check:static"].split(/\s*&&\s*/);
  const docLint = commands.find((c) => c.startsWith("deno doc --lint "));
  assert.ok(docLint, `no deno doc --lint in check:static: ${CONFIG.tasks["check:static"]}`);
  const linted = docLint.split(/\s+/).slice(3).map((f) => f.replace(/^\.\//, ""));
  assert.deepEqual(ENTRY_FILES.filter((f) => !linted.includes(f)), []);
});

Deno.test("an example that does not run says why, in a comment on its first line", () => {
  const silent: string[] = [];
  for (const [file, blocks] of examples) {
    for (const f of blocks) {
      if (RUN_LANGS.has(f.lang) && f.attributes.includes("ignore") && !f.first.startsWith("//")) {
        silent.push(`${file}:${f.line}`);
      }
    }
  }
  assert.deepEqual(silent, [], `ignored examples without a reason:\n${silent.join("\n")}`);
});

Deno.test("every example in the library runs (deno test --doc on every file that has one)", async () => {
  const files = [...examples.keys()].sort();
  assert.ok(files.length > 60, `only ${files.length} files with examples found`);
  assert.ok(ENTRY_FILES.every((f) => files.includes(f)), "an entry point has no example");
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["test", "-A", "--doc", "--no-check=remote", ...files],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
    signal: AbortSignal.timeout(600_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text.slice(-6000));
  // One test per block: each block deno ran, counted per file, against the blocks there are.
  const ran = new Map<string, number>();
  for (const m of text.matchAll(/^running (\d+) tests? from \.\/(.+?)[$#]\d+-\d+\.\w+$/gm)) {
    ran.set(m[2], (ran.get(m[2]) ?? 0) + Number(m[1]));
  }
  const expected = new Map(files.map((f) => [f, (examples.get(f) ?? []).filter(runs).length]));
  const differ = files.filter((f) => (ran.get(f) ?? 0) !== expected.get(f))
    .map((f) => `${f}: ${ran.get(f) ?? 0} ran, ${expected.get(f)} blocks`);
  assert.deepEqual(differ, [], `examples deno did not run:\n${differ.join("\n")}`);
  const total = [...expected.values()].reduce((a, b) => a + b, 0);
  assert.match(text, new RegExp(`ok \\| ${total} passed \\| 0 failed`));
});
