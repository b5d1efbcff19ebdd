import assert from "node:assert/strict";
import { LibraryNotFoundError } from "../../core/errors.ts";
import { candidateFolders, type LibrarySpec, locateLibrary, openLibrary } from "../../ffi/locate.ts";
import { nccl, NCCL_LIBRARY } from "../../ffi/nccl/nccl.ts";
import { CUDART_LIBRARY } from "../../ffi/cudart/cudart.ts";
import { IBVERBS_LIBRARY } from "../../ffi/ibverbs/ibverbs.ts";
import { CUDA_DRIVER_LIBRARY } from "../../ffi/ibverbs/_cuda_driver.ts";
import { MPI_LIBRARY } from "../../ffi/mpi/mpi.ts";
import { gatedTest } from "../_util/skip.ts";
import { NCCL_MISSING } from "../_util/gpu.ts";

const SPEC: LibrarySpec = {
  name: "the test library",
  envVar: "DCOMM_TEST_LOCATE_PATH",
  sonames: ["libdcomm-test-missing.so.1", "libdcomm-test-missing.so"],
  pipPackages: ["dcomm_test_pkg"],
  fix: "install the test package",
};

function withEnv<T>(vars: Record<string, string | undefined>, fn: () => T): T {
  const old: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(vars)) {
    old[k] = Deno.env.get(k);
    if (v === undefined) Deno.env.delete(k);
    else Deno.env.set(k, v);
  }
  try {
    return fn();
  } finally {
    for (const [k, v] of Object.entries(old)) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
  }
}

Deno.test("locateLibrary() puts an override file first, alone", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const file = `${dir}/libdcomm-test-missing.so.1`;
    Deno.writeFileSync(file, new Uint8Array(1));
    const found = withEnv({ DCOMM_TEST_LOCATE_PATH: file }, () => locateLibrary(SPEC));
    assert.deepEqual(found.candidates, [file]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("locateLibrary() looks for every soname in an override folder", () => {
  const dir = Deno.makeTempDirSync();
  try {
    Deno.writeFileSync(`${dir}/libdcomm-test-missing.so`, new Uint8Array(1));
    const found = withEnv({ DCOMM_TEST_LOCATE_PATH: dir }, () => locateLibrary(SPEC));
    assert.deepEqual(found.candidates, [`${dir}/libdcomm-test-missing.so`]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

/** Runs `fn` with a pip-style folder on PYTHONPATH that holds the test library, as a pip wheel would. */
function withPipCopy<T>(fn: (pipCopy: string, dir: string) => T): T {
  const dir = Deno.makeTempDirSync();
  try {
    const lib = `${dir}/site/nvidia/dcomm_test_pkg/lib`;
    Deno.mkdirSync(lib, { recursive: true });
    const pipCopy = `${lib}/libdcomm-test-missing.so.1`;
    Deno.writeFileSync(pipCopy, new Uint8Array(1));
    return withEnv({ PYTHONPATH: `${dir}/site` }, () => fn(pipCopy, dir));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

function locateError(
  vars: Record<string, string | undefined>,
  spec: LibrarySpec = SPEC,
): LibraryNotFoundError {
  try {
    const found = withEnv(vars, () => locateLibrary(spec));
    throw new assert.AssertionError({
      message: `expected LibraryNotFoundError, found candidates ${JSON.stringify(found.candidates)}`,
    });
  } catch (e) {
    if (!(e instanceof LibraryNotFoundError)) throw e;
    return e;
  }
}

Deno.test("locateLibrary() without an override finds the pip copy (the copy an override must not fall back to)", () => {
  withPipCopy((pipCopy) => {
    const found = withEnv({ DCOMM_TEST_LOCATE_PATH: undefined }, () => locateLibrary(SPEC));
    assert.equal(found.candidates[0], pipCopy);
  });
});

Deno.test("locateLibrary() of an override that names no file throws, naming the variable and the path, and searches nothing else", () => {
  withPipCopy((pipCopy, dir) => {
    const missing = `${dir}/nonexistent/libdcomm-test-missing.so.1`;
    const error = locateError({ DCOMM_TEST_LOCATE_PATH: missing });
    assert.equal(
      error.message.split("\n")[0],
      `Cannot find the test library: DCOMM_TEST_LOCATE_PATH is set to ${missing}, and no file is there. Tried:`,
    );
    assert.deepEqual(error.tried, [`${missing} (from DCOMM_TEST_LOCATE_PATH: no such file or folder)`]);
    assert.ok(!error.message.includes(pipCopy), error.message);
    assert.match(
      error.message,
      /\nFix: set DCOMM_TEST_LOCATE_PATH to the library's file or to a folder holding libdcomm-test-missing\.so\.1 or libdcomm-test-missing\.so, or unset it/,
    );
    assert.equal(error.code, "LIBRARY_NOT_FOUND");
  });
});

Deno.test("locateLibrary() of an override folder without the library throws, listing each soname looked for", () => {
  withPipCopy((pipCopy, dir) => {
    const empty = `${dir}/empty`;
    Deno.mkdirSync(empty);
    const error = locateError({ DCOMM_TEST_LOCATE_PATH: empty });
    assert.equal(
      error.message.split("\n")[0],
      `Cannot find the test library: DCOMM_TEST_LOCATE_PATH is set to ${empty}, a folder with no ` +
        "libdcomm-test-missing.so.1 or libdcomm-test-missing.so in it. Tried:",
    );
    assert.deepEqual(
      error.tried,
      SPEC.sonames.map((s) => `${empty}/${s} (from DCOMM_TEST_LOCATE_PATH: no such file)`),
    );
    assert.ok(!error.message.includes(pipCopy), error.message);
  });
});

Deno.test("locateLibrary() of an override that is neither a file nor a folder throws", () => {
  const error = locateError({ DCOMM_TEST_LOCATE_PATH: "/dev/null" });
  assert.match(
    error.message,
    /^Cannot find the test library: DCOMM_TEST_LOCATE_PATH is set to \/dev\/null, which is neither a file nor a folder\. Tried:\n/,
  );
  assert.deepEqual(error.tried, ["/dev/null (from DCOMM_TEST_LOCATE_PATH: not a file)"]);
});

Deno.test("openLibrary() of an override that names no file throws before opening anything", () => {
  withPipCopy((pipCopy, dir) => {
    const missing = `${dir}/nonexistent.so`;
    assert.throws(
      () =>
        withEnv(
          { DCOMM_TEST_LOCATE_PATH: missing },
          () => openLibrary(SPEC, { nothing: { parameters: [], result: "void" } }),
        ),
      (e: unknown) => {
        assert.ok(e instanceof LibraryNotFoundError, String(e));
        assert.match(e.message, /DCOMM_TEST_LOCATE_PATH is set to .*nonexistent\.so, and no file is there/);
        // Neither the pip copy nor the loader's search was tried.
        assert.deepEqual(e.tried, [`${missing} (from DCOMM_TEST_LOCATE_PATH: no such file or folder)`]);
        assert.ok(!e.message.includes(pipCopy) && !e.message.includes("loader search"), e.message);
        return true;
      },
    );
  });
});

Deno.test("every library's override follows the one rule: naming no file is an error that names the variable", () => {
  for (const spec of [NCCL_LIBRARY, CUDART_LIBRARY, IBVERBS_LIBRARY, MPI_LIBRARY, CUDA_DRIVER_LIBRARY]) {
    const missing = `/nonexistent/dcomm/${spec.sonames[0]}`;
    const error = locateError({ [spec.envVar]: missing }, spec);
    assert.equal(
      error.message.split("\n")[0],
      `Cannot find ${spec.name}: ${spec.envVar} is set to ${missing}, and no file is there. Tried:`,
    );
    assert.deepEqual(error.tried, [`${missing} (from ${spec.envVar}: no such file or folder)`]);
  }
  assert.deepEqual(
    [NCCL_LIBRARY, CUDART_LIBRARY, IBVERBS_LIBRARY, MPI_LIBRARY, CUDA_DRIVER_LIBRARY].map((s) => s.envVar),
    [
      "DCOMM_NCCL_PATH",
      "DCOMM_CUDART_PATH",
      "DCOMM_IBVERBS_PATH",
      "DCOMM_MPI_PATH",
      "DCOMM_CUDA_DRIVER_PATH",
    ],
  );
});

Deno.test("an empty override counts as unset", () => {
  withPipCopy((pipCopy) => {
    const found = withEnv({ DCOMM_TEST_LOCATE_PATH: "" }, () => locateLibrary(SPEC));
    assert.equal(found.candidates[0], pipCopy);
  });
});

Deno.test("candidateFolders() includes pip's nvidia/<package>/lib under PYTHONPATH", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const folders = withEnv({ PYTHONPATH: dir }, () => candidateFolders(SPEC));
    assert.ok(folders.includes(`${dir}/nvidia/dcomm_test_pkg/lib`), folders.join("\n"));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("openLibrary() of a missing library throws LibraryNotFoundError listing the paths and the fix", () => {
  const error = withEnv({ DCOMM_TEST_LOCATE_PATH: undefined }, () => {
    try {
      openLibrary(SPEC, { nothing: { parameters: [], result: "void" } });
    } catch (e) {
      return e;
    }
    return undefined;
  });
  assert.ok(error instanceof LibraryNotFoundError, String(error));
  assert.match(error.message, /^Cannot find the test library\. Tried:/);
  assert.match(error.message, /\/nvidia\/dcomm_test_pkg\/lib\/libdcomm-test-missing\.so\.1 \(no such file\)/);
  assert.match(
    error.message,
    /libdcomm-test-missing\.so\.1 \(loader search: LD_LIBRARY_PATH, ldconfig cache\)/,
  );
  assert.match(
    error.message,
    /Fix: set DCOMM_TEST_LOCATE_PATH to the library's path, or install the test package/,
  );
  assert.equal(error.code, "LIBRARY_NOT_FOUND");
  assert.ok(error.tried.length >= 3);
});

gatedTest("openLibrary() opens NCCL from its override", { missing: NCCL_MISSING }, () => {
  const path = nccl().path;
  const { lib, path: opened } = withEnv(
    { [NCCL_LIBRARY.envVar]: path },
    () => openLibrary(NCCL_LIBRARY, { ncclGetVersion: { parameters: ["buffer"], result: "i32" } }),
  );
  try {
    assert.equal(opened, path);
    const v = new Int32Array(1);
    assert.equal(lib.symbols.ncclGetVersion(v), 0);
    assert.equal(v[0], nccl().version.code);
  } finally {
    lib.close();
  }
});
