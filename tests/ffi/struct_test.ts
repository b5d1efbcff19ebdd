/** `ffi/_struct.ts`: views of C structs through their layout tables. */
import assert from "node:assert/strict";
import { Struct } from "../../ffi/_struct.ts";
import { IBV_DEVICE, IBV_SEND_WR } from "../../ffi/ibverbs/layout.ts";

Deno.test("Struct reads and writes fields by their size, and refuses the wrong access", () => {
  const wr = new Struct(IBV_SEND_WR);
  wr.set("opcode", 1).setBig("wr_id", 0xffff_ffff_ffff_ffffn).setBe32("imm_data", 0x0102_0304);
  assert.equal(wr.get("opcode"), 1);
  assert.equal(wr.getBig("wr_id"), 0xffff_ffff_ffff_ffffn);
  assert.deepEqual([...wr.fieldBytes("imm_data")], [1, 2, 3, 4]);
  assert.equal(wr.getBe32("imm_data"), 0x0102_0304);
  wr.set("num_sge", -1);
  assert.equal(wr.getInt("num_sge"), -1);
  assert.throws(
    () => wr.get("wr_id"),
    /^TypeError: Cannot access struct ibv_send_wr\.wr_id \(8 bytes\) as 1 or 2 or 4$/,
  );
  assert.throws(() => wr.setBig("opcode", 1n), TypeError);
  assert.throws(
    () => wr.set("opcode", 2 ** 32),
    /^RangeError: Expected struct ibv_send_wr\.opcode to fit 4 bytes/,
  );
  const device = new Struct(IBV_DEVICE);
  device.fieldBytes("name").set(new TextEncoder().encode("mlx5_0"));
  assert.equal(device.getString("name"), "mlx5_0");
  assert.equal(device.bytes.length, 664);
});
