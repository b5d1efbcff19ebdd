/**
 * `ffi/_layout.ts`'s builder, and the cudart and nccl tables against the real headers: a C program
 * generated from each table (`_layout_probe.ts`) is built here with gcc against `nccl.h` /
 * `cuda_runtime_api.h` and prints `sizeof` and each field's `offsetof` and size (a field the header lacks
 * fails the build); these tables must also cover the struct without gaps, since the bindings build the
 * whole struct, so a field the table lacks shows up too. For `ncclConfig_t`, the bytes of
 * `NCCL_CONFIG_INITIALIZER` are compared with `buildNcclConfig()`'s. (The ibverbs tables have their own
 * probe, `ibverbs/layout_test.ts`, which lists only the fields used and checks the constants too.)
 */
import assert from "node:assert/strict";
import { fieldNames, type StructLayout, structLayout } from "../../ffi/_layout.ts";
import { CUDA_POINTER_ATTRIBUTES } from "../../ffi/cudart/layout.ts";
import {
  buildNcclConfig,
  NCCL_CONFIG_LAYOUT,
  NCCL_CONFIG_VERSION,
  ncclConfigLayoutFor,
} from "../../ffi/nccl/config.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { CUDA_INCLUDE, NCCL_INCLUDE } from "../_util/gpu.ts";
import { differences, layoutLines, layoutStatements, probeProgram } from "./_layout_probe.ts";
import { compile } from "./ibverbs/_cc.ts";

const GCC_MISSING = hasCommand("gcc") ? undefined : "gcc not found (apt-get install gcc)";

// Stand-ins for the CUDA headers nccl.h includes, when the CUDA toolkit is not installed: nccl.h needs
// only cudaStream_t from them.
const CUDA_STUBS: Record<string, string> = {
  "cuda_runtime.h": "typedef struct CUstream_st *cudaStream_t;\n",
  "cuda_fp16.h": "",
  "cuda_bf16.h": "",
  "cuda_fp8.h": "",
};

/** Statements printing the bytes of `initializer` as one line `init xx xx ...`. */
function initializerStatements(type: string, initializer: string): string[] {
  return [
    `  ${type} init = ${initializer};`,
    "  const unsigned char *p = (const unsigned char *)&init;",
    '  printf("init");',
    '  for (size_t i = 0; i < sizeof init; i++) printf(" %02x", p[i]);',
    '  printf("\\n");',
  ];
}

/** Builds and runs a probe, and returns the lines it printed. */
async function measure(source: string, includes: readonly string[]): Promise<string[]> {
  await using probe = await compile(source, { args: includes.map((i) => `-I${i}`) });
  const run = await new Deno.Command(probe.path, { stdout: "piped" }).output();
  assert.ok(run.success, `the probe exited with ${run.code}`);
  return new TextDecoder().decode(run.stdout).trim().split("\n");
}

/** Where a table leaves a gap or overlaps: a field of the header missing from it would. */
function gaps(layout: StructLayout): string[] {
  const wrong: string[] = [];
  let end = 0;
  for (const [name, { offset, size }] of Object.entries(layout.fields)) {
    if (offset !== end) wrong.push(`${layout.type}.${name}: expected it at ${end}, found it at ${offset}`);
    end = offset + size;
  }
  if (end !== layout.size) {
    wrong.push(`${layout.type}: expected the fields to end at ${layout.size}, found ${end}`);
  }
  return wrong;
}

Deno.test("structLayout() keeps the table's order and refuses fields outside the struct", () => {
  const s = structLayout("struct s", 16, { b: [8, 8, "pointer"], a: [0, 4] });
  assert.deepEqual(fieldNames(s), ["b", "a"]);
  assert.deepEqual(s.fields.b, { offset: 8, size: 8, kind: "pointer" });
  assert.deepEqual(s.fields.a, { offset: 0, size: 4 });
  assert.ok(Object.isFrozen(s) && Object.isFrozen(s.fields) && Object.isFrozen(s.fields.a));
  assert.throws(
    () => structLayout("struct s", 16, { x: [12, 8] }),
    /^RangeError: Invalid field struct s\.x: expected it to end within sizeof 16, found it ending at 20$/,
  );
  assert.throws(
    () => structLayout("struct s", 16, { x: [-1, 4] }),
    /^RangeError: Invalid field struct s\.x: expected a non-negative offset and a positive size, found offset -1, size 4$/,
  );
  assert.throws(
    () => structLayout("struct s", 0, {}),
    /^RangeError: Invalid sizeof struct s: expected a positive/,
  );
});

/** `NCCL_VERSION_CODE` of the `nccl.h` in `include`. */
function headerVersion(include: string): number {
  const text = Deno.readTextFileSync(`${include}/nccl.h`);
  const m = /#define NCCL_VERSION_CODE (\d+)/.exec(text);
  assert.ok(m, `${include}/nccl.h defines no NCCL_VERSION_CODE`);
  return Number(m[1]);
}

gatedTest(
  "NCCL_CONFIG_LAYOUT and buildNcclConfig() match nccl.h's ncclConfig_t and NCCL_CONFIG_INITIALIZER",
  { missing: GCC_MISSING ?? (NCCL_INCLUDE ? undefined : "nccl.h not found: set DCOMM_NCCL_INCLUDE") },
  async () => {
    const includes = [NCCL_INCLUDE as string];
    if (CUDA_INCLUDE) includes.push(CUDA_INCLUDE);
    else {
      const stubs = await Deno.makeTempDir({ prefix: "dcomm-cuda-stubs-" });
      for (const [name, text] of Object.entries(CUDA_STUBS)) {
        await Deno.writeTextFile(`${stubs}/${name}`, text);
      }
      includes.push(stubs);
    }
    // An older nccl.h (torch's 2.28.9, say) declares a prefix of the 2.30 struct: the fields it has.
    const version = headerVersion(NCCL_INCLUDE as string);
    const layout = ncclConfigLayoutFor(version);
    const source = probeProgram(["nccl.h"], [
      ...layoutStatements([layout]),
      ...initializerStatements(layout.type, "NCCL_CONFIG_INITIALIZER"),
    ]);
    const measured = await measure(source, includes);
    const init = measured.pop() ?? "";
    assert.deepEqual(differences(layoutLines([layout]), measured), []);
    assert.deepEqual(gaps(layout), []);
    if (version >= NCCL_CONFIG_VERSION) assert.equal(layout.size, NCCL_CONFIG_LAYOUT.size);
    assert.match(init, /^init( [0-9a-f]{2})+$/);
    const bytes = new Uint8Array(init.split(" ").slice(1).map((h) => parseInt(h, 16)));
    // buildNcclConfig() always builds the 2.30 struct (a library copies min(size, its sizeof)): its head
    // is the header's initializer but for `size` and `version`, which declare the 2.30 layout.
    const built = buildNcclConfig().bytes.slice(0, layout.size);
    const view = new DataView(built.buffer);
    assert.equal(view.getBigUint64(0, true), BigInt(NCCL_CONFIG_LAYOUT.size));
    assert.equal(view.getUint32(12, true), NCCL_CONFIG_VERSION);
    view.setBigUint64(0, BigInt(layout.size), true);
    view.setUint32(12, version, true);
    assert.deepEqual(built, bytes, "buildNcclConfig() bytes differ from NCCL_CONFIG_INITIALIZER");
  },
);

gatedTest(
  "CUDA_POINTER_ATTRIBUTES matches cuda_runtime_api.h's struct cudaPointerAttributes",
  {
    missing: GCC_MISSING ??
      (CUDA_INCLUDE ? undefined : "cuda_runtime_api.h not found (no CUDA toolkit; set CUDA_HOME)"),
    ciCanSatisfy: GCC_MISSING !== undefined,
  },
  async () => {
    const source = probeProgram(["cuda_runtime_api.h"], layoutStatements([CUDA_POINTER_ATTRIBUTES]));
    const measured = await measure(source, [CUDA_INCLUDE as string]);
    assert.deepEqual(differences(layoutLines([CUDA_POINTER_ATTRIBUTES]), measured), []);
    assert.deepEqual(gaps(CUDA_POINTER_ATTRIBUTES), []);
  },
);
