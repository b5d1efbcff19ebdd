/**
 * The one locator of native libraries (NCCL, the CUDA runtime, libibverbs, MPI, libc, the CUDA driver): an
 * environment override per library, then versioned sonames in the usual CUDA folders and in the
 * `nvidia/<pkg>/lib` folders where pip's CUDA wheels put them (as PyTorch users have them), then the
 * loader's own search (`LD_LIBRARY_PATH`, the ldconfig cache). A miss throws
 * {@linkcode LibraryNotFoundError} listing every path tried and the fix.
 *
 * An override that is set is the only place looked at: it must name the library's file, or a folder
 * holding one of its sonames. One that names no file (`DCOMM_NCCL_PATH=/nonexistent/libnccl.so.2`) is a
 * {@linkcode LibraryNotFoundError} naming the variable and its value, never a silent fall back to
 * another copy of the library found elsewhere; so is a file there that does not open.
 *
 * Nothing here opens a library at import time; bindings call {@linkcode openLibrary} on first use.
 *
 * @module
 */
import { LibraryNotFoundError } from "../core/errors.ts";

/** How to find one library. */
export interface LibrarySpec {
  /** A human name for messages, e.g. `"NCCL"`. */
  readonly name: string;
  /** The environment variable that overrides the search (a file, or a folder holding one of the sonames). */
  readonly envVar: string;
  /** File names to look for, most preferred first, e.g. `["libnccl.so.2", "libnccl.so"]`. */
  readonly sonames: readonly string[];
  /** Names of pip packages under `site-packages/nvidia/` that ship the library, e.g. `["nccl"]`. */
  readonly pipPackages?: readonly string[];
  /** Whether the CUDA toolkit folders may hold it. @default false */
  readonly cudaFolders?: boolean;
  /** How to install it, for the error message. */
  readonly fix: string;
}

/** Where a library was found. */
export interface LocatedLibrary {
  /** The path opened (a bare soname when the loader's search found it). */
  readonly path: string;
  /** Every candidate tried before it, with why it was passed over. */
  readonly tried: readonly string[];
}

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name) || undefined;
  } catch {
    return undefined;
  }
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

function isFolder(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

function children(dir: string, pattern: RegExp): string[] {
  try {
    return [...Deno.readDirSync(dir)]
      .filter((e) => (e.isDirectory || e.isSymlink) && pattern.test(e.name))
      .map((e) => `${dir}/${e.name}`)
      .sort()
      .reverse();
  } catch {
    return [];
  }
}

/** The `site-packages`/`dist-packages` folders of the Python environments commonly present. */
export function pythonSitePackages(): string[] {
  const home = env("HOME");
  const roots = [
    env("VIRTUAL_ENV"),
    env("CONDA_PREFIX"),
    home && `${home}/.local`,
    "/usr/local",
    "/usr",
    "/opt/conda",
    ...(home ? children(`${home}/.pyenv/versions`, /./) : []),
  ].filter((r): r is string => !!r);
  const out: string[] = [];
  for (const root of roots) {
    for (const py of children(`${root}/lib`, /^python3/)) {
      for (const leaf of ["site-packages", "dist-packages"]) out.push(`${py}/${leaf}`);
    }
  }
  for (const extra of (env("PYTHONPATH") ?? "").split(":").filter(Boolean)) out.push(extra);
  return [...new Set(out)];
}

/** Candidate folders for a library, in search order (before the loader's own search). */
export function candidateFolders(spec: LibrarySpec): string[] {
  const dirs: string[] = [];
  for (const pkg of spec.pipPackages ?? []) {
    for (const site of pythonSitePackages()) dirs.push(`${site}/nvidia/${pkg}/lib`);
  }
  if (spec.cudaFolders) {
    for (
      const root of [
        env("CUDA_HOME"),
        env("CUDA_PATH"),
        "/usr/local/cuda",
        ...children("/usr/local", /^cuda-/),
      ]
    ) {
      if (!root) continue;
      dirs.push(`${root}/lib64`, `${root}/lib`, `${root}/targets/x86_64-linux/lib`);
    }
  }
  return [...new Set(dirs)];
}

/**
 * Finds a library without opening it: the override alone when it is set, else the candidate folders.
 * Returns the bare sonames for the loader to search when nothing matched on disk.
 *
 * @param spec The library.
 * @returns The paths to try with dlopen, in order, and what was passed over.
 * @throws {LibraryNotFoundError} If the override is set and names no file: neither the library's file nor
 * a folder holding one of its sonames. The message names the variable and its value; nothing else is
 * searched.
 */
export function locateLibrary(spec: LibrarySpec): { candidates: string[]; tried: string[] } {
  const tried: string[] = [];
  const override = env(spec.envVar);
  if (override) {
    if (isFile(override)) return { candidates: [override], tried };
    const folder = isFolder(override);
    const paths = folder ? spec.sonames.map((s) => `${override}/${s}`) : [override];
    const found = paths.filter(isFile);
    if (found.length) return { candidates: found, tried };
    throw overrideNamesNoFile(spec, override, folder, paths);
  }
  const candidates: string[] = [];
  for (const dir of candidateFolders(spec)) {
    for (const soname of spec.sonames) {
      const p = `${dir}/${soname}`;
      if (isFile(p)) candidates.push(p);
      else tried.push(`${p} (no such file)`);
    }
  }
  // The loader searches LD_LIBRARY_PATH and the ldconfig cache for bare names.
  candidates.push(...spec.sonames);
  return { candidates, tried };
}

// The override is what the user asked for: searching on would load another copy than the one named.
function overrideNamesNoFile(
  spec: LibrarySpec,
  override: string,
  folder: boolean,
  paths: readonly string[],
): LibraryNotFoundError {
  const sonames = spec.sonames.join(" or ");
  const what = folder
    ? `a folder with no ${sonames} in it`
    : exists(override)
    ? "which is neither a file nor a folder"
    : "and no file is there";
  const why = folder ? "no such file" : exists(override) ? "not a file" : "no such file or folder";
  const tried = paths.map((p) => `${p} (from ${spec.envVar}: ${why})`);
  return new LibraryNotFoundError(
    `Cannot find ${spec.name}: ${spec.envVar} is set to ${override}, ${what}. Tried:\n  ${
      tried.join("\n  ")
    }\nFix: set ${spec.envVar} to the library's file or to a folder holding ${sonames}, or unset it ` +
      `to let dcomm search for ${spec.name}`,
    { tried },
  );
}

/**
 * Opens a library with `Deno.dlopen`, trying every candidate in order.
 *
 * @param spec The library.
 * @param symbols The symbol table.
 * @returns The library and the path that opened.
 * @throws {LibraryNotFoundError} If no candidate opened, or the override names no file (see
 * {@linkcode locateLibrary}); it lists every path tried and the fix.
 */
export function openLibrary<S extends Deno.ForeignLibraryInterface>(
  spec: LibrarySpec,
  symbols: S,
): { lib: Deno.DynamicLibrary<S>; path: string } {
  const { candidates, tried } = locateLibrary(spec);
  let lastError: unknown;
  for (const path of candidates) {
    try {
      return { lib: Deno.dlopen(path, symbols), path };
    } catch (e) {
      lastError = e;
      const why = e instanceof Error ? e.message.replace(/^Could not open library: /, "") : String(e);
      tried.push(
        `${path}${path.includes("/") ? "" : " (loader search: LD_LIBRARY_PATH, ldconfig cache)"}: ${why}`,
      );
      if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) break;
    }
  }
  throw new LibraryNotFoundError(
    `Cannot find ${spec.name}. Tried:\n  ${
      tried.join("\n  ")
    }\nFix: set ${spec.envVar} to the library's path, ` +
      `or ${spec.fix}`,
    { tried, cause: lastError },
  );
}
