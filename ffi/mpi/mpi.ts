/**
 * The MPI binding: opens MPI on first use through the project's one locator (`DCOMM_MPI_PATH`, then
 * `libmpich.so.12`, `libmpi.so.40`, `libmpi.so.12` on the loader's path), checks that it speaks MPICH's ABI
 * (integer handles), and turns every error code into an {@linkcode MpiError} with `MPI_Error_string`'s
 * text.
 *
 * Open MPI is found but refused with an {@linkcode UnsupportedError}: its handles are addresses of global
 * objects (`&ompi_mpi_comm_world`, `&ompi_mpi_float`, ...), its `MPI_Request` and `MPI_Comm` are pointers
 * and its `MPI_Status` has another layout, so it needs a second symbol table this binding does not have.
 *
 * @example The library's version string (no MPI_Init needed)
 * ```ts
 * import { libraryVersion } from "./mpi.ts";
 * import { DistError } from "../../core/errors.ts";
 * try {
 *   console.log(libraryVersion().split("\n")[0]); // "MPICH Version: 4.0.2"
 * } catch (e) {
 *   // No MPI here (a LibraryNotFoundError: every path tried, and the fix), or Open MPI (UnsupportedError)
 *   if (!(e instanceof DistError)) throw e;
 *   console.log(e.message);
 * }
 * ```
 *
 * @module
 */
import { DistError, type DistErrorOptions, UnsupportedError } from "../../core/errors.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";
import { MPI_ERROR_CLASS_NAMES, MPI_MAX_ERROR_STRING, MPI_MAX_LIBRARY_VERSION_STRING } from "./constants.ts";
import { MPI_SYMBOLS } from "./symbols.ts";

export { MPI_SYMBOLS, MPI_USER_FUNCTION } from "./symbols.ts";

/** The loaded symbols of MPI. */
export type MpiSymbols = Deno.DynamicLibrary<typeof MPI_SYMBOLS>["symbols"];

/** How the locator finds MPI. */
export const MPI_LIBRARY: LibrarySpec = {
  name: "MPI",
  envVar: "DCOMM_MPI_PATH",
  sonames: ["libmpich.so.12", "libmpi.so.40", "libmpi.so.12"],
  fix: "install MPICH (Debian/Ubuntu: apt-get install mpich libmpich-dev; Fedora: dnf install mpich-devel " +
    "and add /usr/lib64/mpich/lib to LD_LIBRARY_PATH)",
};

/** An opened MPI library. */
export interface MpiLibrary {
  /** The bound symbols. */
  readonly symbols: MpiSymbols;
  /** The path that opened. */
  readonly path: string;
  /** `MPI_Get_library_version`'s text, e.g. `"MPICH Version: 4.0.2 ..."`. */
  readonly version: string;
}

let opened: MpiLibrary | undefined;

/**
 * MPI, opened on the first call and checked to speak MPICH's ABI.
 *
 * @returns The library.
 * @throws {LibraryNotFoundError} If no MPI library can be opened; the message lists every path tried.
 * @throws {UnsupportedError} If the library is Open MPI (pointer handles; see the module doc).
 */
export function mpi(): MpiLibrary {
  if (opened) return opened;
  const { lib, path } = openLibrary(MPI_LIBRARY, MPI_SYMBOLS);
  const version = readVersion(lib.symbols);
  if (/open mpi/i.test(version)) {
    lib.close();
    throw new UnsupportedError(
      `Cannot use ${path}: it is Open MPI ("${version.split("\n")[0].trim()}"), whose handles are pointers ` +
        `to global objects (ompi_mpi_comm_world, ...) where this binding expects MPICH's integer handles. ` +
        `Use an MPICH-ABI library (MPICH, Intel MPI, MVAPICH): set DCOMM_MPI_PATH to its libmpich.so.12 ` +
        `and launch with its mpiexec`,
    );
  }
  opened = { symbols: lib.symbols, path, version };
  return opened;
}

function readVersion(symbols: MpiSymbols): string {
  const text = new Uint8Array(MPI_MAX_LIBRARY_VERSION_STRING);
  const len = new Int32Array(1);
  if (symbols.MPI_Get_library_version(text, len) !== 0) return "";
  return new TextDecoder().decode(text.subarray(0, Math.max(0, Math.min(len[0], text.length)))).replace(
    /\0+$/,
    "",
  );
}

/**
 * `MPI_Get_library_version`'s text; callable before `MPI_Init`.
 *
 * @returns The version text of the MPI library.
 * @throws {LibraryNotFoundError} If no MPI library can be opened.
 * @throws {UnsupportedError} If the library is Open MPI.
 */
export function libraryVersion(): string {
  return mpi().version;
}

/** A call into MPI returned an error code. */
export class MpiError extends DistError {
  /** The MPI error code the call returned. */
  readonly status: number;
  /** Its error class (`MPI_Error_class`), e.g. 14 for `MPI_ERR_TRUNCATE`. */
  readonly errorClass: number;
  /** The call, e.g. `"MPI_Iallreduce"`. */
  readonly call: string;

  /**
   * Creates the error.
   *
   * @param message The call, the error class and `MPI_Error_string`'s text.
   * @param options The code, class, call and cause.
   */
  constructor(
    message: string,
    options: DistErrorOptions & { status: number; errorClass: number; call: string },
  ) {
    super(message, { code: "MPI", ...options });
    this.status = options.status;
    this.errorClass = options.errorClass;
    this.call = options.call;
  }
}

/**
 * `MPI_Error_string` and `MPI_Error_class` of a code.
 *
 * @param code An MPI error code.
 * @returns The text and the error class.
 */
export function describeError(code: number): { text: string; errorClass: number } {
  const { symbols } = mpi();
  const text = new Uint8Array(MPI_MAX_ERROR_STRING);
  const len = new Int32Array(1);
  const cls = new Int32Array(1);
  const rcText = symbols.MPI_Error_string(code, text, len);
  const rcClass = symbols.MPI_Error_class(code, cls);
  return {
    text: rcText === 0 ? new TextDecoder().decode(text.subarray(0, Math.min(len[0], text.length))) : "",
    errorClass: rcClass === 0 ? cls[0] : code,
  };
}

/**
 * Throws an {@linkcode MpiError} unless `rc` is `MPI_SUCCESS`. Works only for calls on communicators whose
 * error handler is `MPI_ERRORS_RETURN` (the default, `MPI_ERRORS_ARE_FATAL`, aborts before returning).
 *
 * @param rc The return code.
 * @param call The call, for the message, e.g. `"MPI_Iallreduce"`.
 * @param context What dcomm was doing, e.g. `"all-reduce of 1024 float32"`.
 * @throws {MpiError} If `rc` is not 0.
 */
export function check(rc: number, call: string, context?: string): void {
  if (rc === 0) return;
  const { text, errorClass } = describeError(rc);
  const name = MPI_ERROR_CLASS_NAMES[errorClass] ?? `error class ${errorClass}`;
  throw new MpiError(
    `${call} failed${context ? ` (${context})` : ""}: expected MPI_SUCCESS, found ${name} (code ${rc}): ` +
      (text || "no error string"),
    { status: rc, errorClass, call },
  );
}
