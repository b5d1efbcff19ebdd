/**
 * The gate of the tests that need RDMA hardware (CI cannot install any, so `DCOMM_REQUIRE_ALL` does not turn
 * their skips into failures unless libibverbs itself is missing).
 *
 * @module
 */
import { ibverbsMissing, NoRdmaDeviceError } from "../../ffi/ibverbs/ibverbs.ts";
import { IBV_PORT_STATE } from "../../ffi/ibverbs/layout.ts";
import { listDevices, openDevice } from "../../ffi/ibverbs/verbs.ts";
import type { GateOptions } from "./skip.ts";

/** Whether this machine has an RDMA device with an active port, and if not, why. */
export function rdmaHardware(): GateOptions {
  const library = ibverbsMissing();
  if (library !== undefined) {
    return { missing: `libibverbs not installed: ${library.split("\n")[0]}`, ciCanSatisfy: true };
  }
  try {
    const devices = listDevices();
    if (devices.length === 0) {
      return { missing: "no RDMA device: ibv_get_device_list returned an empty list", ciCanSatisfy: false };
    }
    for (const device of devices) {
      using context = openDevice(device.name);
      const ports = context.queryDevice().physPortCount;
      for (let port = 1; port <= ports; port++) {
        if (context.queryPort(port).state === IBV_PORT_STATE.ACTIVE) return { missing: undefined };
      }
    }
    return {
      missing: `no active RDMA port on ${devices.map((d) => d.name).join(", ")}`,
      ciCanSatisfy: false,
    };
  } catch (error) {
    if (error instanceof NoRdmaDeviceError) {
      return {
        missing: `no RDMA device: ${error.message.replace(/^No RDMA devices: /, "")}`,
        ciCanSatisfy: false,
      };
    }
    throw error;
  }
}
