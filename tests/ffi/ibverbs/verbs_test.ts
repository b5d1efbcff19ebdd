/**
 * The binding against the libibverbs installed here (rdma-core; CI installs libibverbs-dev). On machines
 * without a kernel RDMA stack `ibv_get_device_list` returns NULL with ENOSYS; where the stack is loaded
 * but no device is bound it returns an empty list; where hardware exists it lists devices. Each test
 * accepts the shape this machine has and checks what the binding makes of it.
 */
import assert from "node:assert/strict";
import { LibraryNotFoundError } from "../../../core/errors.ts";
import {
  ibverbs,
  IBVERBS_LIBRARY,
  ibverbsMissing,
  ibverbsPath,
  NoRdmaDeviceError,
} from "../../../ffi/ibverbs/ibverbs.ts";
import { openLibrary } from "../../../ffi/locate.ts";
import {
  type DeviceMemory,
  gpuDirectStatus,
  GpuDirectUnavailableError,
  rdmaDevices,
  registerMemory,
} from "../../../ffi/ibverbs/register.ts";
import { EMPTY_DEVICE_LIST, listDevices, openDevice } from "../../../ffi/ibverbs/verbs.ts";
import { gatedTest } from "../../_util/skip.ts";

const libraryMissing = ibverbsMissing();
const gate = {
  missing: libraryMissing === undefined ? undefined : `libibverbs not installed: ${libraryMissing}`,
};

/** What ibv_get_device_list says here: "null" (NULL + errno), "empty", or "devices". */
function listShape(): "null" | "empty" | "devices" {
  try {
    return listDevices().length === 0 ? "empty" : "devices";
  } catch (error) {
    assert.ok(error instanceof NoRdmaDeviceError, String(error));
    return "null";
  }
}

gatedTest("ibverbs() loads the installed libibverbs through the locator", gate, () => {
  const path = ibverbsPath();
  assert.match(path, /libibverbs\.so/);
  const lib = ibverbs();
  assert.equal(typeof lib.ibv_get_device_list, "function");
  // Optional: present from rdma-core 34 (Debian 12 ships 44).
  assert.equal(typeof lib.ibv_reg_dmabuf_mr, "function");
  // The inline data-path functions are not exported symbols: the binding must dispatch them itself.
  const probe = Deno.dlopen(path, {
    ibv_post_send: { parameters: [], result: "void", optional: true },
    ibv_poll_cq: { parameters: [], result: "void", optional: true },
  });
  assert.equal(probe.symbols.ibv_post_send, null);
  assert.equal(probe.symbols.ibv_poll_cq, null);
  probe.close();
});

gatedTest("listDevices() and openDevice() report no device in either shape, errno in words", gate, () => {
  const shape = listShape();
  if (shape === "devices") {
    using context = openDevice();
    assert.ok(context.device.name.length > 0);
    return;
  }
  assert.throws(() => openDevice(), (e: unknown) => {
    assert.ok(e instanceof NoRdmaDeviceError);
    assert.equal(e.code, "NO_RDMA_DEVICE");
    if (shape === "null") {
      // This machine: no kernel RDMA stack.
      if (e.errno === 38) {
        assert.equal(
          e.message,
          "No RDMA devices: ibv_get_device_list failed with ENOSYS (the kernel has no RDMA stack)",
        );
      } else {
        assert.match(e.message, /^No RDMA devices: ibv_get_device_list failed with E[A-Z]+ \(/);
      }
    } else {
      assert.equal(e.message, EMPTY_DEVICE_LIST);
      assert.equal(e.errno, 0);
    }
    return true;
  });
  if (shape === "empty") assert.deepEqual(listDevices(), []);
  else assert.throws(() => listDevices(), NoRdmaDeviceError);
});

gatedTest(
  "registerMemory() without an RDMA device says what was being registered and why it failed",
  gate,
  () => {
    if (listShape() === "devices") return; // covered by the hardware tests
    assert.throws(() => registerMemory(new Float32Array(1024)), (e: unknown) => {
      assert.ok(e instanceof NoRdmaDeviceError);
      assert.match(
        e.message,
        /^Cannot register 4096 bytes of host memory: No RDMA devices: ibv_get_device_list /,
      );
      return true;
    });
    const gpu: DeviceMemory = {
      pointer: Deno.UnsafePointer.create(0x7f00_0000_0000n),
      byteLength: 2 << 20,
      device: 0,
    };
    assert.throws(() => registerMemory(gpu, { access: ["remote-write"] }), (e: unknown) => {
      assert.ok(e instanceof NoRdmaDeviceError);
      assert.match(
        e.message,
        /^Cannot register 2097152 bytes \(2\.0 MiB\) of GPU memory \(CUDA device 0\): No RDMA devices/,
      );
      // The GPUDirect prerequisites are listed too, so a user fixing one problem sees the next.
      assert.match(e.message, /GPUDirect: .*peer-memory: no peer-memory module is loaded/);
      return true;
    });
  },
);

gatedTest("registerMemory() checks its arguments before touching a device", gate, () => {
  assert.throws(
    () => registerMemory(new Uint8Array(0)),
    /^RangeError: Expected at least 1 byte to register, found 0$/,
  );
  assert.throws(
    // deno-lint-ignore no-explicit-any
    () => registerMemory("bytes" as any),
    /^TypeError: Expected a TypedArray, DataView, ArrayBuffer or device buffer/,
  );
  assert.throws(
    // deno-lint-ignore no-explicit-any
    () => registerMemory(new Uint8Array(8), { access: ["write" as any] }),
    /^TypeError: Expected an access in local-write, remote-write, remote-read, remote-atomic, relaxed-ordering, found "write"$/,
  );
  assert.ok(GpuDirectUnavailableError.prototype instanceof Error);
});

gatedTest("gpuDirectStatus() reports every prerequisite and never throws", gate, () => {
  const status = gpuDirectStatus();
  assert.ok(["dma-buf", "peer-memory", "none"].includes(status.path));
  assert.equal(status.dmaBuf.rdmaCore, true);
  if (listShape() !== "devices") {
    assert.equal(status.dmaBuf.kernel, "not probed");
    assert.match(status.dmaBuf.kernelDetail, /^not probed: No RDMA devices/);
    assert.equal(status.path, "none");
  }
  let driverPresent = true;
  try {
    Deno.dlopen("libcuda.so.1", {}).close();
  } catch {
    driverPresent = false;
  }
  if (!driverPresent) {
    assert.equal(status.dmaBuf.driverVersion, undefined);
    assert.equal(status.dmaBuf.driverProblem, "libcuda.so.1 not found: no NVIDIA driver");
    assert.deepEqual(status.gpus, []);
  }
  if (status.path === "none") assert.ok(status.missing.length >= 2, status.missing.join("\n"));
});

gatedTest("rdmaDevices() summarises the devices, or says why there are none, and never throws", gate, () => {
  const summary = rdmaDevices();
  assert.match(summary.library ?? "", /libibverbs\.so/);
  const shape = listShape();
  if (shape === "devices") {
    assert.equal(summary.problem, undefined);
    assert.ok(summary.devices.length > 0);
  } else {
    assert.deepEqual(summary.devices, []);
    assert.match(summary.problem ?? "", /^No RDMA devices: ibv_get_device_list /);
  }
});

Deno.test("IBVERBS_LIBRARY's miss names DCOMM_IBVERBS_PATH, every path tried and the packages to install", () => {
  const previous = Deno.env.get("DCOMM_IBVERBS_PATH");
  Deno.env.delete("DCOMM_IBVERBS_PATH");
  try {
    // The same spec with a soname no machine has, so the loader's search fails too.
    assert.throws(
      () => openLibrary({ ...IBVERBS_LIBRARY, sonames: ["libibverbs-dcomm-test.so.1"] }, {}),
      (e: unknown) => {
        assert.ok(e instanceof LibraryNotFoundError);
        assert.match(e.message, /^Cannot find libibverbs\. Tried:\n/);
        assert.match(
          e.message,
          /libibverbs-dcomm-test\.so\.1 \(loader search: LD_LIBRARY_PATH, ldconfig cache\)/,
        );
        assert.match(
          e.message,
          /Fix: set DCOMM_IBVERBS_PATH to the library's path, or install libibverbs \(Debian\/Ubuntu: apt-get install libibverbs1 ibverbs-providers/,
        );
        return true;
      },
    );
  } finally {
    if (previous === undefined) Deno.env.delete("DCOMM_IBVERBS_PATH");
    else Deno.env.set("DCOMM_IBVERBS_PATH", previous);
  }
});
