/**
 * The layer rules of `docs/architecture.md`, run over the real module graph (what `deno info` resolves:
 * static and dynamic imports, not the examples in doc comments): which top-level folder may import which,
 * what a leading `_` means (a file no other folder imports), and that only `ffi/locate.ts` opens native
 * libraries. Each rule is also shown to fail on a graph that breaks it.
 *
 * @module
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/**
 * What each layer may import (besides itself), as `docs/architecture.md`'s table says. `mod.ts` and the
 * folders of users' code (examples, tests, benchmarks) may import any layer.
 */
export const MAY_IMPORT: Readonly<Record<string, readonly string[]>> = {
  core: [],
  kernels: [],
  sim: [],
  wasm: ["core"],
  ffi: ["core"],
  store: ["core"],
  transport: ["core", "store", "ffi"],
  collectives: ["core", "sim"],
  gpu: ["core", "ffi"],
  backend: ["core", "wasm", "ffi", "store", "transport", "collectives", "sim", "gpu"],
  ddp: ["core", "backend", "wasm"],
  zero: ["core", "backend", "wasm"],
  tfjs: ["core", "backend", "ddp", "zero"],
  cli: ["core", "wasm", "ffi", "store", "gpu", "backend"],
};

/** Folders whose files may import anything (users' code and the package's front). */
const ANY = new Set(["mod.ts", "examples", "tests", "bench"]);

/** One import: the importing file and the imported one, both relative to the repository's root. */
export interface Edge {
  from: string;
  to: string;
}

/** Every `.ts` file of the repository but those under `.git` and ignored build folders. */
function sourceFiles(dir = ROOT, prefix = ""): string[] {
  const files: string[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    if (entry.name.startsWith(".") || entry.name === "node_modules") continue;
    const rel = prefix + entry.name;
    if (entry.isDirectory) files.push(...sourceFiles(new URL(entry.name + "/", dir), rel + "/"));
    else if (entry.name.endsWith(".ts")) files.push(rel);
  }
  return files;
}

/** The module graph of every source file, from one `deno info --json` of a root importing them all. */
function moduleGraph(): Edge[] {
  const files = sourceFiles();
  const root = Deno.makeTempFileSync({ suffix: ".ts" });
  try {
    // Type-only roots are enough: deno info resolves every specifier without running anything.
    Deno.writeTextFileSync(
      root,
      files.map((f) => `import type {} from "${new URL(f, ROOT).href}";`).join("\n"),
    );
    const out = new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", root],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
      modules: {
        specifier: string;
        dependencies?: { code?: { specifier: string }; type?: { specifier: string } }[];
      }[];
    };
    const rel = (specifier: string): string | undefined =>
      specifier.startsWith(ROOT.href) ? decodeURIComponent(specifier.slice(ROOT.href.length)) : undefined;
    const edges: Edge[] = [];
    for (const module of info.modules) {
      const from = rel(module.specifier);
      if (from === undefined) continue;
      for (const dep of module.dependencies ?? []) {
        for (const target of [dep.code?.specifier, dep.type?.specifier]) {
          const to = target === undefined ? undefined : rel(target);
          if (to !== undefined && to !== from) edges.push({ from, to });
        }
      }
    }
    return edges;
  } finally {
    Deno.removeSync(root);
  }
}

/** A file's layer: its top-level folder, or the file itself at the top. */
function layer(path: string): string {
  return path.includes("/") ? path.slice(0, path.indexOf("/")) : path;
}

/**
 * The imports that break the layer table.
 *
 * @param edges The graph.
 * @returns One line per broken rule.
 */
export function layerViolations(edges: readonly Edge[]): string[] {
  const broken = new Set<string>();
  for (const { from, to } of edges) {
    const a = layer(from);
    const b = layer(to);
    if (a === b || ANY.has(a)) continue;
    const allowed = MAY_IMPORT[a];
    if (allowed === undefined) broken.add(`${from}: the folder ${a}/ has no row in the layer table`);
    else if (!allowed.includes(b)) {
      broken.add(`${from} imports ${to}: ${a}/ may import ${allowed.join(", ") || "nothing"}, not ${b}/`);
    }
  }
  return [...broken].sort();
}

/**
 * The imports of a `_file.ts` from outside its folder: a leading `_` means no other folder imports the file
 * (its folder and the folders below may; tests and benchmarks may reach anything).
 *
 * @param edges The graph.
 * @returns One line per such import.
 */
export function privateViolations(edges: readonly Edge[]): string[] {
  const broken = new Set<string>();
  for (const { from, to } of edges) {
    if (ANY.has(layer(from)) && layer(from) !== "mod.ts") continue;
    const name = to.slice(to.lastIndexOf("/") + 1);
    if (!name.startsWith("_")) continue;
    const folder = to.slice(0, to.lastIndexOf("/") + 1);
    if (!from.startsWith(folder)) broken.add(`${from} imports ${to}, internal to ${folder || "the root"}`);
  }
  return [...broken].sort();
}

const graph = moduleGraph();

Deno.test("every import follows the layer table of docs/architecture.md", () => {
  assert.ok(graph.length > 500, `expected the whole module graph, found ${graph.length} imports`);
  assert.deepEqual(layerViolations(graph), []);
});

Deno.test("no folder imports another folder's _file.ts", () => {
  assert.deepEqual(privateViolations(graph), []);
});

Deno.test("the layer checks fail on imports that break the rules", () => {
  assert.deepEqual(layerViolations([{ from: "collectives/ring_allreduce.ts", to: "transport/tcp.ts" }]), [
    "collectives/ring_allreduce.ts imports transport/tcp.ts: collectives/ may import core, sim, not transport/",
  ]);
  assert.deepEqual(layerViolations([{ from: "core/errors.ts", to: "backend/init.ts" }]), [
    "core/errors.ts imports backend/init.ts: core/ may import nothing, not backend/",
  ]);
  assert.deepEqual(layerViolations([{ from: "newfolder/x.ts", to: "core/dtype.ts" }]), [
    "newfolder/x.ts: the folder newfolder/ has no row in the layer table",
  ]);
  assert.deepEqual(layerViolations([{ from: "tests/x_test.ts", to: "backend/cpu/engine.ts" }]), []);
  assert.deepEqual(privateViolations([{ from: "backend/init.ts", to: "store/_protocol.ts" }]), [
    "backend/init.ts imports store/_protocol.ts, internal to store/",
  ]);
  assert.deepEqual(privateViolations([{ from: "backend/cpu/create.ts", to: "backend/_rendezvous.ts" }]), []);
});

Deno.test("only ffi/locate.ts opens native libraries", () => {
  const openers: string[] = [];
  for (const file of sourceFiles()) {
    if (layer(file) === "tests") continue;
    // Code, not comments: a call `Deno.dlopen(` outside a doc comment's line.
    const code = Deno.readTextFileSync(new URL(file, ROOT)).split("\n").filter((l) =>
      !/^\s*(\*|\/\/)/.test(l)
    );
    if (code.some((l) => /\bDeno\.dlopen\s*\(/.test(l))) openers.push(file);
  }
  assert.deepEqual(openers.filter((f) => !f.startsWith("bench/")), ["ffi/locate.ts"]);
});
