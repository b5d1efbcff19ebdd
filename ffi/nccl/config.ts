/**
 * `ncclConfig_t` in ONE fixed layout: the 96-byte struct of `nccl.h` 2.30 (version code 23007), every
 * field the caller leaves out set to `NCCL_CONFIG_UNDEF_INT` (INT_MIN) or NULL, exactly as
 * `NCCL_CONFIG_INITIALIZER` does. Every library from 2.14 accepts it: a library copies
 * `min(size, its own sizeof)` bytes, checks `magic`, and resets fields newer than `version` to its
 * defaults, so older libraries ignore the tail and newer ones default what this layout lacks.
 *
 * @module
 */
import { fieldNames, type FieldSpec, type StructLayout, structLayout } from "../_layout.ts";
import { UnsupportedError } from "../../core/errors.ts";
import { Struct } from "../_struct.ts";
import { NCCL_API_MAGIC, NCCL_CONFIG_UNDEF_INT, ncclVersionCode, parseNcclVersion } from "./constants.ts";

/** The layout of `ncclConfig_t` 2.30 (96 bytes, align 8), measured against `nccl.h` 2.30.7. */
export const NCCL_CONFIG_LAYOUT: StructLayout<
  "size" | "magic" | "version" | NcclConfigIntField | "netName" | "commName"
> = structLayout("ncclConfig_t", 96, {
  // Each field with the release that added it.
  size: [0, 8, "usize"], // 2.14
  magic: [8, 4, "u32"], // 2.14
  version: [12, 4, "u32"], // 2.14
  blocking: [16, 4, "i32"], // 2.14
  cgaClusterSize: [20, 4, "i32"], // 2.17
  minCTAs: [24, 4, "i32"], // 2.17
  maxCTAs: [28, 4, "i32"], // 2.17
  netName: [32, 8, "pointer"], // 2.17
  splitShare: [40, 4, "i32"], // 2.18
  trafficClass: [44, 4, "i32"], // 2.25
  commName: [48, 8, "pointer"], // 2.27
  collnetEnable: [56, 4, "i32"], // 2.27
  CTAPolicy: [60, 4, "i32"], // 2.27
  shrinkShare: [64, 4, "i32"], // 2.27
  nvlsCTAs: [68, 4, "i32"], // 2.27
  nChannelsPerNetPeer: [72, 4, "i32"], // 2.28
  nvlinkCentricSched: [76, 4, "i32"], // 2.28
  graphUsageMode: [80, 4, "i32"], // 2.29
  numRmaCtx: [84, 4, "i32"], // 2.29
  maxP2pPeers: [88, 4, "i32"], // 2.30
  graphStreamOrdering: [92, 4, "i32"], // 2.30.5
});

/**
 * The release that added each field of {@linkcode NCCL_CONFIG_LAYOUT} (a version code): a library older
 * than a field ignores it, so {@linkcode buildNcclConfig} refuses to set one the loaded library lacks, and
 * {@linkcode ncclConfigLayoutFor} gives the struct an older `nccl.h` declares.
 */
export const NCCL_CONFIG_SINCE: Readonly<Record<keyof typeof NCCL_CONFIG_LAYOUT.fields, number>> = Object
  .freeze({
    size: ncclVersionCode(2, 14),
    magic: ncclVersionCode(2, 14),
    version: ncclVersionCode(2, 14),
    blocking: ncclVersionCode(2, 14),
    cgaClusterSize: ncclVersionCode(2, 17),
    minCTAs: ncclVersionCode(2, 17),
    maxCTAs: ncclVersionCode(2, 17),
    netName: ncclVersionCode(2, 17),
    splitShare: ncclVersionCode(2, 18),
    trafficClass: ncclVersionCode(2, 25),
    commName: ncclVersionCode(2, 27),
    collnetEnable: ncclVersionCode(2, 27),
    CTAPolicy: ncclVersionCode(2, 27),
    shrinkShare: ncclVersionCode(2, 27),
    nvlsCTAs: ncclVersionCode(2, 27),
    nChannelsPerNetPeer: ncclVersionCode(2, 28),
    nvlinkCentricSched: ncclVersionCode(2, 28),
    graphUsageMode: ncclVersionCode(2, 29),
    numRmaCtx: ncclVersionCode(2, 29),
    maxP2pPeers: ncclVersionCode(2, 30),
    graphStreamOrdering: ncclVersionCode(2, 30, 5),
  });

/**
 * The `ncclConfig_t` of the `nccl.h` of release `version`: the fields of {@linkcode NCCL_CONFIG_LAYOUT}
 * that release has, at the same offsets (every release appends), `sizeof` rounded up to 8.
 *
 * @param version An NCCL version code (2.14 or newer).
 * @returns The layout.
 * @throws {RangeError} Before 2.14, which has no `ncclConfig_t`.
 *
 * @example The struct of NCCL 2.28
 * ```ts
 * import { ncclConfigLayoutFor } from "./config.ts";
 * import { ncclVersionCode } from "./constants.ts";
 * import assert from "node:assert/strict";
 * const layout = ncclConfigLayoutFor(ncclVersionCode(2, 28, 9));
 * assert.equal(layout.size, 80);
 * assert.equal("maxP2pPeers" in layout.fields, false);
 * ```
 */
export function ncclConfigLayoutFor(version: number): StructLayout<string> {
  if (version < ncclVersionCode(2, 14)) {
    throw new RangeError(`NCCL has no ncclConfig_t before 2.14: found version code ${version}`);
  }
  const kept: Record<string, FieldSpec> = {};
  let end = 0;
  for (const name of fieldNames(NCCL_CONFIG_LAYOUT)) {
    if (NCCL_CONFIG_SINCE[name] > version) continue;
    const { offset, size, kind } = NCCL_CONFIG_LAYOUT.fields[name];
    kept[name] = kind === undefined ? [offset, size] : [offset, size, kind];
    end = Math.max(end, offset + size);
  }
  return structLayout(NCCL_CONFIG_LAYOUT.type, Math.ceil(end / 8) * 8, kept);
}

/** The `version` this layout declares: `NCCL_VERSION(2,30,7)`, the header it was measured against. */
export const NCCL_CONFIG_VERSION: number = ncclVersionCode(2, 30, 7);

/**
 * The int fields a caller may set (everything after `version` except the two strings).
 *
 * @example Setting one field by name, through the `nccl` backend's tuning
 * ```ts
 * import { type NcclConfigIntField, type NcclTuning, tuningConfig } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const field: NcclConfigIntField = "cgaClusterSize";
 * const tuning: NcclTuning = { config: { [field]: 4 } }; // init({ backend: "nccl", nccl: { tuning } })
 * assert.deepEqual(tuningConfig(tuning), { cgaClusterSize: 4 });
 * ```
 */
export type NcclConfigIntField =
  | "blocking"
  | "cgaClusterSize"
  | "minCTAs"
  | "maxCTAs"
  | "splitShare"
  | "trafficClass"
  | "collnetEnable"
  | "CTAPolicy"
  | "shrinkShare"
  | "nvlsCTAs"
  | "nChannelsPerNetPeer"
  | "nvlinkCentricSched"
  | "graphUsageMode"
  | "numRmaCtx"
  | "maxP2pPeers"
  | "graphStreamOrdering";

/**
 * What an `ncclConfig_t` may set. Every field left out keeps the library's default (INT_MIN / NULL).
 * The library ignores fields newer than itself.
 *
 * @example At least 4 CTAs, over sockets, named in NCCL's logs
 * ```ts
 * import type { InitOptions } from "@dcomm/dcomm";
 * import { type NcclConfigOptions, tuningConfig } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const config: NcclConfigOptions = { minCTAs: 4, netName: "Socket", commName: "dp" };
 * const options: InitOptions = { backend: "nccl", nccl: { tuning: { maxCTAs: 16, config } } };
 * // Every communicator of the backend gets these fields in its ncclConfig_t.
 * assert.deepEqual(tuningConfig(options.nccl?.tuning), { maxCTAs: 16, ...config });
 * ```
 */
export type NcclConfigOptions = { readonly [K in NcclConfigIntField]?: number } & {
  /** The network plugin to use (`netName`, 2.17), e.g. `"IB"` or `"Socket"`. @default the library's choice */
  readonly netName?: string;
  /** A name for the communicator in NCCL's logs (`commName`, 2.27). @default none */
  readonly commName?: string;
};

/** A built `ncclConfig_t`: its bytes and the C strings its pointers point to. */
export interface NcclConfig {
  /** Exactly {@linkcode NCCL_CONFIG_LAYOUT}.size bytes. */
  readonly bytes: Uint8Array<ArrayBuffer>;
  /** The NUL-terminated strings `netName`/`commName` point to; keep them alive as long as `bytes`. */
  readonly strings: readonly Uint8Array[];
}

const encoder = new TextEncoder();

/** The fields a caller may set: all but the header the library reads first, in the struct's order. */
type Settable = Exclude<keyof typeof NCCL_CONFIG_LAYOUT.fields, "size" | "magic" | "version">;
const SETTABLE: readonly Settable[] = fieldNames(NCCL_CONFIG_LAYOUT).filter((name): name is Settable =>
  name !== "size" && name !== "magic" && name !== "version"
);

/**
 * Builds an `ncclConfig_t`: `NCCL_CONFIG_INITIALIZER` of the 2.30 layout, then the given fields.
 *
 * @param options The fields to set.
 * @param libraryVersion The loaded library's version code: a field set that it is older than is refused
 *   (it would silently ignore it). @default no check
 * @returns The bytes, and the strings they point to.
 * @throws {TypeError} If an int field is not a 32-bit integer or a field is unknown.
 * @throws {UnsupportedError} If a field set is newer than `libraryVersion`.
 *
 * @example Non-blocking init with at most 16 CTAs
 * ```ts
 * import { buildNcclConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 * const config = buildNcclConfig({ blocking: 0, maxCTAs: 16 });
 * const view = new DataView(config.bytes.buffer);
 * assert.equal(view.getInt32(16, true), 0); // blocking
 * assert.equal(view.getInt32(28, true), 16); // maxCTAs
 * assert.equal(view.getInt32(24, true), -2147483648); // minCTAs: undefined
 * ```
 */
export function buildNcclConfig(options: NcclConfigOptions = {}, libraryVersion?: number): NcclConfig {
  const given = options as Readonly<Record<string, unknown>>;
  for (const name of Object.keys(given)) {
    if (!(SETTABLE as readonly string[]).includes(name)) {
      throw new TypeError(
        `Unknown ncclConfig_t field: expected one of ${SETTABLE.join(", ")}, found ${name}`,
      );
    }
    const since = NCCL_CONFIG_SINCE[name as Settable];
    if (libraryVersion !== undefined && given[name] !== undefined && since > libraryVersion) {
      throw new UnsupportedError(
        `Cannot set ncclConfig_t.${name}: it needs NCCL ${parseNcclVersion(since).text} or newer, ` +
          `found ${parseNcclVersion(libraryVersion).text} (which would ignore it)`,
      );
    }
  }
  const config = new Struct(NCCL_CONFIG_LAYOUT)
    .setBig("size", BigInt(NCCL_CONFIG_LAYOUT.size))
    .set("magic", NCCL_API_MAGIC)
    .set("version", NCCL_CONFIG_VERSION);
  const strings: Uint8Array[] = [];
  for (const name of SETTABLE) {
    const value = given[name];
    if (NCCL_CONFIG_LAYOUT.fields[name].kind === "pointer") {
      if (value === undefined) continue; // NULL
      if (typeof value !== "string") {
        throw new TypeError(`Invalid ncclConfig_t.${name}: expected a string, found ${typeof value}`);
      }
      const s = new Uint8Array(encoder.encode(value).length + 1);
      encoder.encodeInto(value, s);
      strings.push(s);
      config.setPointer(name, Deno.UnsafePointer.of(s));
    } else if (value === undefined) {
      config.set(name, NCCL_CONFIG_UNDEF_INT);
    } else if (
      typeof value === "number" && Number.isInteger(value) && value >= -(2 ** 31) && value < 2 ** 31
    ) {
      config.set(name, value);
    } else {
      throw new TypeError(`Invalid ncclConfig_t.${name}: expected a 32-bit integer, found ${String(value)}`);
    }
  }
  return { bytes: config.bytes, strings };
}

/**
 * Reads the fields of an `ncclConfig_t` back (for reports and tests); INT_MIN reads as `undefined`.
 *
 * @param bytes The struct's bytes.
 * @returns Every int field that is set, by name, plus `size`, `magic` and `version`.
 * @throws {RangeError} If `bytes` is shorter than the layout.
 */
export function readNcclConfig(bytes: Uint8Array): Record<string, number | undefined> {
  if (bytes.length < NCCL_CONFIG_LAYOUT.size) {
    throw new RangeError(
      `Cannot read an ncclConfig_t: expected ${NCCL_CONFIG_LAYOUT.size} bytes, found ${bytes.length}`,
    );
  }
  // A copy: the view needs an ArrayBuffer of its own, and the caller's may be shared.
  const config = new Struct(NCCL_CONFIG_LAYOUT, bytes.slice(0, NCCL_CONFIG_LAYOUT.size).buffer);
  const out: Record<string, number | undefined> = {};
  for (const name of fieldNames(NCCL_CONFIG_LAYOUT)) {
    const { kind } = NCCL_CONFIG_LAYOUT.fields[name];
    if (kind === "usize") out[name] = Number(config.getBig(name));
    else if (kind === "u32") out[name] = config.get(name);
    else if (kind === "i32") {
      const v = config.getInt(name);
      out[name] = v === NCCL_CONFIG_UNDEF_INT ? undefined : v;
    }
  }
  return out;
}
