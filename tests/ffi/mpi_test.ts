/**
 * The MPI binding against the installed MPICH: every constant of `ffi/mpi/constants.ts` equals what a C
 * program compiled by `mpicc` against `mpi.h` prints, the symbol table loads, and error codes become
 * {@linkcode MpiError}s with MPICH's text. Nothing here calls `MPI_Init` (that happens once per process,
 * in the backend tests' rank processes).
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  MPI_ANY_SOURCE,
  MPI_ERR_TRUNCATE,
  MPI_IN_PLACE_ADDRESS,
  MPI_MAX_ERROR_STRING,
  MPI_MAX_LIBRARY_VERSION_STRING,
  MPI_REQUEST_NULL,
  MPI_STATUS_IGNORE_ADDRESS,
  MPI_STATUS_SIZE,
  MPI_STATUS_SOURCE_OFFSET,
  MPI_UNDEFINED,
  MpiComm,
  MpiDatatype,
  MpiErrhandler,
  MpiOp,
  MpiThreadLevel,
} from "../../ffi/mpi/constants.ts";
import { check, libraryVersion, mpi, MPI_SYMBOLS, MpiError } from "../../ffi/mpi/mpi.ts";
import { DistError } from "../../core/errors.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";

const mpiccMissing = hasCommand("mpicc") ? undefined : "mpicc not found (apt-get install mpich libmpich-dev)";

function libraryMissing(): string | undefined {
  try {
    mpi();
    return undefined;
  } catch (e) {
    return `no MPICH library: ${(e as Error).message.split("\n")[0]} (apt-get install mpich libmpich-dev)`;
  }
}

/** Every constant as `C expression` → the TypeScript value. */
function constants(): [string, number | bigint][] {
  const out: [string, number | bigint][] = [];
  const groups: [string, Record<string, number>][] = [
    ["MPI_COMM_", MpiComm],
    ["MPI_", MpiDatatype],
    ["MPI_", MpiOp],
    ["MPI_ERRORS_", MpiErrhandler],
    ["MPI_THREAD_", MpiThreadLevel],
  ];
  for (const [prefix, values] of groups) {
    for (const [key, value] of Object.entries(values)) {
      const name = prefix === "MPI_" && values === MpiDatatype && key === "NULL"
        ? "MPI_DATATYPE_NULL"
        : prefix === "MPI_" && values === MpiOp && key === "NULL"
        ? "MPI_OP_NULL"
        : `${prefix}${key}`;
      out.push([name, value]);
    }
  }
  out.push(
    ["MPI_REQUEST_NULL", MPI_REQUEST_NULL],
    ["MPI_UNDEFINED", MPI_UNDEFINED],
    ["MPI_ERR_TRUNCATE", MPI_ERR_TRUNCATE],
    ["MPI_MAX_ERROR_STRING", MPI_MAX_ERROR_STRING],
    ["MPI_MAX_LIBRARY_VERSION_STRING", MPI_MAX_LIBRARY_VERSION_STRING],
    ["sizeof(MPI_Status)", MPI_STATUS_SIZE],
    ["offsetof(MPI_Status, MPI_SOURCE)", MPI_STATUS_SOURCE_OFFSET],
    ["MPI_ANY_SOURCE", MPI_ANY_SOURCE],
    ["(intptr_t)MPI_IN_PLACE", BigInt.asIntN(64, MPI_IN_PLACE_ADDRESS)],
    ["(intptr_t)MPI_STATUS_IGNORE", MPI_STATUS_IGNORE_ADDRESS],
  );
  return out;
}

gatedTest(
  "ffi/mpi/constants.ts matches the installed mpi.h",
  { missing: mpiccMissing },
  async () => {
    const list = constants();
    const source = [
      "#include <stddef.h>",
      "#include <stdint.h>",
      "#include <stdio.h>",
      "#include <mpi.h>",
      "int main(void) {",
      ...list.map(([expr]) => `  printf("%lld\\n", (long long)(${expr}));`),
      "  return 0;",
      "}",
    ].join("\n");
    const dir = await Deno.makeTempDir({ prefix: "dcomm-mpi-constants-" });
    try {
      await Deno.writeTextFile(`${dir}/probe.c`, source);
      const cc = await new Deno.Command("mpicc", {
        args: [`${dir}/probe.c`, "-o", `${dir}/probe`],
        stderr: "piped",
      }).output();
      assert.ok(cc.success, new TextDecoder().decode(cc.stderr));
      // Not run under mpiexec and without MPI_Init: the program only prints header constants.
      const run = await new Deno.Command(`${dir}/probe`, { stdout: "piped" }).output();
      assert.ok(run.success);
      const measured = new TextDecoder().decode(run.stdout).trim().split("\n");
      const wrong = list.flatMap(([expr, value], i) =>
        BigInt(measured[i]) === BigInt(value)
          ? []
          : [`${expr}: TypeScript says ${value}, mpi.h says ${measured[i]}`]
      );
      assert.deepEqual(wrong, []);
      assert.ok(list.length >= 30, `only ${list.length} constants compared`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

gatedTest("mpi() opens MPICH with every symbol of the table", { missing: libraryMissing() }, () => {
  const { symbols, path, version } = mpi();
  for (const name of Object.keys(MPI_SYMBOLS)) {
    assert.equal(typeof symbols[name as keyof typeof symbols], "function", `${name} is not bound`);
  }
  assert.match(path, /mpi/);
  assert.match(version, /MPICH|Intel|MVAPICH/i);
  assert.equal(libraryVersion(), version);
  const major = new Int32Array(1), minor = new Int32Array(1);
  check(symbols.MPI_Get_version(major, minor), "MPI_Get_version");
  assert.ok(major[0] >= 3, `MPI ${major[0]}.${minor[0]}: expected 3.0 or newer (non-blocking collectives)`);
});

gatedTest(
  "check() turns an MPI error code into an MpiError with MPICH's text",
  { missing: libraryMissing() },
  () => {
    check(0, "MPI_Barrier");
    let error: unknown;
    try {
      check(MPI_ERR_TRUNCATE, "MPI_Recv", "recv of 4 int32");
    } catch (e) {
      error = e;
    }
    assert.ok(
      error instanceof MpiError && error instanceof DistError,
      `expected an MpiError, found ${error}`,
    );
    assert.equal(error.code, "MPI");
    assert.equal(error.status, MPI_ERR_TRUNCATE);
    assert.equal(error.errorClass, MPI_ERR_TRUNCATE);
    assert.equal(error.call, "MPI_Recv");
    assert.match(
      error.message,
      /^MPI_Recv failed \(recv of 4 int32\): expected MPI_SUCCESS, found MPI_ERR_TRUNCATE/,
    );
    assert.match(error.message, /truncat/i);
  },
);
