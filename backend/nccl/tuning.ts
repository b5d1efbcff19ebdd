/**
 * Tuning of the `nccl` backend: NCCL's algorithm, protocol, buffer size and CTA counts, given as options
 * instead of environment variables. NCCL reads its `NCCL_*` variables when it first needs them (most at
 * the first communicator's init) and caches them, so {@linkcode applyTuning} writes them into this
 * process's environment before the library is loaded; the CTA counts also go into the communicator's
 * `ncclConfig_t` (2.17+), which applies per communicator. What was applied is reported back (in every
 * Work report of the backend, and by `doctor`).
 *
 * @module
 */
import type { NcclConfigOptions } from "../../ffi/nccl/config.ts";

/**
 * Tuning options of the `nccl` backend. Every field left out keeps NCCL's own choice.
 *
 * @example The variables and config fields a tuning sets
 * ```ts
 * import { type NcclTuning, tuningConfig, tuningEnv } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const tuning: NcclTuning = {
 *   algo: "Tree,Ring",
 *   buffSize: 8 << 20,
 *   maxCTAs: 16,
 *   env: { NCCL_DEBUG: "WARN" },
 * };
 * assert.deepEqual(tuningEnv(tuning), {
 *   NCCL_ALGO: "Tree,Ring",
 *   NCCL_BUFFSIZE: "8388608",
 *   NCCL_MAX_CTAS: "16",
 *   NCCL_DEBUG: "WARN",
 * });
 * assert.deepEqual(tuningConfig(tuning), { maxCTAs: 16 });
 * ```
 */
export interface NcclTuning {
  /** `NCCL_ALGO`: e.g. `"Ring"`, `"Tree,Ring"`, `"^NVLS"`. @default NCCL's choice */
  algo?: string;
  /** `NCCL_PROTO`: e.g. `"Simple"`, `"LL,LL128"`, `"^LL128"`. @default NCCL's choice */
  proto?: string;
  /** `NCCL_BUFFSIZE`: bytes of the Simple protocol's buffer. @default 4194304 (NCCL's) */
  buffSize?: number;
  /** The fewest CTAs (channels) per collective: config `minCTAs` (2.17) and `NCCL_MIN_CTAS`. @default NCCL's choice */
  minCTAs?: number;
  /** The most CTAs per collective: config `maxCTAs` (2.17) and `NCCL_MAX_CTAS`. @default NCCL's choice */
  maxCTAs?: number;
  /** More `NCCL_*` variables to set before the library loads, e.g. `{ NCCL_DEBUG: "WARN" }`. @default {} */
  env?: Readonly<Record<string, string>>;
  /** More `ncclConfig_t` fields, e.g. `{ cgaClusterSize: 4 }`. @default {} */
  config?: NcclConfigOptions;
}

/**
 * What tuning applies to a communicator, as reported.
 *
 * @example The tuning in effect, as every Work of the backend reports it
 * ```ts
 * import { applyTuning, type NcclTuningReport } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const saved = Deno.env.get("NCCL_BUFFSIZE");
 * const report: NcclTuningReport = applyTuning({ buffSize: 8 << 20, maxCTAs: 16 });
 * assert.deepEqual(report.applied, { NCCL_BUFFSIZE: "8388608", NCCL_MAX_CTAS: "16" });
 * assert.equal(report.env.NCCL_BUFFSIZE, "8388608"); // now in this process's environment
 * assert.deepEqual(report.config, { maxCTAs: 16 }); // and in each communicator's ncclConfig_t
 * for (const note of report.notes) console.log(note); // e.g. a value NCCL read before
 * // (this example leaves the environment as it found it)
 * if (saved === undefined) Deno.env.delete("NCCL_BUFFSIZE");
 * else Deno.env.set("NCCL_BUFFSIZE", saved);
 * Deno.env.delete("NCCL_MAX_CTAS");
 * ```
 */
export interface NcclTuningReport {
  /** Every `NCCL_*` variable in this process's environment when the communicator was created. */
  readonly env: Readonly<Record<string, string>>;
  /** The variables this tuning set (a subset of `env`). */
  readonly applied: Readonly<Record<string, string>>;
  /** The `ncclConfig_t` fields set beyond NCCL's defaults (besides `blocking`). */
  readonly config: Readonly<Record<string, number | string>>;
  /** Caveats: a variable that could not take effect, a field the library is too old for. */
  readonly notes: readonly string[];
}

// Values this process's NCCL has already read (set by the first applyTuning): NCCL caches them.
let frozen: Record<string, string> | undefined;

function positiveInt(name: string, value: number | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(`Invalid NCCL tuning ${name}: expected a positive integer, found ${value}`);
  }
  return String(value);
}

function word(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^\^?[A-Za-z0-9_,]+$/.test(value)) {
    throw new TypeError(
      `Invalid NCCL tuning ${name}: expected a comma list of names, optionally starting with ^, found ${
        JSON.stringify(value)
      }`,
    );
  }
  return value;
}

/**
 * The `NCCL_*` variables a tuning sets.
 *
 * @param tuning The tuning.
 * @returns The variables, by name.
 * @throws {TypeError | RangeError} If a value is malformed.
 *
 * @example
 * ```ts
 * import { tuningEnv } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * assert.deepEqual(tuningEnv({ proto: "^LL128", env: { NCCL_DEBUG: "INFO" } }), {
 *   NCCL_PROTO: "^LL128",
 *   NCCL_DEBUG: "INFO",
 * });
 * assert.throws(() => tuningEnv({ algo: "Ring Tree" }), TypeError); // a comma list, no spaces
 * assert.throws(() => tuningEnv({ maxCTAs: 0 }), RangeError);
 * ```
 */
export function tuningEnv(tuning: NcclTuning = {}): Record<string, string> {
  const vars: Record<string, string | undefined> = {
    NCCL_ALGO: word("algo", tuning.algo),
    NCCL_PROTO: word("proto", tuning.proto),
    NCCL_BUFFSIZE: positiveInt("buffSize", tuning.buffSize),
    NCCL_MIN_CTAS: positiveInt("minCTAs", tuning.minCTAs),
    NCCL_MAX_CTAS: positiveInt("maxCTAs", tuning.maxCTAs),
  };
  for (const [name, value] of Object.entries(tuning.env ?? {})) {
    if (!/^NCCL_[A-Z0-9_]+$/.test(name)) {
      throw new TypeError(`Invalid NCCL tuning env: expected NCCL_* variable names, found ${name}`);
    }
    vars[name] = String(value);
  }
  return Object.fromEntries(Object.entries(vars).filter((e): e is [string, string] => e[1] !== undefined));
}

/**
 * The `ncclConfig_t` fields a tuning sets (the CTA counts, then `config`).
 *
 * @param tuning The tuning.
 * @returns The fields.
 *
 * @example
 * ```ts
 * import { tuningConfig } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * assert.deepEqual(tuningConfig({ minCTAs: 4, algo: "Ring", config: { cgaClusterSize: 2 } }), {
 *   minCTAs: 4,
 *   cgaClusterSize: 2,
 * });
 * ```
 */
export function tuningConfig(tuning: NcclTuning = {}): NcclConfigOptions {
  const config: Record<string, number | string> = {};
  if (tuning.minCTAs !== undefined) config.minCTAs = tuning.minCTAs;
  if (tuning.maxCTAs !== undefined) config.maxCTAs = tuning.maxCTAs;
  Object.assign(config, tuning.config ?? {});
  return config as NcclConfigOptions;
}

/** Every `NCCL_*` variable of this process's environment. */
export function ncclEnvironment(): Record<string, string> {
  try {
    return Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([k]) => k.startsWith("NCCL_")).sort(),
    );
  } catch {
    return {};
  }
}

/**
 * Records that NCCL has started a communicator in this process: the `NCCL_*` variables it has read are
 * fixed from now on (NCCL caches them), so a later {@linkcode applyTuning} that asks for other values
 * gets a note saying they may not take effect.
 */
export function noteNcclStarted(): void {
  frozen ??= ncclEnvironment();
}

/**
 * Writes a tuning's variables into this process's environment (before NCCL reads them) and reports what
 * applies. Once NCCL has started ({@linkcode noteNcclStarted}), values that differ from what it read get
 * a note saying they may not take effect (NCCL caches its variables); the config fields always apply.
 *
 * @param tuning The tuning.
 * @returns The report.
 * @throws {TypeError | RangeError} If a value is malformed.
 *
 * @example Before NCCL loads: the variables go into the environment
 * ```ts
 * import { applyTuning } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const saved = Deno.env.get("NCCL_PROTO");
 * const { applied } = applyTuning({ proto: "Simple" });
 * assert.deepEqual(applied, { NCCL_PROTO: "Simple" });
 * assert.equal(Deno.env.get("NCCL_PROTO"), "Simple");
 * // (this example leaves the environment as it found it)
 * if (saved === undefined) Deno.env.delete("NCCL_PROTO");
 * else Deno.env.set("NCCL_PROTO", saved);
 * ```
 */
export function applyTuning(tuning: NcclTuning = {}): NcclTuningReport {
  const vars = tuningEnv(tuning);
  const notes: string[] = [];
  for (const [name, value] of Object.entries(vars)) {
    const before = Deno.env.get(name);
    if (before !== undefined && before !== value) {
      notes.push(`${name}=${before} from the environment was replaced by ${value}`);
    }
    if (frozen && frozen[name] !== value) {
      notes.push(
        `${name}=${value} was set after NCCL started in this process; NCCL may keep ${
          frozen[name] ?? "its default"
        }`,
      );
    }
    Deno.env.set(name, value);
  }
  const config = tuningConfig(tuning) as Record<string, number | string>;
  return { env: ncclEnvironment(), applied: vars, config, notes };
}
