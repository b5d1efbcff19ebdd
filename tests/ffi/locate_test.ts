import assert from "node:assert/strict";
import { LibraryNotFoundError } from "../../core/errors.ts";
import { candidateFolders, type LibrarySpec, locateLibrary, openLibrary } from "../../ffi/locate.ts";
import { nccl, NCCL_LIBRARY } from "../../ffi/nccl/nccl.ts";
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

Deno.test("locateLibrary() says an override that names nothing, then searches on", () => {
  const found = withEnv({ DCOMM_TEST_LOCATE_PATH: "/nonexistent/dcomm" }, () => locateLibrary(SPEC));
  assert.ok(
    found.tried.some((t) => t.includes("/nonexistent/dcomm") && t.includes("from DCOMM_TEST_LOCATE_PATH")),
  );
  // The bare sonames stay last, for the loader's own search.
  assert.deepEqual(found.candidates.slice(-2), SPEC.sonames);
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
  const error = withEnv({ DCOMM_TEST_LOCATE_PATH: "/nonexistent/libdcomm.so" }, () => {
    try {
      openLibrary(SPEC, { nothing: { parameters: [], result: "void" } });
    } catch (e) {
      return e;
    }
    return undefined;
  });
  assert.ok(error instanceof LibraryNotFoundError, String(error));
  assert.match(error.message, /^Cannot find the test library\. Tried:/);
  // An override that is not a file is taken as a folder of the sonames.
  assert.match(
    error.message,
    /\/nonexistent\/libdcomm\.so\/libdcomm-test-missing\.so\.1 \(from DCOMM_TEST_LOCATE_PATH: no such file\)/,
  );
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
