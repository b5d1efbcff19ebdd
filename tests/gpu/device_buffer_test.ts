import assert from "node:assert/strict";
import { CudaError } from "../../core/errors.ts";
import { dtypeSize } from "../../core/dtype.ts";
import { CudaErrorCode, MemoryType } from "../../ffi/cudart/constants.ts";
import { pointerAttributes } from "../../ffi/cudart/cudart.ts";
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { deviceCount } from "../../ffi/cudart/cudart.ts";
import { deviceInfo } from "../../gpu/device.ts";
import { HostRegistration, PinnedBuffer } from "../../gpu/pinned_buffer.ts";
import { Stream } from "../../gpu/stream.ts";
import { gatedTest } from "../_util/skip.ts";
import { getValue, GPU, mismatches, rankInput, TEST_DTYPES } from "./_gpu.ts";

gatedTest("deviceInfo() describes GPU 0: compute capability, SMs, PCI bus id, memory", GPU, () => {
  assert.ok(deviceCount() >= 1);
  const info = deviceInfo(0, { memory: true });
  assert.match(info.computeCapability, /^\d+\.\d+$/);
  assert.ok(info.sm >= 50 && info.multiProcessors > 0);
  assert.match(info.pciBusId, /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$/i);
  assert.ok((info.totalMemory ?? 0) > 1 << 30 && (info.freeMemory ?? 0) > 0);
  console.log(info);
});

gatedTest("DeviceBuffer round-trips every dtype through device memory", GPU, () => {
  for (const dtype of TEST_DTYPES) {
    const host = rankInput(dtype, 1000, 1);
    using buf = DeviceBuffer.from(host, { dtype });
    assert.equal(buf.dtype, dtype);
    assert.equal(buf.length, 1000);
    assert.equal(buf.byteLength, 1000 * dtypeSize(dtype));
    assert.equal(buf.device, 0);
    const back = buf.toArray();
    const expected = Array.from({ length: 1000 }, (_, i) => getValue(host, dtype, i));
    assert.deepEqual(mismatches(back, dtype, expected), [], dtype);
  }
});

gatedTest("DeviceBuffer copies check dtype and length", GPU, () => {
  using buf = DeviceBuffer.alloc(8, { dtype: "float32" });
  assert.throws(() => buf.copyFrom(new Float32Array(7)), /expected 8 elements, found 7/);
  assert.throws(() => buf.copyFrom(new Int32Array(8)), /holds float32.*Int32Array holds int32/);
  assert.throws(() => buf.copyTo(new Float64Array(8)), TypeError);
  using other = DeviceBuffer.alloc(8, { dtype: "int32" });
  assert.throws(() => buf.copyFrom(other), /this buffer holds float32, the other int32/);
});

gatedTest("DeviceBuffer views share memory and own none of it", GPU, () => {
  const host = new Float32Array(10).map((_, i) => i);
  const buf = DeviceBuffer.from(host);
  const view = buf.view(2, 3);
  assert.equal(view.isView, true);
  assert.deepEqual([...(view.toArray() as Float32Array)], [2, 3, 4]);
  view.copyFrom(new Float32Array([20, 30, 40]));
  assert.deepEqual([...(buf.toArray() as Float32Array)], [0, 1, 20, 30, 40, 5, 6, 7, 8, 9]);
  view[Symbol.dispose]();
  assert.equal(buf.disposed, false, "disposing a view frees nothing");
  assert.throws(() => buf.view(8, 3), RangeError);
  buf[Symbol.dispose]();
  assert.equal(view.disposed, true);
  assert.throws(() => view.toArray(), /disposed DeviceBuffer .*a view whose parent was disposed/);
  buf[Symbol.dispose](); // twice is a no-op
});

gatedTest("DeviceBuffer.zero(), device-to-device copies and pointer attributes", GPU, () => {
  using a = DeviceBuffer.from(new Int32Array([1, 2, 3, 4]));
  using b = DeviceBuffer.alloc(4, { dtype: "int32" });
  b.copyFrom(a);
  assert.deepEqual([...(b.toArray() as Int32Array)], [1, 2, 3, 4]);
  a.zero();
  assert.deepEqual([...(a.toArray() as Int32Array)], [0, 0, 0, 0]);
  const attributes = pointerAttributes(a.pointer);
  assert.equal(attributes.type, MemoryType.Device);
  assert.equal(attributes.device, 0);
  assert.equal(attributes.devicePointer, Deno.UnsafePointer.value(a.pointer));
});

gatedTest("copies queued on a stream from and into pinned memory", GPU, async () => {
  using stream = Stream.create({ nonBlocking: true });
  using pinned = PinnedBuffer.alloc(4 * 1024 * 1024);
  const src = pinned.array("float32", 1 << 19) as Float32Array;
  const dst = pinned.array("float32", 1 << 20).subarray(1 << 19) as Float32Array;
  for (let i = 0; i < src.length; i++) src[i] = i * 0.5;
  using buf = DeviceBuffer.alloc(src.length);
  buf.copyFrom(src, { stream });
  buf.copyTo(dst, { stream });
  await stream.done({ timeoutMs: 10_000 });
  assert.equal(dst[12345], 12345 * 0.5);
  assert.equal(pointerAttributes(pinned.pointer).type, MemoryType.Host);
});

gatedTest("HostRegistration page-locks a TypedArray until disposed", GPU, () => {
  const array = new Float32Array(1 << 16);
  {
    using registration = HostRegistration.register(array);
    assert.equal(registration.array, array);
    assert.equal(pointerAttributes(Deno.UnsafePointer.of(array)).type, MemoryType.Host);
    assert.throws(
      () => HostRegistration.register(array),
      (e: unknown) => e instanceof CudaError && e.status === CudaErrorCode.HostMemoryAlreadyRegistered,
    );
  }
  assert.equal(pointerAttributes(Deno.UnsafePointer.of(array)).type, MemoryType.Unregistered);
});

gatedTest("`using` frees a DeviceBuffer at the end of its block", GPU, () => {
  let escaped: DeviceBuffer;
  {
    using buf = DeviceBuffer.alloc(16);
    escaped = buf;
    assert.equal(buf.disposed, false);
  }
  assert.equal(escaped.disposed, true);
  assert.throws(() => escaped.pointer, TypeError);
});
