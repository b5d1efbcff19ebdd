/**
 * The TypeScript layout tables against the real headers: a C program generated from each table is built
 * here with gcc against `nccl.h` / `cuda_runtime_api.h` and prints `sizeof` and each field's `offsetof`
 * and size (a field the header lacks fails the build); the tables must also cover the struct without
 * gaps, so a field the table lacks shows up too. For `ncclConfig_t`, the bytes of
 * `NCCL_CONFIG_INITIALIZER` are compared with `buildNcclConfig()`'s.
 */
import assert from "node:assert/strict";
import type { StructLayout } from "../../ffi/_layout.ts";
import { CUDA_POINTER_ATTRIBUTES } from "../../ffi/cudart/layout.ts";
import { buildNcclConfig, NCCL_CONFIG_LAYOUT } from "../../ffi/nccl/config.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { CUDA_INCLUDE, NCCL_INCLUDE } from "../_util/gpu.ts";

const GCC_MISSING = hasCommand("gcc") ? undefined : "gcc not found (apt-get install gcc)";

// Stand-ins for the CUDA headers nccl.h includes, when the CUDA toolkit is not installed: nccl.h needs
// only cudaStream_t from them.
const CUDA_STUBS: Record<string, string> = {
  "cuda_runtime.h": "typedef struct CUstream_st *cudaStream_t;\n",
  "cuda_fp16.h": "",
  "cuda_bf16.h": "",
  "cuda_fp8.h": "",
};

interface Measured {
  size: number;
  fields: Map<string, { offset: number; size: number }>;
  init?: Uint8Array;
}

function program(header: string, type: string, layout: StructLayout, initializer?: string): string {
  const lines = [
    "#include <stdio.h>",
    "#include <stddef.h>",
    `#include <${header}>`,
    `#define FIELD(f) printf("field %s %zu %zu\\n", #f, offsetof(${type}, f), sizeof(((${type} *)0)->f))`,
    "int main(void) {",
    `  printf("size %zu\\n", sizeof(${type}));`,
    ...layout.fields.map((f) => `  FIELD(${f.name});`),
  ];
  if (initializer) {
    lines.push(
      `  ${type} init = ${initializer};`,
      "  const unsigned char *p = (const unsigned char *)&init;",
      '  printf("init");',
      '  for (size_t i = 0; i < sizeof init; i++) printf(" %02x", p[i]);',
      '  printf("\\n");',
    );
  }
  lines.push("  return 0;", "}");
  return lines.join("\n") + "\n";
}

async function measure(source: string, includes: string[]): Promise<Measured> {
  const dir = await Deno.makeTempDir({ prefix: "dcomm-layout-" });
  try {
    await Deno.writeTextFile(`${dir}/layout.c`, source);
    const build = await new Deno.Command("gcc", {
      args: [
        "-std=c11",
        "-Wall",
        "-Werror",
        ...includes.map((i) => `-I${i}`),
        `${dir}/layout.c`,
        "-o",
        `${dir}/layout`,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!build.success) throw new Error(`gcc failed:\n${new TextDecoder().decode(build.stderr)}\n${source}`);
    const run = await new Deno.Command(`${dir}/layout`, { stdout: "piped" }).output();
    assert.ok(run.success);
    const out: Measured = { size: -1, fields: new Map() };
    for (const line of new TextDecoder().decode(run.stdout).trim().split("\n")) {
      const [kind, ...rest] = line.split(" ");
      if (kind === "size") out.size = Number(rest[0]);
      else if (kind === "field") out.fields.set(rest[0], { offset: Number(rest[1]), size: Number(rest[2]) });
      else if (kind === "init") out.init = new Uint8Array(rest.map((h) => parseInt(h, 16)));
    }
    return out;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function compare(layout: StructLayout, measured: Measured): void {
  const report = layout.fields.map((f) => {
    const c = measured.fields.get(f.name);
    return `${f.name}: TS @${f.offset}(${f.size}) C @${c?.offset}(${c?.size})`;
  });
  console.log(`${layout.name}: sizeof TS ${layout.size}, C ${measured.size}\n  ${report.join("\n  ")}`);
  assert.equal(measured.size, layout.size, `sizeof ${layout.name}`);
  let end = 0;
  for (const f of layout.fields) {
    assert.deepEqual(
      measured.fields.get(f.name),
      { offset: f.offset, size: f.size },
      `${layout.name}.${f.name}`,
    );
    // Contiguous: a field of the header missing from the table would leave a gap.
    assert.equal(f.offset, end, `${layout.name}.${f.name} does not follow the previous field`);
    end = f.offset + f.size;
  }
  assert.equal(end, layout.size, `${layout.name}'s fields end at ${end}, sizeof is ${layout.size}`);
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
    const measured = await measure(
      program("nccl.h", "ncclConfig_t", NCCL_CONFIG_LAYOUT, "NCCL_CONFIG_INITIALIZER"),
      includes,
    );
    compare(NCCL_CONFIG_LAYOUT, measured);
    const ours = buildNcclConfig().bytes;
    console.log(
      `NCCL_CONFIG_INITIALIZER: ${
        [...(measured.init ?? [])].map((b) => b.toString(16).padStart(2, "0")).join(" ")
      }`,
    );
    assert.deepEqual(ours, measured.init, "buildNcclConfig() bytes differ from NCCL_CONFIG_INITIALIZER");
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
    const measured = await measure(
      program("cuda_runtime_api.h", "struct cudaPointerAttributes", CUDA_POINTER_ATTRIBUTES),
      [CUDA_INCLUDE as string],
    );
    compare(CUDA_POINTER_ATTRIBUTES, measured);
  },
);
