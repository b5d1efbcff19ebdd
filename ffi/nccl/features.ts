/**
 * Feature gates of NCCL: what each release added that dcomm uses, and the check that turns a missing one
 * into an {@linkcode UnsupportedError} naming the feature, the version it needs and the version found. A
 * feature counts as present only if the version is new enough AND its symbols resolved (a library built
 * without a symbol reports it missing rather than crashing on a `null` function).
 *
 * @module
 */
import { UnsupportedError } from "../../core/errors.ts";
import { compareNcclVersions, type NcclVersion, parseNcclVersion } from "./constants.ts";

/**
 * The features dcomm gates on.
 *
 * @example Features a training script needs, as doctor reports them (none without NCCL)
 * ```ts
 * import { doctor, type NcclFeature } from "@dcomm/dcomm/doctor";
 * const needed: NcclFeature[] = ["bfloat16", "commSplit"];
 * const { ncclFeatures } = await doctor();
 * for (const f of ncclFeatures.filter((f) => needed.includes(f.feature) && !f.supported)) {
 *   console.log(`${f.feature}: ${f.reason}; ${f.without}`);
 * }
 * ```
 */
export type NcclFeature =
  | "sendRecv"
  | "lastError"
  | "nonblockingInit"
  | "avg"
  | "bfloat16"
  | "preMulSum"
  | "commSplit"
  | "memAlloc"
  | "fp8"
  | "alltoall"
  | "gatherScatter"
  | "params";

/**
 * One feature gate.
 *
 * @example The gates, as a table
 * ```ts
 * import { doctor, type FeatureGate } from "@dcomm/dcomm/doctor";
 * const row = (gate: FeatureGate): string => `${gate.since.padEnd(6)} ${gate.description}`;
 * const { ncclFeatures } = await doctor();
 * ncclFeatures.forEach((gate) => console.log(row(gate)));
 * ```
 */
export interface FeatureGate {
  /** The first release with the feature, e.g. `"2.10"`. */
  readonly since: string;
  /** What the feature is, for messages. */
  readonly description: string;
  /** The symbols it needs (optional ones may be missing from a library). */
  readonly symbols: readonly string[];
  /** What dcomm does without it. */
  readonly without: string;
}

/** Every gate, by feature. */
export const NCCL_FEATURES: Readonly<Record<NcclFeature, FeatureGate>> = {
  sendRecv: {
    since: "2.7",
    description: "point-to-point ncclSend/ncclRecv",
    symbols: ["ncclSend", "ncclRecv"],
    without: "send, recv and all-to-all are unsupported",
  },
  avg: {
    since: "2.10",
    description: "the avg reduction (ncclAvg)",
    symbols: [],
    without: 'op "avg" is unsupported',
  },
  bfloat16: {
    since: "2.10",
    description: "the bfloat16 data type (ncclBfloat16)",
    symbols: [],
    without: "bfloat16 tensors are unsupported",
  },
  preMulSum: {
    since: "2.11",
    description: "pre-multiplied sums (ncclRedOpCreatePreMulSum)",
    symbols: ["ncclRedOpCreatePreMulSum", "ncclRedOpDestroy"],
    without: "the scale option is unsupported",
  },
  lastError: {
    since: "2.13",
    description: "ncclGetLastError",
    symbols: ["ncclGetLastError"],
    without: "errors carry only ncclGetErrorString",
  },
  nonblockingInit: {
    since: "2.14",
    description: "ncclCommInitRankConfig with a non-blocking config",
    symbols: ["ncclCommInitRankConfig", "ncclCommFinalize"],
    without: "init uses the blocking ncclCommInitRank, which a timeout cannot interrupt",
  },
  commSplit: {
    since: "2.18",
    description: "sub-communicators through ncclCommSplit",
    symbols: ["ncclCommSplit"],
    without: "newGroup is unsupported",
  },
  memAlloc: {
    since: "2.19",
    description: "ncclMemAlloc and buffer registration",
    symbols: ["ncclMemAlloc", "ncclMemFree", "ncclCommRegister", "ncclCommDeregister"],
    without: "buffers come from cudaMalloc, unregistered",
  },
  fp8: {
    since: "2.24",
    description: "the fp8 data types (ncclFloat8e4m3, ncclFloat8e5m2; reductions also need sm_90)",
    symbols: [],
    without: "fp8 tensors are unsupported",
  },
  alltoall: {
    since: "2.28",
    description: "native all-to-all (ncclAlltoAll)",
    symbols: ["ncclAlltoAll"],
    without: "all-to-all runs as grouped ncclSend/ncclRecv",
  },
  gatherScatter: {
    since: "2.28",
    description: "native gather and scatter (ncclGather, ncclScatter)",
    symbols: ["ncclGather", "ncclScatter"],
    without: "gather and scatter run as grouped ncclSend/ncclRecv",
  },
  params: {
    since: "2.30.4",
    description: "reading NCCL's parameters (ncclParamGetParameter)",
    symbols: ["ncclParamGetParameter"],
    without: "doctor reports only the NCCL_* environment",
  },
};

function sinceCode(since: string): NcclVersion {
  const [major, minor, patch = 0] = since.split(".").map(Number);
  return { major, minor, patch, code: 0, text: since };
}

function versionOf(version: NcclVersion | number): NcclVersion {
  return typeof version === "number" ? parseNcclVersion(version) : version;
}

/**
 * Whether one feature is usable, and why not.
 *
 * @example The features this machine's NCCL lacks
 * ```ts
 * import { doctor, type FeatureSupport } from "@dcomm/dcomm/doctor";
 * import assert from "node:assert/strict";
 * const { ncclFeatures } = await doctor();
 * const lacking: FeatureSupport[] = ncclFeatures.filter((f) => !f.supported);
 * assert.ok(lacking.every((f) => f.reason !== undefined)); // each says which version or symbol it needs
 * ```
 */
export interface FeatureSupport {
  /** The feature. */
  readonly feature: NcclFeature;
  /** Whether it is usable. */
  readonly supported: boolean;
  /** Why not: the version needed and found, or the symbols missing. */
  readonly reason?: string;
}

/**
 * Tells whether a library of `version`, with these `symbols`, has `feature`.
 *
 * @param feature The feature.
 * @param version The library's version (or its code).
 * @param symbols The library's symbols (missing optional ones are `null`). @default every symbol present
 * @returns The answer, with the reason when it is no.
 */
export function featureSupport(
  feature: NcclFeature,
  version: NcclVersion | number,
  symbols?: Readonly<Record<string, unknown>>,
): FeatureSupport {
  const gate = NCCL_FEATURES[feature];
  if (gate === undefined) {
    throw new TypeError(
      `Unknown NCCL feature: expected one of ${Object.keys(NCCL_FEATURES).join(", ")}, found ${feature}`,
    );
  }
  const v = versionOf(version);
  if (compareNcclVersions(v, sinceCode(gate.since)) < 0) {
    return { feature, supported: false, reason: `needs NCCL ${gate.since} or newer, found ${v.text}` };
  }
  const missing = symbols ? gate.symbols.filter((s) => symbols[s] == null) : [];
  if (missing.length) {
    return {
      feature,
      supported: false,
      reason: `the library (NCCL ${v.text}) does not export ${missing.join(", ")}`,
    };
  }
  return { feature, supported: true };
}

/**
 * Whether a library has `feature` (see {@linkcode featureSupport}).
 *
 * @param feature The feature.
 * @param version The library's version (or its code).
 * @param symbols The library's symbols. @default every symbol present
 * @returns `true` if usable.
 */
export function hasFeature(
  feature: NcclFeature,
  version: NcclVersion | number,
  symbols?: Readonly<Record<string, unknown>>,
): boolean {
  return featureSupport(feature, version, symbols).supported;
}

/**
 * Throws unless a library has `feature`.
 *
 * @param feature The feature.
 * @param version The library's version (or its code).
 * @param options What the caller was doing, for the message, and the library's symbols.
 * @throws {UnsupportedError} Naming the feature, the version it needs and the version found.
 *
 * @example
 * ```ts
 * import { requireFeature } from "./features.ts";
 * import { UnsupportedError } from "../../core/errors.ts";
 * import assert from "node:assert/strict";
 * assert.throws(
 *   () => requireFeature("bfloat16", 20906, { what: "all-reduce" }),
 *   (e: unknown) => e instanceof UnsupportedError && /2\.10 or newer, found 2\.9\.6/.test(e.message),
 * );
 * ```
 */
export function requireFeature(
  feature: NcclFeature,
  version: NcclVersion | number,
  options: RequireFeatureOptions = {},
): void {
  const support = featureSupport(feature, version, options.symbols);
  if (support.supported) return;
  const gate = NCCL_FEATURES[feature];
  throw new UnsupportedError(
    `Cannot ${options.what ?? "continue"}: ${gate.description} ${support.reason}`,
  );
}

/** Options of {@linkcode requireFeature}. */
export interface RequireFeatureOptions {
  /** What the caller was doing, e.g. `"all-reduce"`. @default "continue" */
  readonly what?: string;
  /** The library's symbols. @default every symbol present */
  readonly symbols?: Readonly<Record<string, unknown>>;
}

/**
 * Throws unless fp8 reductions can run: NCCL 2.24 or newer, and every GPU of the communicator at
 * compute capability 9.0 (sm_90) or newer. FP8 all-gather, broadcast and all-to-all need only the version.
 *
 * @param version The library's version (or its code).
 * @param computeCapabilities Each GPU's compute capability as `major * 10 + minor` (90 for sm_90).
 * @param what What the caller was doing. @default "reduce fp8"
 * @throws {UnsupportedError} If the version or a GPU is too old.
 */
export function requireFp8Reduction(
  version: NcclVersion | number,
  computeCapabilities: readonly number[],
  what = "reduce fp8",
): void {
  requireFeature("fp8", version, { what });
  const old = computeCapabilities.filter((cc) => cc < 90);
  if (old.length) {
    throw new UnsupportedError(
      `Cannot ${what}: fp8 reductions need every GPU at sm_90 or newer, found ` +
        old.map((cc) => `sm_${cc}`).join(", "),
    );
  }
}

/**
 * Every gate for one library, for `doctor`.
 *
 * @param version The library's version (or its code).
 * @param symbols The library's symbols. @default every symbol present
 * @returns One row per feature.
 */
export function featureTable(
  version: NcclVersion | number,
  symbols?: Readonly<Record<string, unknown>>,
): (FeatureSupport & FeatureGate)[] {
  return (Object.keys(NCCL_FEATURES) as NcclFeature[]).map((f) => ({
    ...NCCL_FEATURES[f],
    ...featureSupport(f, version, symbols),
  }));
}
