import assert from "node:assert/strict";
import {
  applyTuning,
  ncclEnvironment,
  noteNcclStarted,
  tuningConfig,
  tuningEnv,
} from "../../../backend/nccl/tuning.ts";

function restoring<T>(names: string[], fn: () => T): T {
  const old = Object.fromEntries(names.map((n) => [n, Deno.env.get(n)]));
  try {
    return fn();
  } finally {
    for (const [n, v] of Object.entries(old)) {
      if (v === undefined) Deno.env.delete(n);
      else Deno.env.set(n, v);
    }
  }
}

Deno.test("tuningEnv() maps the options to NCCL's variables", () => {
  assert.deepEqual(
    tuningEnv({
      algo: "Ring",
      proto: "^LL128",
      buffSize: 1 << 23,
      minCTAs: 2,
      maxCTAs: 16,
      env: { NCCL_DEBUG: "WARN" },
    }),
    {
      NCCL_ALGO: "Ring",
      NCCL_PROTO: "^LL128",
      NCCL_BUFFSIZE: "8388608",
      NCCL_MIN_CTAS: "2",
      NCCL_MAX_CTAS: "16",
      NCCL_DEBUG: "WARN",
    },
  );
  assert.deepEqual(tuningEnv({}), {});
});

Deno.test("tuningEnv() rejects malformed values, naming the option and the value", () => {
  assert.throws(
    () => tuningEnv({ buffSize: 0 }),
    /Invalid NCCL tuning buffSize: expected a positive integer, found 0/,
  );
  assert.throws(() => tuningEnv({ maxCTAs: 2.5 }), RangeError);
  assert.throws(() => tuningEnv({ algo: "Ring; rm -rf" }), /Invalid NCCL tuning algo/);
  assert.throws(
    () => tuningEnv({ env: { LD_PRELOAD: "x" } }),
    /expected NCCL_\* variable names, found LD_PRELOAD/,
  );
});

Deno.test("tuningConfig() puts the CTA counts and extra fields in the ncclConfig_t", () => {
  assert.deepEqual(tuningConfig({ minCTAs: 4, maxCTAs: 8, config: { cgaClusterSize: 2 } }), {
    minCTAs: 4,
    maxCTAs: 8,
    cgaClusterSize: 2,
  });
  assert.deepEqual(tuningConfig({ algo: "Tree" }), {});
});

Deno.test("applyTuning() writes the variables into the environment and reports them", () => {
  const names = ["NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE"];
  restoring(names, () => {
    Deno.env.set("NCCL_PROTO", "LL");
    const report = applyTuning({ algo: "Ring", proto: "Simple", buffSize: 1 << 22 });
    assert.equal(Deno.env.get("NCCL_ALGO"), "Ring");
    assert.equal(Deno.env.get("NCCL_BUFFSIZE"), "4194304");
    assert.deepEqual(report.applied, { NCCL_ALGO: "Ring", NCCL_PROTO: "Simple", NCCL_BUFFSIZE: "4194304" });
    assert.equal(report.env["NCCL_PROTO"], "Simple");
    assert.ok(
      report.notes.some((n) => n === "NCCL_PROTO=LL from the environment was replaced by Simple"),
      report.notes.join("\n"),
    );
    assert.deepEqual(ncclEnvironment()["NCCL_ALGO"], "Ring");
    // Once NCCL has started, a second tuning asking for something else is told NCCL may keep the first.
    noteNcclStarted();
    const again = applyTuning({ algo: "Tree" });
    assert.ok(
      again.notes.some((n) =>
        /NCCL_ALGO=Tree was set after NCCL started in this process; NCCL may keep Ring/.test(n)
      ),
    );
  });
});
