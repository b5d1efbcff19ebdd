/**
 * `ncclConfig_t` in ONE fixed layout: the 96-byte struct of `nccl.h` 2.30 (version code 23007), every
 * field the caller leaves out set to `NCCL_CONFIG_UNDEF_INT` (INT_MIN) or NULL, exactly as
 * `NCCL_CONFIG_INITIALIZER` does. Every library from 2.14 accepts it: a library copies
 * `min(size, its own sizeof)` bytes, checks `magic`, and resets fields newer than `version` to its
 * defaults, so older libraries ignore the tail and newer ones default what this layout lacks.
 *
 * @module
 */
import type { FieldLayout, StructLayout } from "../_layout.ts";
import { NCCL_API_MAGIC, NCCL_CONFIG_UNDEF_INT, ncclVersionCode } from "./constants.ts";

/** A field of `ncclConfig_t`, with the NCCL release that added it. */
export interface ConfigField extends FieldLayout {
  /** The release that added the field, e.g. `"2.17"`. */
  readonly since: string;
}

/** The layout of `ncclConfig_t` 2.30 (96 bytes, align 8), measured against `nccl.h` 2.30.7. */
export const NCCL_CONFIG_LAYOUT: StructLayout<ConfigField> = {
  name: "ncclConfig_t",
  size: 96,
  fields: [
    { name: "size", offset: 0, size: 8, kind: "usize", since: "2.14" },
    { name: "magic", offset: 8, size: 4, kind: "u32", since: "2.14" },
    { name: "version", offset: 12, size: 4, kind: "u32", since: "2.14" },
    { name: "blocking", offset: 16, size: 4, kind: "i32", since: "2.14" },
    { name: "cgaClusterSize", offset: 20, size: 4, kind: "i32", since: "2.17" },
    { name: "minCTAs", offset: 24, size: 4, kind: "i32", since: "2.17" },
    { name: "maxCTAs", offset: 28, size: 4, kind: "i32", since: "2.17" },
    { name: "netName", offset: 32, size: 8, kind: "pointer", since: "2.17" },
    { name: "splitShare", offset: 40, size: 4, kind: "i32", since: "2.18" },
    { name: "trafficClass", offset: 44, size: 4, kind: "i32", since: "2.25" },
    { name: "commName", offset: 48, size: 8, kind: "pointer", since: "2.27" },
    { name: "collnetEnable", offset: 56, size: 4, kind: "i32", since: "2.27" },
    { name: "CTAPolicy", offset: 60, size: 4, kind: "i32", since: "2.27" },
    { name: "shrinkShare", offset: 64, size: 4, kind: "i32", since: "2.27" },
    { name: "nvlsCTAs", offset: 68, size: 4, kind: "i32", since: "2.27" },
    { name: "nChannelsPerNetPeer", offset: 72, size: 4, kind: "i32", since: "2.28" },
    { name: "nvlinkCentricSched", offset: 76, size: 4, kind: "i32", since: "2.28" },
    { name: "graphUsageMode", offset: 80, size: 4, kind: "i32", since: "2.29" },
    { name: "numRmaCtx", offset: 84, size: 4, kind: "i32", since: "2.29" },
    { name: "maxP2pPeers", offset: 88, size: 4, kind: "i32", since: "2.30" },
    { name: "graphStreamOrdering", offset: 92, size: 4, kind: "i32", since: "2.30.5" },
  ],
};

/** The `version` this layout declares: `NCCL_VERSION(2,30,7)`, the header it was measured against. */
export const NCCL_CONFIG_VERSION: number = ncclVersionCode(2, 30, 7);

/**
 * The int fields a caller may set (everything after `version` except the two strings).
 *
 * @example Setting one field by name
 * ```ts
 * import { buildNcclConfig, type NcclConfigIntField, readNcclConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 * const field: NcclConfigIntField = "cgaClusterSize";
 * const config = buildNcclConfig({ [field]: 4 });
 * assert.equal(readNcclConfig(config.bytes)[field], 4);
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
 * @example Non-blocking, at least 4 CTAs, over sockets
 * ```ts
 * import { buildNcclConfig, type NcclConfigOptions, readNcclConfig } from "./config.ts";
 * import assert from "node:assert/strict";
 * const options: NcclConfigOptions = { blocking: 0, minCTAs: 4, netName: "Socket", commName: "dp" };
 * const config = buildNcclConfig(options);
 * assert.equal(config.strings.length, 2); // netName and commName, as C strings
 * assert.equal(readNcclConfig(config.bytes).minCTAs, 4);
 * assert.equal(readNcclConfig(config.bytes).maxCTAs, undefined); // the library's default
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

/**
 * Builds an `ncclConfig_t`: `NCCL_CONFIG_INITIALIZER` of the 2.30 layout, then the given fields.
 *
 * @param options The fields to set.
 * @returns The bytes, and the strings they point to.
 * @throws {TypeError} If an int field is not a 32-bit integer or a field is unknown.
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
export function buildNcclConfig(options: NcclConfigOptions = {}): NcclConfig {
  const bytes = new Uint8Array(NCCL_CONFIG_LAYOUT.size);
  const view = new DataView(bytes.buffer);
  const strings: Uint8Array[] = [];
  const given = options as Readonly<Record<string, unknown>>;
  for (const name of Object.keys(given)) {
    const f = NCCL_CONFIG_LAYOUT.fields.find((x) => x.name === name);
    if (f === undefined || f.offset < 16) {
      throw new TypeError(
        `Unknown ncclConfig_t field: expected one of ${
          NCCL_CONFIG_LAYOUT.fields.slice(3).map((x) => x.name).join(", ")
        }, found ${name}`,
      );
    }
  }
  for (const f of NCCL_CONFIG_LAYOUT.fields) {
    const value = given[f.name];
    switch (f.name) {
      case "size":
        view.setBigUint64(f.offset, BigInt(NCCL_CONFIG_LAYOUT.size), true);
        continue;
      case "magic":
        view.setUint32(f.offset, NCCL_API_MAGIC, true);
        continue;
      case "version":
        view.setUint32(f.offset, NCCL_CONFIG_VERSION, true);
        continue;
    }
    if (f.kind === "pointer") {
      if (value === undefined) continue; // NULL
      if (typeof value !== "string") {
        throw new TypeError(`Invalid ncclConfig_t.${f.name}: expected a string, found ${typeof value}`);
      }
      const s = new Uint8Array(encoder.encode(value).length + 1);
      encoder.encodeInto(value, s);
      strings.push(s);
      view.setBigUint64(f.offset, Deno.UnsafePointer.value(Deno.UnsafePointer.of(s)), true);
      continue;
    }
    if (value === undefined) {
      view.setInt32(f.offset, NCCL_CONFIG_UNDEF_INT, true);
      continue;
    }
    if (typeof value !== "number" || !Number.isInteger(value) || value < -(2 ** 31) || value >= 2 ** 31) {
      throw new TypeError(
        `Invalid ncclConfig_t.${f.name}: expected a 32-bit integer, found ${String(value)}`,
      );
    }
    view.setInt32(f.offset, value, true);
  }
  return { bytes, strings };
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
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: Record<string, number | undefined> = {};
  for (const f of NCCL_CONFIG_LAYOUT.fields) {
    if (f.kind === "usize") out[f.name] = Number(view.getBigUint64(f.offset, true));
    else if (f.kind === "u32") out[f.name] = view.getUint32(f.offset, true);
    else if (f.kind === "i32") {
      const v = view.getInt32(f.offset, true);
      out[f.name] = v === NCCL_CONFIG_UNDEF_INT ? undefined : v;
    }
  }
  return out;
}
