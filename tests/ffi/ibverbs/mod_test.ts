/**
 * `@dcomm/dcomm/rdma` (`ffi/ibverbs/mod.ts`), the public entry of RDMA memory registration: what it
 * exports, and its `registerMemory` through the loopback TEST DOUBLE of libibverbs (`_loopback_verbs.c`),
 * which stands in for the library on machines without RDMA hardware.
 */
import assert from "node:assert/strict";
import * as rdma from "../../../ffi/ibverbs/mod.ts";
import { EMPTY_DEVICE_LIST } from "../../../ffi/ibverbs/verbs.ts";
import { gatedTest } from "../../_util/skip.ts";
import { loadLoopback } from "./_loopback.ts";

const loopback = await loadLoopback();
const gate = { missing: loopback.missing };
const knobs = (): NonNullable<typeof loopback.knobs> => loopback.knobs as NonNullable<typeof loopback.knobs>;

Deno.test("@dcomm/dcomm/rdma is deno.json's ./rdma export and maps to the same file", () => {
  const config = JSON.parse(Deno.readTextFileSync(new URL("../../../deno.json", import.meta.url)));
  assert.equal(config.exports["./rdma"], "./ffi/ibverbs/mod.ts");
  assert.equal(config.imports["@dcomm/dcomm/rdma"], "./ffi/ibverbs/mod.ts");
});

Deno.test("@dcomm/dcomm/rdma exports registerMemory, the device summary and the errors it throws", () => {
  assert.deepEqual(Object.keys(rdma).sort(), [
    "DistError",
    "GpuDirectUnavailableError",
    "IbverbsError",
    "NoRdmaDeviceError",
    "UnsupportedError",
    "rdmaDevices",
    "registerMemory",
  ]);
  assert.ok(rdma.NoRdmaDeviceError.prototype instanceof rdma.UnsupportedError);
  assert.ok(rdma.GpuDirectUnavailableError.prototype instanceof rdma.UnsupportedError);
  assert.ok(rdma.IbverbsError.prototype instanceof rdma.DistError);
});

Deno.test("registerMemory() checks its arguments before any device is opened", () => {
  assert.throws(() => rdma.registerMemory(new Uint8Array(0)), RangeError);
  // deno-lint-ignore no-explicit-any
  assert.throws(() => rdma.registerMemory("bytes" as any), TypeError);
  assert.throws(
    () => rdma.registerMemory(new Uint8Array(8), { access: ["write" as rdma.MemoryAccess] }),
    /^TypeError: Expected an access in local-write, remote-write, /,
  );
});

gatedTest(
  "registerMemory() registers host memory on the device named, and disposing it deregisters (loopback)",
  gate,
  () => {
    const before = knobs().loopback_live_mrs();
    const bytes = new Float64Array(1000);
    let kept: rdma.RegisteredMemory;
    {
      using region = rdma.registerMemory(bytes.subarray(10), { access: ["remote-write"], device: "loop3" });
      kept = region;
      assert.equal(region.path, "host");
      assert.equal(region.length, 990 * 8);
      assert.equal(region.address, Deno.UnsafePointer.value(Deno.UnsafePointer.of(bytes)) + 80n);
      assert.notEqual(region.lkey, region.rkey);
      assert.equal(knobs().loopback_live_mrs(), before + 1);
    }
    assert.equal(knobs().loopback_live_mrs(), before);
    kept[Symbol.dispose](); // twice: nothing
    assert.equal(knobs().loopback_live_mrs(), before);
  },
);

gatedTest(
  "registerMemory() without an RDMA device throws NoRdmaDeviceError saying what (loopback)",
  gate,
  () => {
    try {
      assert.throws(() => rdma.registerMemory(new Uint8Array(64), { device: "mlx5_9" }), (e: unknown) => {
        assert.ok(e instanceof rdma.NoRdmaDeviceError);
        assert.match(
          e.message,
          /^Cannot register 64 bytes of host memory: No RDMA device named mlx5_9: found loop0, /,
        );
        return true;
      });
      knobs().loopback_set_device_count(0);
      assert.equal(rdma.rdmaDevices().problem, EMPTY_DEVICE_LIST);
      assert.throws(() => rdma.registerMemory(new Uint8Array(64)), (e: unknown) => {
        assert.ok(e instanceof rdma.NoRdmaDeviceError && e instanceof rdma.UnsupportedError);
        assert.equal(e.code, "NO_RDMA_DEVICE");
        assert.equal(e.message, `Cannot register 64 bytes of host memory: ${EMPTY_DEVICE_LIST}`);
        return true;
      });
      knobs().loopback_set_device_count(8);
      knobs().loopback_fail_device_list(38); // ENOSYS: the kernel has no RDMA stack
      assert.throws(() => rdma.registerMemory(new Uint8Array(64)), (e: unknown) => {
        assert.ok(e instanceof rdma.NoRdmaDeviceError);
        assert.equal(e.errno, 38);
        assert.match(
          e.message,
          /^Cannot register 64 bytes of host memory: No RDMA devices: ibv_get_device_list failed/,
        );
        return true;
      });
    } finally {
      knobs().loopback_reset();
    }
  },
);
