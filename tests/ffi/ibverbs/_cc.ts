/**
 * Builds the C test doubles and probes of the ffi tests (the ibverbs doubles, the header layout probes)
 * with gcc, into a temporary folder, and says what is missing when they cannot be built.
 *
 * @module
 */
import { hasCommand } from "../../_util/skip.ts";

/** The header every probe and double includes. */
export const VERBS_HEADER = "/usr/include/infiniband/verbs.h";

/** Why C test doubles cannot be built here, or `undefined` when they can. */
export function compilerMissing(): string | undefined {
  if (!hasCommand("gcc")) return "gcc not installed (apt-get install gcc)";
  try {
    Deno.statSync(VERBS_HEADER);
  } catch {
    return `libibverbs-dev not installed: no ${VERBS_HEADER} (apt-get install libibverbs-dev)`;
  }
  return undefined;
}

/** What {@linkcode compile} produces. */
export interface CompileOptions {
  /** Build a shared library (`-shared -fPIC`) rather than a program. @default false */
  shared?: boolean;
  /** Extra gcc arguments (libraries to link). @default [] */
  args?: readonly string[];
}

/** A built file in its own temporary folder; disposing removes the folder. */
export interface Built extends AsyncDisposable {
  /** The built program or library. */
  readonly path: string;
}

/**
 * Compiles one C file (or C source text) with gcc into a fresh temporary folder.
 *
 * @param source A path ending in `.c`, or the C source itself.
 * @param options Shared library or program, extra arguments.
 * @returns The built file; dispose it to remove the folder.
 * @throws {Error} With gcc's output, if it fails.
 */
export async function compile(source: string, options: CompileOptions = {}): Promise<Built> {
  const dir = await Deno.makeTempDir({ prefix: "dcomm-ibv-" });
  let file = source;
  if (!source.endsWith(".c")) {
    file = `${dir}/probe.c`;
    await Deno.writeTextFile(file, source);
  }
  const out = `${dir}/${options.shared ? "libfake.so" : "probe"}`;
  const args = [
    "-std=gnu11",
    "-O1",
    "-Wall",
    "-Werror",
    ...(options.shared ? ["-shared", "-fPIC", "-Wl,-Bsymbolic"] : []),
    "-o",
    out,
    file,
    ...(options.args ?? []),
  ];
  const result = await new Deno.Command("gcc", { args, stdout: "piped", stderr: "piped" }).output();
  if (!result.success) {
    await Deno.remove(dir, { recursive: true });
    throw new Error(`gcc ${args.join(" ")} failed:\n${new TextDecoder().decode(result.stderr)}`);
  }
  return {
    path: out,
    async [Symbol.asyncDispose](): Promise<void> {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}
