/**
 * `deno task doctor`: what is installed here and what can run. It prints Deno's version; each native
 * library's path and version (NCCL, the CUDA runtime, libibverbs, MPI); the GPUs (name when `nvidia-smi`
 * is present, compute capability, SM count, PCI bus id, memory); NCCL's feature gates as a table; RDMA
 * devices and the GPUDirect RDMA prerequisites (peer-memory module, dma-buf); the `NCCL_*`, `DCOMM_*` and
 * `CUDA_VISIBLE_DEVICES` variables set (secrets hidden); and for each backend (cpu, nccl, mpi) whether
 * it can run here and, if not, why.
 *
 * ```sh
 * deno task doctor                    # exit 0 if the cpu backend can run
 * deno task doctor --backend nccl     # exit 0 only if the nccl backend can run here
 * deno task doctor --json             # the same report as JSON
 * ```
 *
 * Nothing here fails because a library or a GPU is missing: each probe reports what it found.
 * The cpu probe runs a one-rank world (its store on 127.0.0.1, one all-reduce): loading the kernels
 * alone said "can run" where the communication thread could not start.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { LibraryNotFoundError } from "../core/errors.ts";
import { DeviceAttr } from "../ffi/cudart/constants.ts";
import { cudartPath, deviceAttribute } from "../ffi/cudart/cudart.ts";
import { type FeatureGate, type FeatureSupport, featureTable } from "../ffi/nccl/features.ts";
import { nccl } from "../ffi/nccl/nccl.ts";
import { type CudaStatus, cudaStatus, type DeviceInfo, deviceInfo } from "../gpu/device.ts";
import { ncclBackendMissing } from "../backend/nccl/create.ts";

export type { CudaStatus, DeviceInfo } from "../gpu/device.ts";
export type { FeatureGate, FeatureSupport, NcclFeature } from "../ffi/nccl/features.ts";

/**
 * The backends doctor judges.
 *
 * @example The backends that can run here
 * ```ts
 * import { type BackendName, doctor } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const { backends } = await doctor();
 * const usable = (Object.keys(backends) as BackendName[]).filter((name) => backends[name].ok);
 * assert.ok(usable.includes("cpu")); // the cpu backend runs wherever Deno does
 * ```
 */
export type BackendName = "cpu" | "nccl" | "mpi";

/**
 * Whether something was found, where, and its version or the problem.
 *
 * @example Each native library, found or not
 * ```ts
 * import { doctor, type LibraryReport } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const { libraries } = await doctor();
 * const line = (lib: LibraryReport): string =>
 *   lib.found ? `${lib.name} ${lib.version} at ${lib.path}` : `${lib.name}: ${lib.problem?.split("\n")[0]}`;
 * libraries.forEach((lib) => console.log(line(lib)));
 * assert.deepEqual(libraries.map((lib) => lib.name), ["NCCL", "CUDA runtime", "libibverbs", "MPI"]);
 * ```
 */
export interface LibraryReport {
  /** The library, e.g. `"NCCL"`. */
  readonly name: string;
  /** Whether it loaded. */
  readonly found: boolean;
  /** The path it loaded from (resolved through symlinks when possible). */
  readonly path?: string;
  /** Its version, as the library says it. */
  readonly version?: string;
  /**
   * Why it is missing or unusable. For a library that was not found this is the locator's whole message:
   * the first line, every path tried (one per line) and the fix.
   */
  readonly problem?: string;
  /** Every path tried, in order, when the library was not found. */
  readonly tried?: readonly string[];
}

/**
 * One GPU as doctor reports it.
 *
 * @example Every GPU CUDA sees (none without a usable GPU)
 * ```ts
 * import { doctor, type GpuReport } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const { cuda, gpus } = await doctor();
 * const line = (gpu: GpuReport): string =>
 *   gpu.problem ?? `GPU ${gpu.index}: ${gpu.name ?? "?"}, sm_${gpu.sm}, GPUDirect RDMA ${gpu.gpuDirectRdma}`;
 * gpus.forEach((gpu) => console.log(line(gpu)));
 * assert.equal(gpus.length, cuda.available ? cuda.deviceCount : 0);
 * ```
 */
export interface GpuReport extends Partial<DeviceInfo> {
  /** The device index. */
  readonly index: number;
  /** The GPU's name, from `nvidia-smi` when present. */
  readonly name?: string;
  /** `cudaDevAttrGPUDirectRDMASupported`. */
  readonly gpuDirectRdma?: boolean;
  /** Why it could not be described. */
  readonly problem?: string;
}

/**
 * What doctor found.
 *
 * @example The report as JSON (`deno task doctor --json`)
 * ```ts
 * import { doctor, type DoctorReport } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const report: DoctorReport = JSON.parse(JSON.stringify(await doctor()));
 * assert.equal(report.deno.version, Deno.version.deno);
 * assert.equal(report.backends.cpu.ok, true);
 * assert.equal(report.ncclFeatures.length === 0, !report.libraries[0].found); // no NCCL, no features
 * ```
 */
export interface DoctorReport {
  /** Deno and the platform. */
  readonly deno: {
    readonly version: string;
    readonly v8: string;
    readonly typescript: string;
    readonly target: string;
  };
  /** NCCL, the CUDA runtime, libibverbs and MPI. */
  readonly libraries: readonly LibraryReport[];
  /** The CUDA runtime's status. */
  readonly cuda: CudaStatus;
  /** Every GPU. */
  readonly gpus: readonly GpuReport[];
  /** NCCL's feature gates (empty without NCCL). */
  readonly ncclFeatures: readonly (FeatureSupport & FeatureGate)[];
  /** RDMA devices and GPUDirect RDMA prerequisites. */
  readonly rdma: {
    /** The RDMA devices' names, when they could be listed. */
    readonly devices: readonly string[];
    /** Why they could not be listed. */
    readonly problem?: string;
    /** The peer-memory module's version files found (legacy GPUDirect RDMA path). */
    readonly peerMemory: readonly { readonly file: string; readonly version: string }[];
    /** What was found about the dma-buf path, one line each. */
    readonly dmaBuf: readonly string[];
  };
  /** `NCCL_*`, `DCOMM_*` and `CUDA_VISIBLE_DEVICES` (secrets hidden). */
  readonly env: Readonly<Record<string, string>>;
  /** Whether each backend can run here, and why not. */
  readonly backends: Readonly<Record<BackendName, { readonly ok: boolean; readonly reason?: string }>>;
}

/**
 * Files whose presence means a GPU peer-memory module is loaded (as NCCL checks).
 *
 * @example Is a peer-memory module loaded?
 * ```ts
 * import { PEER_MEMORY_VERSION_FILES } from "@dcomm/dcomm/doctor";
 * const loaded = PEER_MEMORY_VERSION_FILES.filter((file) => {
 *   try {
 *     return Deno.statSync(file).isFile;
 *   } catch {
 *     return false;
 *   }
 * });
 * console.log(loaded.length ? `peer memory: ${loaded[0]}` : "no peer-memory module (dma-buf may work)");
 * ```
 */
export const PEER_MEMORY_VERSION_FILES: readonly string[] = [
  "/sys/module/nvidia_peermem/version",
  "/sys/kernel/mm/memory_peers/nv_mem/version",
  "/sys/kernel/mm/memory_peers/nvidia-peermem/version",
  "/sys/module/nv_peer_mem/version",
];

/**
 * The tuning variables the `nccl` backend's options set, shown in their own section.
 *
 * @example The variables of a tuning that sets every option
 * ```ts
 * import { TUNING_VARIABLES } from "@dcomm/dcomm/doctor";
 * import { tuningEnv } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const all = tuningEnv({ algo: "Ring", proto: "Simple", buffSize: 1 << 22, minCTAs: 2, maxCTAs: 8 });
 * assert.deepEqual(Object.keys(all), TUNING_VARIABLES);
 * ```
 */
export const TUNING_VARIABLES: readonly string[] = [
  "NCCL_ALGO",
  "NCCL_PROTO",
  "NCCL_BUFFSIZE",
  "NCCL_MIN_CTAS",
  "NCCL_MAX_CTAS",
];

function message(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0];
}

// A library that was not found: the locator's message has the paths tried after its first line, so
// cutting it there printed "Cannot find NCCL (libnccl). Tried:" and nothing after.
function missingLibrary(name: string, e: unknown): LibraryReport {
  if (e instanceof LibraryNotFoundError) {
    return { name, found: false, problem: e.message, tried: e.tried };
  }
  return { name, found: false, problem: message(e) };
}

function readText(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path).trim();
  } catch {
    return undefined;
  }
}

/**
 * The file a library path stands for: a path through its symlinks, a bare soname through the ldconfig
 * cache.
 *
 * @param path What the loader opened.
 * @returns The real file, or `path` itself when it cannot be resolved.
 *
 * @example
 * ```ts
 * import { resolveLibraryFile } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * assert.equal(resolveLibraryFile(Deno.execPath()), Deno.realPathSync(Deno.execPath()));
 * assert.equal(resolveLibraryFile("/nowhere/libmissing.so.1"), "/nowhere/libmissing.so.1"); // left as it is
 * ```
 */
export function resolveLibraryFile(path: string): string {
  let file = path;
  if (!path.includes("/")) {
    for (const ldconfig of ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]) {
      try {
        const out = new TextDecoder().decode(
          new Deno.Command(ldconfig, { args: ["-p"], stderr: "null" }).outputSync().stdout,
        );
        const line = out.split("\n").map((l) => l.trim()).find((l) => l.startsWith(`${path} (`));
        const m = line && /=>\s*(\S+)/.exec(line);
        if (m) file = m[1];
        break;
      } catch {
        continue;
      }
    }
  }
  try {
    return Deno.realPathSync(file);
  } catch {
    return file;
  }
}

function sonameVersion(file: string): string | undefined {
  return /\.so\.([\d.]+)$/.exec(file)?.[1];
}

function gpuNames(): Map<string, string> {
  const names = new Map<string, string>();
  try {
    const out = new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=pci.bus_id,name", "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
    }).outputSync();
    if (!out.success) return names;
    for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
      const [bus, ...name] = line.split(",");
      if (bus && name.length) names.set(busKey(bus), name.join(",").trim());
    }
  } catch {
    // No nvidia-smi: names are left out.
  }
  return names;
}

// nvidia-smi writes 00000000:19:00.0, CUDA 0000:19:00.0: compare bus:device.function.
function busKey(bus: string): string {
  return bus.trim().toLowerCase().split(":").slice(-2).join(":");
}

function environment(): Record<string, string> {
  let all: Record<string, string> = {};
  try {
    all = Deno.env.toObject();
  } catch {
    return {};
  }
  const out: Record<string, string> = {};
  for (const name of Object.keys(all).sort()) {
    if (!/^(NCCL_|DCOMM_)/.test(name) && name !== "CUDA_VISIBLE_DEVICES") continue;
    out[name] = /SECRET|TOKEN|PASSWORD|KEY/.test(name) ? "(set, hidden)" : all[name];
  }
  return out;
}

async function probeMpi(): Promise<LibraryReport> {
  try {
    const { mpi } = await import("../ffi/mpi/mpi.ts");
    const lib = mpi();
    return {
      name: "MPI",
      found: true,
      path: resolveLibraryFile(lib.path),
      version: lib.version.split("\n")[0].replace(/\s+/g, " ").trim(),
    };
  } catch (e) {
    return missingLibrary("MPI", e);
  }
}

async function probeRdma(): Promise<{ library: LibraryReport; devices: string[]; problem?: string }> {
  let ibverbsPath: () => string;
  let listDevices: () => { name: string }[];
  try {
    ({ ibverbsPath } = await import("../ffi/ibverbs/ibverbs.ts"));
    ({ listDevices } = await import("../ffi/ibverbs/verbs.ts"));
  } catch (e) {
    return {
      library: { name: "libibverbs", found: false, problem: message(e) },
      devices: [],
      problem: message(e),
    };
  }
  let library: LibraryReport;
  try {
    const file = resolveLibraryFile(ibverbsPath());
    const v = sonameVersion(file);
    // libibverbs.so.1.14.44.0 is rdma-core 44.
    const core = v?.split(".")[2];
    library = {
      name: "libibverbs",
      found: true,
      path: file,
      version: core ? `rdma-core ${core} (libibverbs ${v})` : v,
    };
  } catch (e) {
    return { library: missingLibrary("libibverbs", e), devices: [], problem: message(e) };
  }
  try {
    return { library, devices: listDevices().map((d) => d.name) };
  } catch (e) {
    return { library, devices: [], problem: message(e) };
  }
}

/** How long the cpu probe's one-rank world may take to start, run a call and close. */
const CPU_PROBE_MS = 20_000;

async function probeCpu(): Promise<{ ok: boolean; reason?: string }> {
  try {
    const { loadKernelModule } = await import("../wasm/loader.ts");
    await loadKernelModule();
  } catch (e) {
    return { ok: false, reason: `the WASM kernels do not load: ${message(e)}` };
  }
  // The kernels loading is not enough: imported from an https URL the kernels loaded while the
  // communication thread could not start. A one-rank world starts that thread and runs a call on it.
  // The deadline's timer also keeps the event loop alive until the world has closed: the store server is
  // unref'd by then, and under `deno test` the loop ended with doctor() still pending.
  const late =
    `a one-rank world should start, run a call and close within ${CPU_PROBE_MS} ms, found it running`;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<{ ok: boolean; reason: string }>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, reason: late }), CPU_PROBE_MS);
  });
  try {
    return await Promise.race([runOneRank(), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

async function runOneRank(): Promise<{ ok: boolean; reason?: string }> {
  try {
    const { init } = await import("../backend/init.ts");
    // env: {} so that a launcher's RANK or DCOMM_STORE_HOSTED around doctor cannot make this rank wait.
    await using pg = await init({
      rank: 0,
      worldSize: 1,
      initMethod: "tcp://127.0.0.1:0",
      env: {},
      timeoutMs: CPU_PROBE_MS,
    });
    const x = new Float32Array([1, 2]);
    await pg.allReduce(x);
    if (x[0] !== 1 || x[1] !== 2) {
      return {
        ok: false,
        reason: `a one-rank all-reduce of [1, 2] should leave [1, 2], found [${x.join(", ")}]`,
      };
    }
    return { ok: true };
  } catch (e) {
    return { ok: false, reason: `a one-rank world does not run: ${message(e)}` };
  }
}

/**
 * Probes this machine.
 *
 * @returns The report; no probe throws.
 *
 * @example Can the nccl backend run here, and if not, why?
 * ```ts
 * import { doctor } from "@dcomm/dcomm/doctor";
 * const { nccl } = (await doctor()).backends;
 * console.log(nccl.ok ? "the nccl backend can run here" : `no nccl backend: ${nccl.reason}`);
 * ```
 */
export async function doctor(): Promise<DoctorReport> {
  const libraries: LibraryReport[] = [];
  let ncclFeatures: (FeatureSupport & FeatureGate)[] = [];
  try {
    const lib = nccl();
    libraries.push({
      name: "NCCL",
      found: true,
      path: resolveLibraryFile(lib.path),
      version: lib.version.text,
    });
    ncclFeatures = featureTable(lib.version, lib.symbols);
  } catch (e) {
    libraries.push(missingLibrary("NCCL", e));
  }
  const cuda = cudaStatus();
  libraries.push(
    cuda.path
      ? {
        name: "CUDA runtime",
        found: true,
        path: resolveLibraryFile(cuda.path),
        version: `${cuda.runtimeVersion} (driver: ${cuda.driverVersion})`,
      }
      : cudartMissing(cuda.reason),
  );
  const rdma = await probeRdma();
  libraries.push(rdma.library);
  const mpiLib = await probeMpi();
  libraries.push(mpiLib);

  const gpus: GpuReport[] = [];
  if (cuda.available) {
    const names = gpuNames();
    for (let i = 0; i < cuda.deviceCount; i++) {
      try {
        const info = deviceInfo(i, { memory: true });
        let gdr: boolean | undefined;
        try {
          gdr = deviceAttribute(DeviceAttr.GPUDirectRDMASupported, i) === 1;
        } catch {
          gdr = undefined;
        }
        gpus.push({ ...info, name: names.get(busKey(info.pciBusId)), gpuDirectRdma: gdr });
      } catch (e) {
        gpus.push({ index: i, problem: message(e) });
      }
    }
  }

  const peerMemory = PEER_MEMORY_VERSION_FILES.flatMap((file) => {
    const version = readText(file);
    return version === undefined ? [] : [{ file, version }];
  });
  const dmaBuf: string[] = [];
  const core = Number(rdma.library.version?.match(/rdma-core (\d+)/)?.[1]);
  dmaBuf.push(
    !rdma.library.found
      ? "libibverbs: not found"
      : Number.isFinite(core)
      ? `libibverbs: rdma-core ${core} ${core >= 34 ? "has" : "lacks (needs 34)"} ibv_reg_dmabuf_mr`
      : "libibverbs: rdma-core version unknown",
  );
  dmaBuf.push(
    readText("/sys/kernel/dmabuf/buffers") !== undefined || exists("/sys/kernel/dmabuf")
      ? "kernel: /sys/kernel/dmabuf present (dma-buf framework built in)"
      : "kernel: /sys/kernel/dmabuf absent (dma-buf sysfs not exposed; the framework may still be present)",
  );
  dmaBuf.push(
    rdma.devices.length
      ? "NIC: dma-buf registration not probed by doctor (NCCL probes ibv_reg_dmabuf_mr at init)"
      : "NIC: none to probe",
  );
  if (gpus.length) {
    dmaBuf.push(
      `GPU: cudaDevAttrGPUDirectRDMASupported = ${
        gpus.map((g) => `${g.index}:${g.gpuDirectRdma ?? "?"}`).join(", ")
      }`,
    );
  } else dmaBuf.push("GPU: none usable");

  const ncclMissing = ncclBackendMissing();
  const ncclLib = libraries.find((l) => l.name === "NCCL") as LibraryReport;
  const backends = {
    cpu: await probeCpu(),
    nccl: ncclMissing === undefined
      ? { ok: true }
      : { ok: false, reason: ncclLib.tried ? notFound(ncclLib) : ncclMissing },
    mpi: mpiLib.found
      ? { ok: true, reason: "launch the ranks with the library's mpiexec" }
      : { ok: false, reason: mpiLib.tried ? notFound(mpiLib) : mpiLib.problem },
  };
  return {
    deno: {
      version: Deno.version.deno,
      v8: Deno.version.v8,
      typescript: Deno.version.typescript,
      target: `${Deno.build.os}-${Deno.build.arch}`,
    },
    libraries,
    cuda,
    gpus,
    ncclFeatures,
    rdma: { devices: rdma.devices, problem: rdma.problem, peerMemory, dmaBuf },
    env: environment(),
    backends,
  };
}

// cudaStatus() keeps only the first line of why libcudart did not open; the locator, asked again, says
// every path it tried.
function cudartMissing(reason: string | undefined): LibraryReport {
  try {
    cudartPath();
  } catch (e) {
    if (e instanceof LibraryNotFoundError) return missingLibrary("CUDA runtime", e);
  }
  return { name: "CUDA runtime", found: false, problem: reason };
}

// A backend's reason when its library is missing: the paths tried are listed once, under Libraries.
function notFound(lib: LibraryReport): string {
  const first = (lib.problem ?? "").split("\n")[0].replace(/\.? Tried:$/, "");
  const n = lib.tried?.length ?? 0;
  return `${first} (${n} path${n === 1 ? "" : "s"} tried, listed under Libraries)`;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

function gib(bytes: number | undefined): string {
  return bytes === undefined ? "?" : `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

/**
 * The report as text, one section per topic.
 *
 * @param report What {@linkcode doctor} found.
 * @returns The text.
 *
 * @example What `deno task doctor` prints
 * ```ts
 * import { doctor, formatDoctor } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const text = formatDoctor(await doctor());
 * assert.match(text, /^dcomm doctor\n\nDeno\n/);
 * assert.match(text, /\nNCCL features\n/);
 * ```
 */
export function formatDoctor(report: DoctorReport): string {
  const out: string[] = [];
  const kv = (k: string, v: string): void => {
    out.push(`  ${k.padEnd(22)} ${v}`);
  };
  out.push("dcomm doctor", "");
  out.push("Deno");
  kv("version", `${report.deno.version} (v8 ${report.deno.v8}, TypeScript ${report.deno.typescript})`);
  kv("target", report.deno.target);
  out.push("", "Libraries");
  for (const lib of report.libraries) {
    if (lib.found) kv(lib.name, `${lib.version ?? "version unknown"}  ${lib.path}`);
    else {
      // The locator's message is several lines (every path tried, then the fix): keep them all, indented
      // under the value column.
      const [first, ...rest] = (lib.problem ?? "").split("\n");
      kv(lib.name, `not usable: ${first}`);
      for (const line of rest) out.push(`${" ".repeat(25)}${line.trim()}`);
    }
  }
  out.push("", "GPUs");
  if (!report.cuda.available) kv("none usable", report.cuda.reason ?? "");
  for (const g of report.gpus) {
    if (g.problem) kv(`GPU ${g.index}`, `cannot describe: ${g.problem}`);
    else {
      kv(
        `GPU ${g.index}`,
        `${
          g.name ?? "(name: nvidia-smi not found)"
        }, sm_${g.sm} (${g.computeCapability}), ${g.multiProcessors} SMs, ` +
          `PCI ${g.pciBusId}, ${gib(g.totalMemory)} (${gib(g.freeMemory)} free)`,
      );
    }
  }
  out.push("", "NCCL features");
  if (report.ncclFeatures.length === 0) kv("(no NCCL)", "");
  for (const f of report.ncclFeatures) {
    out.push(
      `  ${f.supported ? "yes" : "no "}  ${f.since.padEnd(7)} ${f.description}${
        f.supported ? "" : ` — ${f.reason}; ${f.without}`
      }`,
    );
  }
  out.push("", "NCCL tuning (NCCL_* in this environment; NCCL picks what is unset)");
  for (const name of TUNING_VARIABLES) kv(name, report.env[name] ?? "(NCCL's choice)");
  out.push("", "RDMA and GPUDirect RDMA");
  kv(
    "devices",
    report.rdma.devices.length
      ? report.rdma.devices.join(", ")
      : `none (${report.rdma.problem ?? "empty list"})`,
  );
  kv(
    "peer memory module",
    report.rdma.peerMemory.length
      ? report.rdma.peerMemory.map((p) => `${p.file} = ${p.version}`).join("; ")
      : `not loaded (${PEER_MEMORY_VERSION_FILES.slice(0, 2).join(", ")} absent)`,
  );
  for (const line of report.rdma.dmaBuf) kv("dma-buf", line);
  out.push("", "Environment");
  const env = Object.entries(report.env);
  if (env.length === 0) kv("(none)", "no NCCL_*, DCOMM_* or CUDA_VISIBLE_DEVICES set");
  for (const [k, v] of env) kv(k, v);
  out.push("", "Backends");
  for (const [name, b] of Object.entries(report.backends)) {
    kv(name, b.ok ? `can run here${b.reason ? ` (${b.reason})` : ""}` : `cannot run here: ${b.reason}`);
  }
  return out.join("\n");
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      backend: { type: "string", default: "cpu" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(
      "Usage: deno task doctor [--backend cpu|nccl|mpi] [--json]\nExit code 0 if the backend can run here.",
    );
    Deno.exit(0);
  }
  const backend = values.backend as BackendName;
  if (!["cpu", "nccl", "mpi"].includes(backend)) {
    console.error(`Unknown --backend: expected cpu, nccl or mpi, found ${values.backend}`);
    Deno.exit(2);
  }
  const report = await doctor();
  console.log(values.json ? JSON.stringify(report, null, 2) : formatDoctor(report));
  Deno.exit(report.backends[backend].ok ? 0 : 1);
}
