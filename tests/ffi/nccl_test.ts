import assert from "node:assert/strict";
import { NcclError, UnsupportedError } from "../../core/errors.ts";
import {
  buildNcclConfig,
  NCCL_CONFIG_LAYOUT,
  NCCL_CONFIG_VERSION,
  ncclConfigLayoutFor,
  readNcclConfig,
} from "../../ffi/nccl/config.ts";
import {
  compareNcclVersions,
  NCCL_UNIQUE_ID_BYTES,
  NcclResult,
  ncclVersionCode,
  parseNcclVersion,
} from "../../ffi/nccl/constants.ts";
import {
  featureSupport,
  featureTable,
  hasFeature,
  requireFeature,
  requireFp8Reduction,
} from "../../ffi/nccl/features.ts";
import {
  check,
  commInitRankConfig,
  errorString,
  getUniqueId,
  lastError,
  nccl,
  ncclError,
  resultName,
} from "../../ffi/nccl/nccl.ts";
import { gatedTest } from "../_util/skip.ts";
import { GPU_PRESENT, NCCL_INCLUDE, NCCL_MISSING } from "../_util/gpu.ts";

const lib = { missing: NCCL_MISSING };
const libNoGpu = { missing: NCCL_MISSING ?? GPU_PRESENT, ciCanSatisfy: NCCL_MISSING !== undefined };

Deno.test("ncclVersionCode() and parseNcclVersion() follow NCCL_VERSION's two encodings", () => {
  assert.equal(ncclVersionCode(2, 30, 7), 23007);
  assert.equal(ncclVersionCode(2, 8, 4), 2804);
  assert.equal(ncclVersionCode(2, 9, 6), 20906);
  assert.equal(parseNcclVersion(23007).text, "2.30.7");
  assert.equal(parseNcclVersion(2804).text, "2.8.4");
  assert.deepEqual(parseNcclVersion(20906), { major: 2, minor: 9, patch: 6, code: 20906, text: "2.9.6" });
  assert.ok(compareNcclVersions(2804, 20906) < 0);
  assert.ok(compareNcclVersions(23007, 22907) > 0);
  assert.equal(compareNcclVersions(21000, parseNcclVersion(21000)), 0);
  assert.throws(() => parseNcclVersion(0), RangeError);
});

gatedTest("nccl() reads the version at load: the header's NCCL_MAJOR.MINOR.PATCH", lib, () => {
  const { version, path } = nccl();
  assert.match(path, /libnccl/);
  let expected = "2.30.7";
  if (NCCL_INCLUDE) {
    const header = Deno.readTextFileSync(`${NCCL_INCLUDE}/nccl.h`);
    const part = (name: string): string => new RegExp(`#define ${name} (\\d+)`).exec(header)?.[1] ?? "?";
    expected = `${part("NCCL_MAJOR")}.${part("NCCL_MINOR")}.${part("NCCL_PATCH")}`;
  }
  assert.equal(version.text, expected);
  assert.equal(version.code, ncclVersionCode(version.major, version.minor, version.patch));
});

gatedTest("getUniqueId() gives 128 bytes, different each time, without a GPU", lib, () => {
  const a = getUniqueId();
  const b = getUniqueId();
  assert.equal(a.length, NCCL_UNIQUE_ID_BYTES);
  assert.equal(b.length, 128);
  assert.notDeepEqual(a, b);
  assert.ok(a.some((x) => x !== 0));
});

gatedTest(
  "commInitRankConfig() without a GPU fails with NcclError carrying NCCL's own reason",
  libNoGpu,
  () => {
    const id = getUniqueId();
    assert.throws(
      () => commInitRankConfig(1, id, 0, buildNcclConfig({ blocking: 0 })),
      (e: unknown) =>
        e instanceof NcclError && e.status === NcclResult.UnhandledCudaError && e.code === "NCCL" &&
        e.message.startsWith(
          "ncclCommInitRankConfig(nranks 1, rank 0) failed: ncclUnhandledCudaError (1): ",
        ) &&
        // ncclGetLastError: the CUDA failure behind the code.
        /NCCL: Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'/.test(e.message),
    );
    assert.match(lastError() ?? "", /Cuda failure/);
  },
);

gatedTest("commInitRankConfig() refuses an id that is not 128 bytes before calling NCCL", lib, () => {
  assert.throws(
    () => commInitRankConfig(1, new Uint8Array(64), 0, buildNcclConfig()),
    (e: unknown) => e instanceof RangeError && /expected 128 bytes, found 64/.test(e.message),
  );
});

gatedTest("check(), resultName() and errorString() use NCCL's strings", lib, () => {
  check(NcclResult.Success, "ncclNothing");
  assert.equal(resultName(7), "ncclInProgress");
  assert.equal(resultName(42), "ncclResult 42");
  assert.equal(errorString(NcclResult.InProgress), "NCCL operation in progress");
  assert.equal(errorString(NcclResult.RemoteError), "remote process exited or there was a network error");
  const e = ncclError(NcclResult.InvalidArgument, "ncclAllReduce");
  assert.ok(e instanceof NcclError && e.status === 4);
  assert.match(e.message, /^ncclAllReduce failed: ncclInvalidArgument \(4\): invalid argument/);
});

gatedTest("an empty ncclGroupStart()/ncclGroupEnd() succeeds without a GPU", lib, () => {
  const s = nccl().symbols;
  assert.equal(s.ncclGroupStart(), 0);
  assert.equal(s.ncclGroupEnd(), 0);
});

gatedTest("every feature of the loaded NCCL's release is present; newer ones name both versions", lib, () => {
  const { version, symbols } = nccl();
  for (const row of featureTable(version, symbols)) {
    const [major, minor, patch = 0] = row.since.split(".").map(Number);
    if (compareNcclVersions(version, ncclVersionCode(major, minor, patch)) >= 0) {
      assert.ok(row.supported, `${row.feature}: ${row.reason}`); // optional symbols included
    } else {
      assert.equal(row.reason, `needs NCCL ${row.since} or newer, found ${version.text}`, row.feature);
    }
  }
  assert.equal(typeof symbols.ncclAlltoAll, "function");
  assert.equal(typeof symbols.ncclCommSplit, "function");
});

Deno.test("requireFeature() rejects a library below the gate with both versions in the message", () => {
  const cases: [Parameters<typeof requireFeature>[0], number, string][] = [
    ["avg", ncclVersionCode(2, 9, 9), "2.10"],
    ["bfloat16", ncclVersionCode(2, 9, 6), "2.10"],
    ["preMulSum", ncclVersionCode(2, 10, 3), "2.11"],
    ["commSplit", ncclVersionCode(2, 17, 1), "2.18"],
    ["fp8", ncclVersionCode(2, 23, 4), "2.24"],
    ["alltoall", ncclVersionCode(2, 27, 7), "2.28"],
    ["nonblockingInit", ncclVersionCode(2, 13, 4), "2.14"],
    ["sendRecv", ncclVersionCode(2, 6, 4), "2.7"],
  ];
  for (const [feature, code, since] of cases) {
    const found = parseNcclVersion(code).text;
    assert.equal(hasFeature(feature, code), false, feature);
    assert.throws(
      () => requireFeature(feature, code, { what: "do it" }),
      (e: unknown) =>
        e instanceof UnsupportedError &&
        e.message.startsWith("Cannot do it: ") &&
        e.message.includes(`needs NCCL ${since} or newer, found ${found}`),
      feature,
    );
    assert.equal(hasFeature(feature, ncclVersionCode(2, 30, 7)), true, feature);
  }
});

Deno.test("featureSupport() reports a missing optional symbol as an unsupported feature", () => {
  const symbols = { ncclCommSplit: null, ncclAlltoAll: () => 0 };
  const split = featureSupport("commSplit", 23007, symbols);
  assert.equal(split.supported, false);
  assert.match(split.reason ?? "", /does not export ncclCommSplit/);
  assert.equal(featureSupport("alltoall", 23007, symbols).supported, true);
});

Deno.test("requireFp8Reduction() needs 2.24 and sm_90 on every GPU", () => {
  requireFp8Reduction(23007, [90, 100]);
  assert.throws(() => requireFp8Reduction(23007, [90, 80]), /sm_90 or newer, found sm_80/);
  assert.throws(
    () => requireFp8Reduction(ncclVersionCode(2, 23, 4), [90]),
    /needs NCCL 2\.24 or newer, found 2\.23\.4/,
  );
});

Deno.test("buildNcclConfig() is NCCL_CONFIG_INITIALIZER of the 2.30 layout, then the given fields", () => {
  const plain = readNcclConfig(buildNcclConfig().bytes);
  assert.equal(plain.size, 96);
  assert.equal(plain.magic, 0xcafebeef);
  assert.equal(plain.version, NCCL_CONFIG_VERSION);
  assert.equal(NCCL_CONFIG_VERSION, 23007);
  for (const [name, { kind }] of Object.entries(NCCL_CONFIG_LAYOUT.fields)) {
    if (kind === "i32") assert.equal(plain[name], undefined, name);
  }
  const set = readNcclConfig(buildNcclConfig({ blocking: 0, minCTAs: 2, maxCTAs: 16 }).bytes);
  assert.equal(set.blocking, 0);
  assert.equal(set.minCTAs, 2);
  assert.equal(set.maxCTAs, 16);
  assert.equal(set.splitShare, undefined);
  const named = buildNcclConfig({ commName: "world" });
  assert.equal(named.strings.length, 1);
  const pointer = new DataView(named.bytes.buffer).getBigUint64(48, true);
  assert.equal(
    Deno.UnsafePointerView.getCString(Deno.UnsafePointer.create(pointer) as Deno.PointerObject),
    "world",
  );
  assert.throws(() => buildNcclConfig({ maxCTAs: 1.5 }), /expected a 32-bit integer, found 1\.5/);
  assert.throws(() => buildNcclConfig({ magic: 1 } as never), /Unknown ncclConfig_t field/);
});

Deno.test("buildNcclConfig() refuses a field the library is older than; ncclConfigLayoutFor() is a release's struct", () => {
  const torch = ncclVersionCode(2, 28, 9); // torch 2.11's wheel
  assert.throws(
    () => buildNcclConfig({ maxP2pPeers: 4 }, torch),
    (e: unknown) =>
      e instanceof UnsupportedError &&
      e.message === "Cannot set ncclConfig_t.maxP2pPeers: it needs NCCL 2.30.0 or newer, found 2.28.9 " +
          "(which would ignore it)",
  );
  assert.equal(readNcclConfig(buildNcclConfig({ maxCTAs: 4 }, torch).bytes).maxCTAs, 4);
  buildNcclConfig({ maxP2pPeers: undefined }, torch); // unset is fine
  const old = ncclConfigLayoutFor(torch);
  assert.equal(old.size, 80);
  assert.deepEqual(Object.keys(old.fields).slice(-2), ["nChannelsPerNetPeer", "nvlinkCentricSched"]);
  for (const [name, field] of Object.entries(old.fields)) {
    assert.deepEqual(field, NCCL_CONFIG_LAYOUT.fields[name as keyof typeof NCCL_CONFIG_LAYOUT.fields]);
  }
  assert.deepEqual(ncclConfigLayoutFor(ncclVersionCode(2, 30, 7)), NCCL_CONFIG_LAYOUT);
  assert.equal(ncclConfigLayoutFor(ncclVersionCode(2, 14)).size, 24);
  assert.throws(() => ncclConfigLayoutFor(ncclVersionCode(2, 13, 4)), /no ncclConfig_t before 2\.14/);
});
