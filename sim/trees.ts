/**
 * The shapes of the trees the tree all-reduces run on, which the cost model prices and
 * `collectives/_trees.ts` builds its links from: one definition for both.
 *
 * The binary tree is NCCL's in-order layout over positions 0..n−1: a position's level is its lowest set
 * bit, so odd positions are leaves, position 0 is the root with a single child (the largest power of two
 * below n), and the height is ⌈log2 n⌉. The double binary tree's second tree puts rank r at position
 * n−1−r (even n, mirrored) or r+1 mod n (odd n, shifted), so that the leaves of one tree are interior in
 * the other.
 *
 * @module
 */

/**
 * The parent of position `pos` in the in-order binary tree of `size` positions.
 *
 * @param pos A position in 0..size−1.
 * @param size The positions.
 * @returns The parent's position, or −1 at the root (0).
 */
export function binaryTreeParent(pos: number, size: number): number {
  if (pos === 0) return -1;
  const low = pos & -pos;
  const up = (pos ^ low) | (low << 1);
  return up < size ? up : pos ^ low;
}

/**
 * Where rank `rank` sits in tree `t` of the double binary tree over `size` ranks, and back.
 *
 * @param t The tree: 0 (ranks at their own positions) or 1 (mirrored or shifted).
 * @param size The ranks.
 * @returns The position of a rank, and the rank at a position (−1 stays −1).
 */
export function doubleTreeMap(
  t: 0 | 1,
  size: number,
): { pos(rank: number): number; rank(pos: number): number } {
  const mirror = size % 2 === 0;
  if (t === 0) return { pos: (r) => r, rank: (p) => p };
  return {
    pos: (r) => mirror ? size - 1 - r : (r + 1) % size,
    rank: (p) => p < 0 ? -1 : mirror ? size - 1 - p : (p + size - 1) % size,
  };
}

/**
 * Each rank's parent (−1 at the root) and level (its position's lowest set bit's index; the root's is the
 * tree's height) in tree `t` of the double binary tree (tree 0 alone is the binary tree).
 *
 * @param t The tree.
 * @param size The ranks.
 * @returns Parents and levels by rank.
 */
export function treeShape(t: 0 | 1, size: number): { parent: number[]; level: number[] } {
  const map = doubleTreeMap(t, size);
  const parent: number[] = [], level: number[] = [];
  let height = 0;
  for (let p = 1; p < size; p *= 2) height++;
  for (let r = 0; r < size; r++) {
    const pos = map.pos(r);
    parent.push(map.rank(binaryTreeParent(pos, size)));
    level.push(pos === 0 ? height : Math.log2(pos & -pos));
  }
  return { parent, level };
}
