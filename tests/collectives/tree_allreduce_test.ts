import assert from "node:assert/strict";
import { doubleTreeAllReduce, treeAllReduce } from "../../collectives/tree_allreduce.ts";
import { binaryTree, doubleBinaryTree, type TreeLinks } from "../../collectives/_trees.ts";
import { checkAllReduce, FEW_FLAVORS } from "./_cases.ts";
import { bytes, LARGE_COUNT, runWorld } from "./_harness.ts";

const LARGE = {
  sizes: [5, 8],
  counts: [LARGE_COUNT],
  flavors: [{ dtype: "float32", op: "sum" }, { dtype: "int32", op: "sum" }] as const,
  chunkBytes: 4096,
};

Deno.test("treeAllReduce() reduces int32 exactly and floats within rounding on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("treeAllReduce", treeAllReduce);
});

Deno.test("treeAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("treeAllReduce", treeAllReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`treeAllReduce() sums ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllReduce("treeAllReduce", treeAllReduce, LARGE);
});

Deno.test("doubleTreeAllReduce() reduces int32 exactly and floats within rounding on 1, 2, 3, 4, 5 and 8 ranks", async () => {
  await checkAllReduce("doubleTreeAllReduce", doubleTreeAllReduce);
});

Deno.test("doubleTreeAllReduce() gives the same answer over buffered sends", async () => {
  await checkAllReduce("doubleTreeAllReduce", doubleTreeAllReduce, {
    sizes: [3, 8],
    counts: [1024],
    flavors: FEW_FLAVORS,
    delivery: "eager",
  });
});

Deno.test(`doubleTreeAllReduce() sums ${LARGE_COUNT} elements on 5 and 8 ranks`, async () => {
  await checkAllReduce("doubleTreeAllReduce", doubleTreeAllReduce, LARGE);
});

Deno.test("doubleTreeAllReduce() moves half the buffer through each tree", async () => {
  const n = 8;
  const bufs = Array.from({ length: n }, () => bytes(new Int32Array(1024)));
  const { sent } = await runWorld(
    { size: n, dtype: "int32", chunkBytes: 1 << 20 },
    (ctx) => doubleTreeAllReduce(ctx, bufs[ctx.comm.rank]),
  );
  // Every tree link carries each half once up and once down: 2 × (n − 1) links × 2 halves of 2048 bytes.
  assert.equal(sent.reduce((s, r) => s + r.bytes, 0), 2 * (n - 1) * 2 * 2048);
  // No rank does an interior node's work in both trees: at most 1 + 2 (one tree) + 1 + 1 (the other) sends.
  for (const s of sent) assert.ok(s.messages <= 5, `a rank sent ${s.messages} messages`);
});

function checkTree(links: (r: number) => TreeLinks, n: number): number {
  let height = 0;
  let roots = 0;
  for (let r = 0; r < n; r++) {
    const { parent, children } = links(r);
    assert.ok(children.length <= 2, `rank ${r} of ${n} has ${children.length} children`);
    assert.deepEqual([...children], [...children].sort((a, b) => a - b));
    for (const c of children) assert.equal(links(c).parent, r, `child ${c} of ${r} (n=${n}) disowns it`);
    if (parent < 0) roots++;
    else assert.ok(links(parent).children.includes(r), `parent ${parent} of ${r} (n=${n}) disowns it`);
    let depth = 0;
    for (let at = r; links(at).parent >= 0; at = links(at).parent) {
      depth++;
      assert.ok(depth <= n, `rank ${r} of ${n} is on a cycle`);
    }
    height = Math.max(height, depth);
  }
  assert.equal(roots, 1);
  return height;
}

Deno.test("binaryTree() builds one tree of height ⌈log2 n⌉ with at most two children per rank", () => {
  for (let n = 1; n <= 70; n++) {
    assert.equal(checkTree((r) => binaryTree(r, n), n), Math.ceil(Math.log2(n)), `n=${n}`);
  }
});

Deno.test("doubleBinaryTree() builds two trees in which no rank has two children in both", () => {
  for (let n = 1; n <= 70; n++) {
    checkTree((r) => doubleBinaryTree(r, n)[0], n);
    checkTree((r) => doubleBinaryTree(r, n)[1], n);
    let both = 0;
    for (let r = 0; r < n; r++) {
      const [a, b] = doubleBinaryTree(r, n);
      if (a.children.length === 2 && b.children.length === 2) both++;
    }
    assert.equal(both, 0, `n=${n}: ${both} ranks have two children in both trees`);
  }
});
