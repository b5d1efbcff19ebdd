/**
 * Loads the loopback test double of libibverbs (`_loopback_verbs.c`) as THE libibverbs of the calling test
 * module: builds it, points `DCOMM_IBVERBS_PATH` at it while the binding opens it (then restores the
 * variable, so test modules that run later find the real library), and opens its test knobs.
 *
 * @module
 */
import { ibverbsPath } from "../../../ffi/ibverbs/ibverbs.ts";
import { compile, compilerMissing } from "./_cc.ts";

const SOURCE = new URL("./_loopback_verbs.c", import.meta.url).pathname;

const KNOBS = {
  loopback_set_device_count: { parameters: ["i32"], result: "void" },
  loopback_fail_device_list: { parameters: ["i32"], result: "void" },
  loopback_set_extended: { parameters: ["i32"], result: "void" },
  loopback_set_dmabuf_errno: { parameters: ["i32"], result: "void" },
  loopback_kill_device: { parameters: ["i32"], result: "void" },
  loopback_writes_posted: { parameters: [], result: "i64" },
  loopback_bytes_written: { parameters: [], result: "i64" },
  loopback_modify_calls: { parameters: [], result: "i64" },
  loopback_live_qps: { parameters: [], result: "i32" },
  loopback_live_mrs: { parameters: [], result: "i32" },
  loopback_reset: { parameters: [], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

/** The loopback's test knobs and counters. */
export type LoopbackKnobs = Deno.DynamicLibrary<typeof KNOBS>["symbols"];

/** The loaded loopback, or why it cannot be. */
export type Loopback = { knobs: LoopbackKnobs; path: string; missing: undefined } | {
  knobs: undefined;
  path: undefined;
  missing: string;
};

/**
 * Builds and loads the loopback for this test module (call it once, at the top level).
 *
 * @returns Its knobs, or what is missing to build it.
 */
export async function loadLoopback(): Promise<Loopback> {
  const missing = compilerMissing();
  if (missing !== undefined) return { knobs: undefined, path: undefined, missing };
  const built = await compile(SOURCE, { shared: true });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(built.path.replace(/\/[^/]+$/, ""), { recursive: true });
    } catch {
      // Already gone.
    }
  });
  const previous = Deno.env.get("DCOMM_IBVERBS_PATH");
  Deno.env.set("DCOMM_IBVERBS_PATH", built.path);
  try {
    const opened = ibverbsPath();
    if (opened !== built.path) {
      throw new Error(`Expected the binding to open ${built.path}, it opened ${opened}`);
    }
  } finally {
    if (previous === undefined) Deno.env.delete("DCOMM_IBVERBS_PATH");
    else Deno.env.set("DCOMM_IBVERBS_PATH", previous);
  }
  const knobs = Deno.dlopen(built.path, KNOBS).symbols;
  return { knobs, path: built.path, missing: undefined };
}
