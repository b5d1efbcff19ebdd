/**
 * Builds `wasm/kernels.wasm` from `kernels/*.c` with emscripten, and records its size and sha256 in
 * `wasm/kernels.wasm.json`.
 *
 * ```sh
 * deno task build:wasm           # build and write both files
 * deno task build:wasm --check   # build to a temporary file and fail if a byte differs from the committed one
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";

/** Every flag handed to emcc, each with the reason it is there. */
const FLAGS: readonly (readonly [string, string])[] = [
  ["-O3", "speed: the kernels are the hot loops of every CPU collective"],
  ["-msimd128", "lets clang auto-vectorize the loops to 128-bit wasm SIMD (4 floats per instruction)"],
  ["-mnontrapping-fptoint", "float->int casts in quantization saturate instead of trapping, and vectorize"],
  ["-mbulk-memory", "memcpy/memset compile to memory.copy/memory.fill"],
  ["-ffp-contract=off", "no fused multiply-add: results match the TypeScript reference bit for bit"],
  ["-fno-math-errno", "math functions need not set errno, so they inline"],
  ["-std=c11", "the language the sources are written in"],
  ["-Wall", "warnings are bugs waiting"],
  ["-Werror", "...so they stop the build"],
  ["--no-entry", "a library of kernels: there is no main()"],
  ["-sSTANDALONE_WASM", "no JavaScript glue: the loader is ours"],
  ["-sERROR_ON_UNDEFINED_SYMBOLS=1", "any libc call that would become an import fails the build"],
  ["-sALLOW_MEMORY_GROWTH=1", "the loader grows memory for large tensors (memory.grow from JS)"],
  ["-sINITIAL_MEMORY=1MB", "start small; the loader grows on demand"],
  ["-sMAXIMUM_MEMORY=4GB", "the whole wasm32 address space is available for staging"],
  ["-sTOTAL_STACK=64KB", "kernels keep little on the stack; the rest of memory is the loader's heap"],
];

const here = new URL(".", import.meta.url);
const root = new URL("../", here);
const wasmUrl = new URL("wasm/kernels.wasm", root);
const manifestUrl = new URL("wasm/kernels.wasm.json", root);

/** The sha256 of `bytes` as lowercase hex. */
async function sha256(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new Uint8Array(bytes)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Compiles every `kernels/*.c` into `out` and returns the bytes. */
async function compile(out: string): Promise<Uint8Array> {
  const sources = [...Deno.readDirSync(here)]
    .filter((e) => e.isFile && e.name.endsWith(".c"))
    .map((e) => e.name)
    .sort();
  const args = [...FLAGS.map(([f]) => f), "-o", out, ...sources];
  let result: Deno.CommandOutput;
  try {
    result = await new Deno.Command("emcc", { args, cwd: here, stdout: "inherit", stderr: "inherit" })
      .output();
  } catch (e) {
    throw new Error("Cannot build the kernels: emcc was not found (apt-get install -y emscripten)", {
      cause: e,
    });
  }
  if (!result.success) throw new Error(`Cannot build the kernels: emcc exited with ${result.code}`);
  const bytes = Deno.readFileSync(out);
  const module = new WebAssembly.Module(bytes);
  const imports = WebAssembly.Module.imports(module);
  if (imports.length > 0) {
    throw new Error(
      `The kernels must have no imports, found ${imports.map((i) => `${i.module}.${i.name}`).join(", ")}`,
    );
  }
  return bytes;
}

if (import.meta.main) {
  const { values } = parseArgs({ args: Deno.args, options: { check: { type: "boolean", default: false } } });
  const tmp = Deno.makeTempDirSync({ prefix: "dcomm-wasm-" });
  try {
    const bytes = await compile(`${tmp}/kernels.wasm`);
    const manifest = { bytes: bytes.length, sha256: await sha256(bytes) };
    if (values.check) {
      const committed = Deno.readFileSync(wasmUrl);
      const recorded = JSON.parse(Deno.readTextFileSync(manifestUrl));
      const same = committed.length === bytes.length && committed.every((b, i) => b === bytes[i]);
      if (!same || recorded.sha256 !== manifest.sha256 || recorded.bytes !== manifest.bytes) {
        console.error(
          `wasm/kernels.wasm is stale: rebuilt ${manifest.bytes} bytes sha256 ${manifest.sha256}, ` +
            `committed ${committed.length} bytes sha256 ${await sha256(committed)} ` +
            `(manifest says ${recorded.bytes} bytes sha256 ${recorded.sha256}); run deno task build:wasm`,
        );
        Deno.exit(1);
      }
      console.log(
        `wasm/kernels.wasm rebuilds byte for byte: ${manifest.bytes} bytes, sha256 ${manifest.sha256}`,
      );
    } else {
      Deno.writeFileSync(wasmUrl, bytes);
      Deno.writeTextFileSync(manifestUrl, JSON.stringify(manifest, null, 2) + "\n");
      console.log(`wrote wasm/kernels.wasm: ${manifest.bytes} bytes, sha256 ${manifest.sha256}`);
    }
  } finally {
    Deno.removeSync(tmp, { recursive: true });
  }
}
