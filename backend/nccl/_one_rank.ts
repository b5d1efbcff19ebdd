/**
 * A workaround for NCCL before 2.29.7: on a one-rank communicator a PreMulSum (a `scale`, or op
 * `"premulSum"`) runs NCCL's `oneRankReduce` kernel, whose blocks each take `alignUp(count / blocks,
 * 16 B)` elements with `count / blocks` rounded down, so the last block can stop short of `count` and the
 * tail keeps its unscaled value (float64, 4099 elements: element 4098; seen on NCCL 2.28.9, an H200).
 * 2.29.7 rounds up (`divUp`). The fix here: the call in at most two pieces, each of a count the old
 * kernel covers whole.
 *
 * @module
 */
import { compareNcclVersions, type NcclVersion, ncclVersionCode } from "../../ffi/nccl/constants.ts";

/** The first release whose one-rank PreMulSum covers every element. */
export const ONE_RANK_PREMUL_FIXED: number = ncclVersionCode(2, 29, 7);

/** Whether `version`'s one-rank PreMulSum may drop the tail. */
export function oneRankPremulDropsTail(version: NcclVersion): boolean {
  return compareNcclVersions(version, ONE_RANK_PREMUL_FIXED) < 0;
}

/** The blocks NCCL's `ncclLaunchOneRank` gives `count` elements: one per 16 KiB, at most 32. */
function blocks(count: number, elementSize: number): number {
  return Math.max(1, Math.min(32, Math.ceil((count * elementSize) / 16384)));
}

/** Whether the pre-2.29.7 kernel covers all of `count` elements. */
export function oldKernelCovers(count: number, elementSize: number): boolean {
  const pack = Math.max(1, 16 / elementSize);
  const n = blocks(count, elementSize);
  return n * Math.ceil(Math.floor(count / n) / pack) * pack >= count;
}

/**
 * The pieces (`[first element, count]`) of a one-rank PreMulSum of `count` elements that the pre-2.29.7
 * kernel covers whole: the call itself when it does, else a head that is a whole number of packs per
 * block and the short tail (under 32 packs, so one block).
 *
 * @param count The elements.
 * @param elementSize Bytes per element.
 * @returns One or two pieces, in order, covering `[0, count)`.
 */
export function oneRankPremulPieces(count: number, elementSize: number): [number, number][] {
  if (oldKernelCovers(count, elementSize)) return [[0, count]];
  const pack = Math.max(1, 16 / elementSize);
  let head = count;
  do {
    const step = blocks(head, elementSize) * pack;
    head = Math.floor(head / step) * step;
  } while (head > 0 && !oldKernelCovers(head, elementSize));
  return head === 0 ? [[0, count]] : [[0, head], [head, count - head]];
}
