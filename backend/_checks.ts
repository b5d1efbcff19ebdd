/**
 * Argument checks every backend's process group shares, so that a bad call gets the same message on
 * `cpu`, `nccl` and `mpi`: a `RangeError` naming what was expected and what was found, before anything is
 * sent.
 *
 * @module
 */

/** A length, as every tensor kind (TypedArray, DeviceBuffer) has one. */
interface Sized {
  readonly length: number;
}

/**
 * Checks a rank argument (a root or a peer) of a group of `size` ranks.
 *
 * @throws {TypeError} If `r` is not a number.
 * @throws {RangeError} If `r` is not an integer in 0..size-1.
 */
export function checkRank(what: string, name: string, r: number, size: number): number {
  if (typeof r !== "number") {
    // `root: "0"` is not rank 0: say what was found, not what it prints as.
    const found = typeof r === "string" ? `the string ${JSON.stringify(r)}` : r === null ? "null" : typeof r;
    throw new TypeError(
      `Cannot ${what}: ${name} must be a rank in 0..${size - 1} (a number), found ${found}`,
    );
  }
  if (!Number.isInteger(r) || r < 0 || r >= size) {
    throw new RangeError(`Cannot ${what}: ${name} must be a rank in 0..${size - 1}, found ${r}`);
  }
  return r;
}

/**
 * Checks a point-to-point peer: a rank of the group other than this one.
 *
 * @throws {RangeError} If `peer` is out of range or is `rank` itself.
 */
export function checkPeer(what: string, peer: number, group: { rank: number; size: number }): number {
  checkRank(what, "peer", peer, group.size);
  if (peer === group.rank) throw new RangeError(`Cannot ${what}: peer ${peer} is this rank`);
  return peer;
}

/**
 * Checks the lengths of an out-of-place block collective on `size` ranks: all-gather's (and the root's
 * gather) output holds `size` inputs, reduce-scatter's (and the root's scatter) input holds `size`
 * outputs, all-to-all's input and output have the same length, a multiple of `size`.
 *
 * @throws {RangeError} If the lengths do not fit.
 */
export function checkBlocks(
  collective: "allGather" | "reduceScatter" | "allToAll" | "gather" | "scatter",
  output: Sized,
  input: Sized,
  size: number,
): void {
  if (collective === "gather" && output.length !== input.length * size) {
    throw new RangeError(
      `Cannot gather: the root's output must hold ${size} × ${input.length} = ${input.length * size} ` +
        `elements, found ${output.length}`,
    );
  }
  if (collective === "scatter" && input.length !== output.length * size) {
    throw new RangeError(
      `Cannot scatter: the root's input must hold ${size} × ${output.length} = ${output.length * size} ` +
        `elements, found ${input.length}`,
    );
  }
  if (collective === "allGather" && output.length !== input.length * size) {
    throw new RangeError(
      `Cannot all-gather: output must hold ${size} × ${input.length} = ${input.length * size} elements, ` +
        `found ${output.length}`,
    );
  }
  if (collective === "reduceScatter" && input.length !== output.length * size) {
    throw new RangeError(
      `Cannot reduce-scatter: input must hold ${size} × ${output.length} = ${
        output.length * size
      } elements, ` +
        `found ${input.length}`,
    );
  }
  if (collective === "allToAll" && (input.length !== output.length || input.length % size !== 0)) {
    throw new RangeError(
      `Cannot all-to-all: input and output must have the same length, a multiple of ${size}; ` +
        `found input ${input.length} and output ${output.length}`,
    );
  }
}

/**
 * Checks the ranks of a new sub-group of a group of `size` ranks and returns them sorted (a sub-group's
 * ranks are numbered in the parent's order, as torch.distributed's `new_group` does: it sorts them too).
 *
 * @throws {RangeError} If the list is empty, holds a rank out of range, or lists a rank twice.
 */
export function checkGroupRanks(ranks: readonly number[], size: number): number[] {
  const shown = Array.isArray(ranks) ? `[${ranks.join(", ")}]` : String(ranks);
  if (!Array.isArray(ranks) || ranks.length === 0) {
    throw new RangeError(`Cannot create a group: expected a non-empty array of ranks, found ${shown}`);
  }
  const sorted = [...ranks].sort((a, b) => a - b);
  for (let i = 0; i < sorted.length; i++) {
    const r = sorted[i];
    if (!Number.isInteger(r) || r < 0 || r >= size) {
      throw new RangeError(`Cannot create a group: ranks must be integers in 0..${size - 1}, found ${r}`);
    }
    if (i > 0 && sorted[i - 1] === r) {
      throw new RangeError(
        `Cannot create a group: expected each rank once, found rank ${r} twice in ${shown}`,
      );
    }
  }
  return sorted;
}

/**
 * Checks the `counts` of a v-form (elements per rank, zeros allowed) on `size` ranks.
 *
 * @param what The collective, as messages name it.
 * @param name The option's name.
 * @param counts The option.
 * @param size The group's size.
 * @returns A frozen copy (the caller may change its array while the call runs).
 * @throws {RangeError} If it is not `size` integers >= 0.
 */
export function checkCounts(what: string, name: string, counts: unknown, size: number): readonly number[] {
  const list = Array.isArray(counts) ? counts : undefined;
  if (
    list === undefined || list.length !== size ||
    !list.every((c) => Number.isInteger(c) && c >= 0 && c <= Number.MAX_SAFE_INTEGER)
  ) {
    const found = list === undefined ? String(counts) : `[${list.join(", ")}]`;
    throw new RangeError(
      `Cannot ${what}: expected ${name} to be ${size} integer${size === 1 ? "" : "s"} >= 0 (one per rank), ` +
        `found ${found}`,
    );
  }
  return Object.freeze([...list]);
}

/**
 * Checks a v-form's tensor length: `tensor` (if given) holds `want` elements.
 *
 * @param what The collective, as messages name it.
 * @param name The tensor's name.
 * @param tensor The tensor, or undefined where this rank passes none.
 * @param want Its elements.
 * @param why How `want` follows from the counts, for the message.
 * @throws {RangeError} If the length differs.
 */
export function checkCountLength(
  what: string,
  name: string,
  tensor: Sized | undefined,
  want: number,
  why: string,
): void {
  if (tensor !== undefined && tensor.length !== want) {
    throw new RangeError(
      `Cannot ${what}: ${name} must hold ${why} = ${want} elements, found ${tensor.length}`,
    );
  }
}

/** The sum of a checked counts list. */
export function countsSum(counts: readonly number[]): number {
  let sum = 0;
  for (const c of counts) sum += c;
  return sum;
}
