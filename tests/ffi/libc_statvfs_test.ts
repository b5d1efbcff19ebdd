/**
 * `statvfs()` of ffi/libc: its `struct statvfs` offsets against the real `<sys/statvfs.h>` (a probe built
 * with gcc), and its figures against coreutils' `stat -f` on the same file systems.
 */
import assert from "node:assert/strict";
import { LibcError, statvfs, STATVFS_LAYOUT } from "../../ffi/libc/libc.ts";
import { gatedTest, hasCommand } from "../_util/skip.ts";
import { compile } from "./ibverbs/_cc.ts";

const GCC_MISSING = hasCommand("gcc") ? undefined : "gcc not found (apt-get install gcc)";

gatedTest("STATVFS_LAYOUT matches struct statvfs of <sys/statvfs.h>", { missing: GCC_MISSING }, async () => {
  const source = [
    "#include <stdio.h>",
    "#include <stddef.h>",
    "#include <sys/statvfs.h>",
    "int main(void) {",
    '  printf("%zu %zu %zu %zu %zu %zu\\n", sizeof(struct statvfs), offsetof(struct statvfs, f_frsize),',
    "    offsetof(struct statvfs, f_blocks), offsetof(struct statvfs, f_bavail),",
    "    sizeof(((struct statvfs *)0)->f_blocks), sizeof(((struct statvfs *)0)->f_bavail));",
    "  return 0;",
    "}",
  ].join("\n");
  await using probe = await compile(source);
  const out = await new Deno.Command(probe.path, { stdout: "piped" }).output();
  assert.ok(out.success, `the probe exited with ${out.code}`);
  const [size, frsize, blocks, bavail, blocksBytes, bavailBytes] = new TextDecoder().decode(out.stdout)
    .trim().split(" ").map(Number);
  assert.deepEqual(
    { size, f_frsize: frsize, f_blocks: blocks, f_bavail: bavail },
    { ...STATVFS_LAYOUT },
  );
  assert.equal(blocksBytes, 8, "f_blocks is read as 64 bits");
  assert.equal(bavailBytes, 8, "f_bavail is read as 64 bits");
});

gatedTest(
  "statvfs() gives the sizes stat -f gives, and a LibcError naming the path it cannot find",
  { missing: hasCommand("stat") ? undefined : "coreutils stat not found" },
  async () => {
    for (const path of ["/dev/shm", "/"]) {
      const out = await new Deno.Command("stat", { args: ["-f", "-c", "%S %b", path], stdout: "piped" })
        .output();
      const [frsize, blocks] = new TextDecoder().decode(out.stdout).trim().split(" ").map(Number);
      const space = statvfs(path);
      assert.equal(space.totalBytes, frsize * blocks, path);
      assert.ok(space.freeBytes >= 0 && space.freeBytes <= space.totalBytes, JSON.stringify(space));
    }
    assert.throws(
      () => statvfs("/no/such/dcomm/path"),
      (e: unknown) => e instanceof LibcError && /statvfs\("\/no\/such\/dcomm\/path"\)/.test(e.message),
    );
  },
);
