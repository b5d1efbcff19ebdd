import assert from "node:assert/strict";
import { doctor, formatDoctor, resolveLibraryFile } from "../../cli/doctor.ts";
import { gatedTest } from "../_util/skip.ts";
import { CUDART_MISSING, GPU_MISSING, GPU_PRESENT, NCCL_MISSING } from "../_util/gpu.ts";
import { nccl } from "../../ffi/nccl/nccl.ts";

const DOCTOR = new URL("../../cli/doctor.ts", import.meta.url).pathname;

async function runDoctor(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", DOCTOR, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout) };
}

Deno.test("doctor() reports Deno and every backend, and never throws", async () => {
  const report = await doctor();
  assert.equal(report.deno.version, Deno.version.deno);
  assert.deepEqual(Object.keys(report.backends).sort(), ["cpu", "mpi", "nccl"]);
  assert.equal(report.backends.cpu.ok, true, report.backends.cpu.reason);
  assert.deepEqual(report.libraries.map((l) => l.name), ["NCCL", "CUDA runtime", "libibverbs", "MPI"]);
  for (const lib of report.libraries) assert.ok(lib.found ? lib.path : lib.problem, lib.name);
  const text = formatDoctor(report);
  for (
    const section of [
      "Deno",
      "Libraries",
      "GPUs",
      "NCCL features",
      "NCCL tuning",
      "RDMA and GPUDirect RDMA",
      "Environment",
      "Backends",
    ]
  ) {
    assert.ok(text.includes(`\n${section}`), `section ${section}`);
  }
});

gatedTest("doctor() says why the nccl backend cannot run on a machine without a GPU", {
  missing: NCCL_MISSING ?? GPU_PRESENT,
  ciCanSatisfy: NCCL_MISSING !== undefined,
}, async () => {
  const report = await doctor();
  const ncclLib = report.libraries.find((l) => l.name === "NCCL");
  assert.equal(ncclLib?.found, true);
  assert.match(ncclLib?.version ?? "", /^2\.\d+\.\d+$/);
  assert.equal(report.cuda.available, false);
  assert.match(report.cuda.reason ?? "", /cudaErrorInsufficientDriver \(35\)/);
  assert.equal(report.gpus.length, 0);
  assert.equal(report.backends.nccl.ok, false);
  assert.match(
    report.backends.nccl.reason ?? "",
    /no usable GPU: cudaGetDeviceCount failed: cudaErrorInsufficientDriver \(35\)/,
  );
  assert.ok(report.ncclFeatures.length >= 10);
  assert.ok(report.ncclFeatures.some((f) => f.feature === "bfloat16" && f.since === "2.10" && f.supported));
  // The peer-memory files NCCL checks are reported, found or not.
  assert.match(formatDoctor(report), /\/sys\/module\/nvidia_peermem\/version/);
});

gatedTest(
  "doctor() lists the GPUs when there are some",
  { missing: GPU_MISSING, ciCanSatisfy: false },
  async () => {
    const report = await doctor();
    assert.equal(report.cuda.available, true);
    assert.ok(report.gpus.length > 0);
    for (const g of report.gpus) {
      assert.match(g.computeCapability ?? "", /^\d+\.\d+$/);
      assert.match(g.pciBusId ?? "", /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]$/i);
      assert.ok((g.totalMemory ?? 0) > 0);
    }
  },
);

gatedTest("the doctor CLI exits 0 for cpu, 1 for nccl without a GPU, and hides secrets", {
  missing: NCCL_MISSING ?? GPU_PRESENT,
  ciCanSatisfy: NCCL_MISSING !== undefined,
}, async () => {
  const env = { DCOMM_STORE_SECRET: "hunter2", NCCL_PROTO: "Simple" };
  const cpu = await runDoctor([], env);
  assert.equal(cpu.code, 0, cpu.stdout);
  assert.match(cpu.stdout, /DCOMM_STORE_SECRET\s+\(set, hidden\)/);
  assert.ok(!cpu.stdout.includes("hunter2"));
  assert.match(cpu.stdout, /NCCL_PROTO\s+Simple/);
  const nccl = await runDoctor(["--backend", "nccl", "--json"], env);
  assert.equal(nccl.code, 1);
  const json = JSON.parse(nccl.stdout);
  assert.equal(json.backends.nccl.ok, false);
  assert.equal(json.env.DCOMM_STORE_SECRET, "(set, hidden)");
  const bad = await runDoctor(["--backend", "gloo"]);
  assert.equal(bad.code, 2);
});

gatedTest("resolveLibraryFile() follows a bare soname through the ldconfig cache", {
  missing: CUDART_MISSING,
  ciCanSatisfy: false,
}, () => {
  const file = resolveLibraryFile("libcudart.so.13");
  if (file !== "libcudart.so.13") assert.match(file, /^\/.*libcudart\.so\.13/);
});

Deno.test("the doctor CLI lists every path it tried for a library it cannot open, in text and JSON", async () => {
  // A file that is not a library: the locator tries it alone and fails, whether or not NCCL is installed.
  const dir = await Deno.makeTempDir();
  try {
    const fake = `${dir}/libnccl.so.2`;
    await Deno.writeTextFile(fake, "not an ELF file");
    const env = { DCOMM_NCCL_PATH: fake };
    const json = await runDoctor(["--backend", "nccl", "--json"], env);
    assert.equal(json.code, 1, json.stdout);
    const report = JSON.parse(json.stdout);
    const lib = report.libraries.find((l: { name: string }) => l.name === "NCCL");
    assert.equal(lib.found, false);
    assert.equal(lib.tried.length, 1, `expected one path tried, found ${JSON.stringify(lib.tried)}`);
    assert.ok(lib.tried[0].startsWith(fake), lib.tried[0]);
    assert.match(lib.problem, /Tried:\n {2}\S/);
    assert.match(lib.problem, /\nFix: set DCOMM_NCCL_PATH/);
    assert.match(
      report.backends.nccl.reason,
      /^Cannot find NCCL \(libnccl\) \(1 path tried, listed under Libraries\)$/,
    );

    const text = await runDoctor(["--backend", "nccl"], env);
    assert.equal(text.code, 1, text.stdout);
    const lines = text.stdout.split("\n");
    const at = lines.findIndex((l) =>
      /^ {2}NCCL +not usable: Cannot find NCCL \(libnccl\)\. Tried:$/.test(l)
    );
    assert.ok(at >= 0, `expected the NCCL line, found:\n${text.stdout}`);
    assert.equal(lines[at + 1], `${" ".repeat(25)}${lib.tried[0]}`);
    assert.match(lines[at + 2], /^ {25}Fix: set DCOMM_NCCL_PATH to the library's path/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

gatedTest("doctor() reports every path tried for NCCL when it is not installed", {
  missing: NCCL_MISSING === undefined ? "NCCL is installed, so its miss cannot be observed" : undefined,
  ciCanSatisfy: false,
}, async () => {
  const report = await doctor();
  const lib = report.libraries.find((l) => l.name === "NCCL");
  assert.equal(lib?.found, false);
  assert.ok((lib?.tried?.length ?? 0) > 0, `expected paths tried, found ${JSON.stringify(lib)}`);
  const text = formatDoctor(report);
  for (const path of lib?.tried ?? []) assert.ok(text.includes(path), `${path} missing from:\n${text}`);
});

Deno.test("the doctor CLI reports an override that names no file as the library's error, not another copy found", async () => {
  // A pip copy of NCCL on PYTHONPATH (the real one when it loads here, else a stand-in file): the copy
  // the locator found, and doctor reported, in place of the DCOMM_NCCL_PATH it was given.
  const dir = await Deno.makeTempDir();
  try {
    const pipLib = `${dir}/site/nvidia/nccl/lib`;
    await Deno.mkdir(pipLib, { recursive: true });
    const real = NCCL_MISSING === undefined ? resolveLibraryFile(nccl().path) : undefined;
    if (real?.startsWith("/")) await Deno.symlink(real, `${pipLib}/libnccl.so.2`);
    else await Deno.writeTextFile(`${pipLib}/libnccl.so.2`, "a stand-in for pip's libnccl");
    const missing = `${dir}/nonexistent/libnccl.so.2`;
    const env = { DCOMM_NCCL_PATH: missing, PYTHONPATH: `${dir}/site` };
    const first = `Cannot find NCCL (libnccl): DCOMM_NCCL_PATH is set to ${missing}, and no file is there`;

    const json = await runDoctor(["--backend", "nccl", "--json"], env);
    assert.equal(json.code, 1, json.stdout);
    const report = JSON.parse(json.stdout);
    const lib = report.libraries.find((l: { name: string }) => l.name === "NCCL");
    assert.equal(lib.found, false, `expected NCCL not found, found ${JSON.stringify(lib)}`);
    assert.equal(lib.path, undefined);
    assert.equal(lib.problem.split("\n")[0], `${first}. Tried:`);
    assert.deepEqual(lib.tried, [`${missing} (from DCOMM_NCCL_PATH: no such file or folder)`]);
    assert.ok(!lib.problem.includes(pipLib), lib.problem);
    assert.equal(report.backends.nccl.ok, false);
    assert.equal(report.backends.nccl.reason, `${first} (1 path tried, listed under Libraries)`);
    assert.deepEqual(report.ncclFeatures, []);

    const text = await runDoctor(["--backend", "nccl"], env);
    assert.equal(text.code, 1, text.stdout);
    const lines = text.stdout.split("\n");
    const at = lines.findIndex((l) => /^ {2}NCCL +not usable: /.test(l));
    assert.ok(at >= 0, `expected the NCCL line, found:\n${text.stdout}`);
    assert.equal(lines[at], `  ${"NCCL".padEnd(22)} not usable: ${first}. Tried:`);
    assert.equal(lines[at + 1], `${" ".repeat(25)}${lib.tried[0]}`);
    assert.match(
      lines[at + 2],
      /^ {25}Fix: set DCOMM_NCCL_PATH to the library's file or to a folder holding/,
    );
    assert.ok(!text.stdout.includes(pipLib), text.stdout);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
