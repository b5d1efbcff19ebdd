/**
 * Memory registration on a real RDMA device, and of GPU memory (GPUDirect RDMA) where there is a GPU too.
 * Skipped here, with the reason, on machines without RDMA hardware; CI cannot install any, so
 * `DCOMM_REQUIRE_ALL=1` does not turn these skips into failures. (The RDMA transport's tests in
 * `tests/transport/rdma_test.ts` register host memory on hardware too, for their rings.)
 */
import assert from "node:assert/strict";
import { gpuDirectStatus, GpuDirectUnavailableError, registerMemory } from "../../../ffi/ibverbs/register.ts";
import { DeviceBuffer } from "../../../gpu/device_buffer.ts";
import { rdmaHardware } from "../../_util/rdma_gate.ts";
import { gatedTest, type GateOptions } from "../../_util/skip.ts";
import { GPU } from "../../gpu/_gpu.ts";

const RDMA = rdmaHardware();
const RDMA_AND_GPU: GateOptions = RDMA.missing !== undefined ? RDMA : GPU;

function addressOf(pointer: Deno.PointerValue): bigint {
  return BigInt(Deno.UnsafePointer.value(pointer));
}

gatedTest("registerMemory() registers host memory on an RDMA device: address, length, keys", RDMA, () => {
  const bytes = new Uint8Array(1 << 20);
  using whole = registerMemory(bytes, { access: ["remote-write", "remote-read"] });
  using tail = registerMemory(bytes.subarray(4096), { access: ["local-write"] });
  assert.equal(whole.path, "host");
  assert.equal(whole.length, 1 << 20);
  assert.equal(whole.address, addressOf(Deno.UnsafePointer.of(bytes)));
  assert.equal(tail.length, (1 << 20) - 4096);
  assert.equal(tail.address, whole.address + 4096n, "a view registers from its own first byte");
  for (const key of [whole.lkey, whole.rkey, tail.lkey, tail.rkey]) {
    assert.ok(Number.isInteger(key) && key >= 0 && key <= 0xffff_ffff, `key ${key}`);
  }
  assert.notEqual(whole.lkey, tail.lkey, "two regions, two local keys");
});

gatedTest(
  "registerMemory() registers GPU memory by the path gpuDirectStatus() reports, or lists what is missing",
  RDMA_AND_GPU,
  () => {
    using buffer = DeviceBuffer.alloc(1 << 18, { dtype: "float32" });
    const status = gpuDirectStatus({ gpu: buffer.device });
    console.log(`GPUDirect RDMA on GPU ${buffer.device}: ${status.path}`, status.missing);
    if (status.path === "none") {
      assert.throws(() => registerMemory(buffer), (e: unknown) => {
        assert.ok(e instanceof GpuDirectUnavailableError, String(e));
        assert.deepEqual(e.missing, status.missing);
        assert.match(
          e.message,
          /^Cannot register 1048576 bytes \(1\.0 MiB\) of GPU memory \(CUDA device \d+\)/,
        );
        return true;
      });
      return;
    }
    using region = registerMemory(buffer, { access: ["remote-write", "remote-read"] });
    assert.equal(region.path, status.path);
    assert.equal(region.length, buffer.byteLength);
    assert.equal(region.address, addressOf(buffer.pointer));
  },
);
