/**
 * The trees the tree algorithms run on.
 *
 * The binary tree is NCCL's in-order layout (its shape, with the double tree's second, is
 * `sim/trees.ts`, which the cost model prices): a rank's level is its lowest set bit, so odd ranks are
 * leaves, rank 0 is the root with a single child (the largest power of two below the size), and the
 * height is ⌈log2 n⌉ for any size. A parent's lower child is `r - low/2`; its upper child is `r + low/2`
 * or, when that is past the end, the largest `r + 2^j` still inside.
 *
 * The double binary tree adds a second tree over the same ranks, mirrored (even sizes) or shifted by one
 * (odd sizes), so that the leaves of one tree (odd positions) are the interior nodes of the other and every
 * rank does the work of an interior node in only one of them.
 *
 * @module
 */
import { floorPow2, lowBit } from "./_layout.ts";
import { binaryTreeParent as parentOf, doubleTreeMap } from "../sim/trees.ts";

/** A rank's neighbours in a tree. */
export interface TreeLinks {
  /** The parent, or -1 at the root. */
  readonly parent: number;
  /** The children, in ascending rank order (the order their contributions are reduced in). */
  readonly children: readonly number[];
}

/** The links of `rank` in the in-order binary tree over `0..size-1`, rooted at 0. */
export function binaryTree(rank: number, size: number): TreeLinks {
  const parent = parentOf(rank, size);
  if (rank === 0) return { parent, children: size > 1 ? [floorPow2(size - 1)] : [] };
  const children: number[] = [];
  const half = lowBit(rank) >> 1;
  if (half > 0) children.push(rank - half);
  for (let step = half; step >= 1; step >>= 1) {
    const child = rank + step;
    if (child < size && parentOf(child, size) === rank) {
      children.push(child);
      break;
    }
  }
  return { parent, children };
}

/** The links of `rank` in both trees of the double binary tree; the first is {@linkcode binaryTree}. */
export function doubleBinaryTree(rank: number, size: number): [TreeLinks, TreeLinks] {
  const map = doubleTreeMap(1, size);
  const second = binaryTree(map.pos(rank), size);
  return [
    binaryTree(rank, size),
    {
      parent: map.rank(second.parent),
      children: second.children.map(map.rank).sort((a, b) => a - b),
    },
  ];
}
