/**
 * dcomm imported from a URL, as JSR delivers it: each test serves this checkout over HTTP on 127.0.0.1
 * and runs `deno` on scripts (written to a temp dir) that import dcomm by http URL only, with a fresh
 * `DENO_DIR`, so that nothing cached by an earlier run, nor a `file:` URL, can hide a failure. A module
 * loaded from JSR has an https `import.meta.url` and comes from the local Deno cache; the last test runs
 * from the cache alone, with the server gone.
 *
 * @module
 */
import assert from "node:assert/strict";

const REPO = new URL("../", import.meta.url);
const DENO_TIMEOUT_MS = 120_000;
const MEDIA_TYPES: Record<string, string> = {
  ts: "application/typescript",
  js: "text/javascript",
  json: "application/json",
  wasm: "application/wasm",
};

/** The checkout served over HTTP, and the paths it was asked for. */
interface ServedRepo extends AsyncDisposable {
  /** `http://127.0.0.1:PORT`. */
  readonly origin: string;
  /** Every path requested so far. */
  readonly served: Set<string>;
}

function serveRepo(): ServedRepo {
  const served = new Set<string>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen(): void {} },
    async (req): Promise<Response> => {
      const path = new URL(req.url).pathname;
      const file = new URL(`.${path}`, REPO);
      served.add(path);
      if (!file.href.startsWith(REPO.href)) return new Response("Outside the checkout", { status: 403 });
      try {
        const body = await Deno.readFile(file);
        const type = MEDIA_TYPES[path.slice(path.lastIndexOf(".") + 1)] ?? "application/octet-stream";
        return new Response(body, { headers: { "content-type": type } });
      } catch {
        return new Response(`No file ${path}`, { status: 404 });
      }
    },
  );
  return {
    origin: `http://127.0.0.1:${server.addr.port}`,
    served,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

/** A temp dir with a fresh, empty `DENO_DIR` in it; removed on dispose. */
async function tempDir(): Promise<{ path: string; denoDir: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "dcomm_remote_" });
  const denoDir = `${path}/deno_dir`;
  await Deno.mkdir(denoDir);
  return { path, denoDir, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** Runs `deno` with `args`, killed (SIGTERM) past DENO_TIMEOUT_MS. */
async function deno(
  args: string[],
  options: { denoDir: string; cwd?: string },
): Promise<{ code: number; out: string; err: string }> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), DENO_TIMEOUT_MS);
  try {
    const o = await new Deno.Command(Deno.execPath(), {
      args,
      cwd: options.cwd,
      env: { DENO_DIR: options.denoDir, NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: abort.signal,
    }).output();
    const out = new TextDecoder().decode(o.stdout), err = new TextDecoder().decode(o.stderr);
    if (abort.signal.aborted) {
      throw new Error(
        `deno ${args.join(" ")} should end within ${DENO_TIMEOUT_MS} ms, found it still running\n${
          errors(err)
        }`,
      );
    }
    return { code: o.code, out, err };
  } finally {
    clearTimeout(timer);
  }
}

/** The lines of `err` that are not Deno's `Download …` progress (a rank's, under the launcher, too). */
function errors(err: string): string {
  return err.split("\n").filter((l) => !/^(\[rank\d+\]: )?Download /.test(l)).join("\n");
}

Deno.test("launch loaded from an http URL runs 3 ranks whose all-reduce imports dcomm by URL", async () => {
  await using repo = serveRepo();
  await using dir = await tempDir();
  const script = `${dir.path}/all_reduce.ts`;
  await Deno.writeTextFile(
    script,
    `import { init } from "${repo.origin}/mod.ts";
await using pg = await init({ timeoutMs: 60_000 });
const t = new Float64Array([pg.rank + 1, 2 ** pg.rank]);
await pg.allReduce(t);
console.log(\`rank \${pg.rank} of \${pg.size}: \${JSON.stringify(Array.from(t))}\`);
`,
  );
  const { code, out, err } = await deno(
    ["run", "-A", `${repo.origin}/cli/launch.ts`, "--nproc-per-node", "3", script],
    { denoDir: dir.denoDir },
  );
  assert.equal(code, 0, errors(err));
  for (let rank = 0; rank < 3; rank++) {
    // 1 + 2 + 3 and 2^0 + 2^1 + 2^2 on every rank.
    assert.match(out, new RegExp(`^\\[rank${rank}\\]: rank ${rank} of 3: \\[6,7\\]$`, "m"), out);
  }
  assert.ok(repo.served.has("/backend/cpu/comm_worker.ts"), "the communication Worker came over HTTP");
});

Deno.test("spawnThreads() imported from an http URL runs 2 ranks of a local module", async () => {
  await using repo = serveRepo();
  await using dir = await tempDir();
  // The ranks' module is the user's, on disk, as it is when dcomm comes from JSR.
  await Deno.writeTextFile(
    `${dir.path}/rank.ts`,
    `import type { ProcessGroup } from "${repo.origin}/mod.ts";
export async function main(pg: ProcessGroup): Promise<number[]> {
  const t = new Float32Array([pg.rank + 1, 10 * (pg.rank + 1)]);
  await pg.allReduce(t);
  return Array.from(t);
}
`,
  );
  await Deno.writeTextFile(
    `${dir.path}/threads.ts`,
    `import { spawnThreads } from "${repo.origin}/mod.ts";
const results = await spawnThreads(new URL("./rank.ts", import.meta.url), { worldSize: 2, timeoutMs: 60_000 });
console.log(JSON.stringify(results));
`,
  );
  const { code, out, err } = await deno(["run", "-A", `${dir.path}/threads.ts`], { denoDir: dir.denoDir });
  assert.equal(code, 0, errors(err));
  assert.deepEqual(JSON.parse(out), [[3, 30], [3, 30]]);
  assert.ok(repo.served.has("/backend/_thread_main.ts"), "the rank threads' module came over HTTP");
});

Deno.test("kernels() imported from an http URL loads kernels.wasm and reduces", async () => {
  await using repo = serveRepo();
  await using dir = await tempDir();
  await Deno.writeTextFile(
    `${dir.path}/kernels.ts`,
    `import { kernels } from "${repo.origin}/wasm/kernels.ts";
const k = await kernels();
const sum = new Float32Array([1, 2, 3]), max = new Int32Array([1, 5, 3]);
k.reduce(sum, new Float32Array([10, 20, 30]), { op: "sum" });
k.reduce(max, new Int32Array([4, 2, 6]), { op: "max" });
console.log(JSON.stringify([Array.from(sum), Array.from(max)]));
`,
  );
  const { code, out, err } = await deno(["run", "-A", `${dir.path}/kernels.ts`], { denoDir: dir.denoDir });
  assert.equal(code, 0, errors(err));
  assert.deepEqual(JSON.parse(out), [[11, 22, 33], [4, 5, 6]]);
  assert.ok(repo.served.has("/wasm/kernels.wasm"), "kernels.wasm came over HTTP");
});

Deno.test("doctor loaded from an http URL says cpu can run, and does so again from the cache alone", async () => {
  await using dir = await tempDir();
  const repo = serveRepo();
  const url = `${repo.origin}/cli/doctor.ts`;
  try {
    const { code, out, err } = await deno(["run", "-A", url], { denoDir: dir.denoDir });
    assert.match(out, /^ {2}cpu +can run here$/m, `${out}\n${errors(err)}`);
    assert.equal(code, 0, errors(err));
  } finally {
    await repo[Symbol.asyncDispose]();
  }
  // The server is gone: this run has only what DENO_DIR cached, as a jsr: package run again has.
  const { code, out, err } = await deno(["run", "-A", "--cached-only", url], { denoDir: dir.denoDir });
  assert.match(out, /^ {2}cpu +can run here$/m, `${out}\n${errors(err)}`);
  assert.equal(code, 0, errors(err));
});

/** The `unanalyzable-dynamic-import` warnings `deno publish` may print, and why each is fine. */
const EXPLAINED_DYNAMIC_IMPORTS: readonly { file: string; source: string; why: string }[] = [
  {
    file: "backend/_thread_main.ts",
    source: "import(start.module)",
    why: "spawnThreads() imports the caller's own module, whose URL exists only at run time",
  },
];

/** The file (relative to the checkout) and source line of each `unanalyzable-dynamic-import` warning. */
function dynamicImportWarnings(text: string): { file: string; source: string }[] {
  const blocks = text.split(/^(?=warning\[)/m);
  return blocks.filter((b) => b.startsWith("warning[unanalyzable-dynamic-import]")).map((block) => {
    const file = block.match(/--> (.+?):\d+:\d+$/m)?.[1] ?? "?";
    const source = block.match(/^\d+ \|(.*)$/m)?.[1].trim() ?? "?";
    return { file: file.startsWith(REPO.pathname) ? file.slice(REPO.pathname.length) : file, source };
  });
}

Deno.test("deno publish --dry-run warns of no dynamic import it cannot analyze, but the explained ones", async () => {
  await using dir = await tempDir();
  // --no-check: the warnings come from the module graph; type checking is `deno check`'s job.
  const { code, out, err } = await deno(
    ["publish", "--dry-run", "--allow-dirty", "--no-check"],
    { denoDir: dir.denoDir, cwd: REPO.pathname },
  );
  const text = `${out}\n${err}`;
  assert.equal(code, 0, text);
  const warnings = dynamicImportWarnings(text);
  const unexplained = warnings.filter((w) =>
    !EXPLAINED_DYNAMIC_IMPORTS.some((e) => e.file === w.file && w.source.includes(e.source))
  );
  assert.deepEqual(unexplained, [], `Unexplained unanalyzable dynamic imports:\n${text}`);
  // Each explained one must still be there: a stale entry would hide a new warning at its place.
  const stale = EXPLAINED_DYNAMIC_IMPORTS.filter((e) =>
    !warnings.some((w) => e.file === w.file && w.source.includes(e.source))
  );
  assert.deepEqual(stale, [], `Explained dynamic imports deno publish no longer warns of:\n${text}`);
});
