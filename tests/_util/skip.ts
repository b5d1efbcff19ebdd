/**
 * Hardware- and toolchain-gated tests. A gated test that cannot run is registered as ignored with the
 * reason in its name, so `deno test` prints why. Under `DCOMM_REQUIRE_ALL=1` (CI) a gate that CI can
 * satisfy (a package CI installs) turns into a failing test instead; gates CI cannot satisfy (a GPU, RDMA
 * hardware) stay skips.
 *
 * @module
 */

/** Whether CI asked for every satisfiable gate to be satisfied. */
export const REQUIRE_ALL: boolean = Deno.env.get("DCOMM_REQUIRE_ALL") === "1";

/** Options of {@linkcode gatedTest}. */
export interface GateOptions {
  /** Why the test cannot run, or `undefined` when it can. */
  missing: string | undefined;
  /** Whether CI installs what is missing (then `DCOMM_REQUIRE_ALL=1` makes a miss fail). @default true */
  ciCanSatisfy?: boolean;
}

/**
 * Registers `fn` as a test that runs only when nothing is `missing`.
 *
 * @param name The test name.
 * @param gate What is missing, and whether CI can provide it.
 * @param fn The test body.
 */
export function gatedTest(
  name: string,
  gate: GateOptions,
  fn: (t: Deno.TestContext) => Promise<void> | void,
): void {
  const { missing, ciCanSatisfy = true } = gate;
  if (missing === undefined) {
    Deno.test({ name, fn });
  } else if (REQUIRE_ALL && ciCanSatisfy) {
    Deno.test({
      name,
      fn(): never {
        throw new Error(`DCOMM_REQUIRE_ALL=1 but this test cannot run here: ${missing}`);
      },
    });
  } else {
    Deno.test({ name: `${name} (skipped: ${missing})`, ignore: true, fn });
  }
}

/** Whether `cmd` can be run from PATH (tries `cmd --version`). */
export function hasCommand(cmd: string): boolean {
  try {
    new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" }).outputSync();
    return true;
  } catch {
    return false;
  }
}
