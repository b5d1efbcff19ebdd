/**
 * PowerSGD all-reduce (Vogels, Karimireddy & Jaggi, NeurIPS 2019; torch's `powerSGD_hook`): each matrix
 * M (rows × cols) of the tensor, plus this rank's residual, is approximated by P·Qᵀ of rank r with one
 * step of subspace iteration warm-started from the previous step's Q:
 *
 * 1. P = M·Q on every rank (Q kept as Qᵀ, `r × cols` per matrix), and the elements outside the matrices
 *    (biases) beside them: one sum all-reduce;
 * 2. P's columns orthonormalised (modified Gram–Schmidt, the same bits on every rank);
 * 3. Qᵀ = Pᵀ·M, all-reduced and divided by n: Q is now Mᵀ·P averaged over the ranks;
 * 4. the result P·Qᵀ, the same on every rank; the residual keeps M − P·Qᵀ (error feedback), and Q stays
 *    for the next step.
 *
 * Bytes each rank hands out: 4·(u + Σ rows·r) then 4·Σ cols·r (u the uncompressed elements), against
 * 4·Σ rows·cols: a 784 × 128 layer at r = 2 sends 3.6 KB instead of 401 KB.
 *
 * Error feedback, exactly (up to float32 rounding): as the other codecs, the outputs of steps 1..T sum to
 * the averages of the gradients minus mean_i e_i after step T, because P·Qᵀ = P·Pᵀ·mean_i(M_i) is the
 * same projection on every rank. Each step, ‖mean(M) − P·Qᵀ‖ ≤ ‖mean(M)‖ (P orthonormal).
 *
 * Cost ({@linkcode powerSgdAllReduceCost}): the two all-reduces (ring over messages), plus three products
 * of rows·cols·r multiply-adds per matrix (P, Q, P·Qᵀ): γ_matmul · 6·r·Σ rows·cols flops.
 *
 * @module
 */
import {
  type CompressedCall,
  type CompressedContext,
  type CompressedShape,
  floats,
  matrixRank,
  type MatrixSpan,
  powerSgdSizes,
} from "./compressed_context.ts";
import { type CostConstants, ringAllReduceCost } from "../sim/cost_model.ts";

/** Keeps a zero column of P from becoming NaN (torch's `orthogonalization_epsilon`, but never 0). */
const EPSILON = 1e-8;

/**
 * Averages (or sums) `call.tensor` over the ranks, its matrices as rank-`call.rank` products.
 *
 * Layouts, row-major, chosen so that no product reads a gradient matrix transposed (each streams M by
 * rows): P is `rows × r`; Q is kept as Qᵀ, `r × cols` per matrix, in `call.q`; Gram–Schmidt works on Pᵀ,
 * whose rows are P's columns.
 *
 * @param ctx The context.
 * @param call The call (`rank`, `matrices`, `q`; `residual` for error feedback).
 */
export async function powerSgdAllReduce(ctx: CompressedContext, call: CompressedCall): Promise<void> {
  const { size, kernels: k } = ctx;
  const { tensor, matrices, residual } = call;
  const q = call.q as Float32Array;
  const sizes = powerSgdSizes(tensor.length, matrices, call.rank);
  const gaps = uncovered(tensor.length, matrices);
  const view = (a: Float32Array, m: MatrixSpan): Float32Array =>
    a.subarray(m.offset, m.offset + m.rows * m.cols);

  // M = g + e, kept in the residual; without error feedback, M is the gradient itself.
  if (residual !== undefined) { for (const m of matrices) k.axpy(view(residual, m), view(tensor, m)); }
  const source = residual ?? tensor;

  // 1. [uncompressed | P of each matrix], summed.
  const first = floats(ctx.scratch(4 * (sizes.uncompressed + sizes.p)));
  let at = 0;
  for (const [lo, hi] of gaps) {
    first.set(tensor.subarray(lo, hi), at);
    at += hi - lo;
  }
  const ps: Float32Array[] = [], qts: Float32Array[] = [];
  let qAt = 0;
  for (const m of matrices) {
    const r = matrixRank(m, call.rank);
    const p = first.subarray(at, at + m.rows * r);
    const qt = q.subarray(qAt, qAt + r * m.cols);
    // P (rows × r) = M (rows × cols) · Q (cols × r), Q given as Qᵀ (r × cols).
    k.matmul(view(source, m), qt, { c: p, m: m.rows, k: m.cols, n: r, transB: true });
    ps.push(p);
    qts.push(qt);
    at += m.rows * r;
    qAt += r * m.cols;
  }
  await ctx.allReduce(first);
  at = 0;
  for (const [lo, hi] of gaps) {
    const part = first.subarray(at, at + hi - lo);
    if (call.average) k.divide(part, size);
    tensor.set(part, lo);
    at += hi - lo;
  }

  // 2. Orthonormal columns of P: on Pᵀ, whose rows they are, then back.
  const dot = floats(ctx.scratch(16), 0, 1);
  const pts = matrices.map((m, j) => {
    const r = matrixRank(m, call.rank);
    const pt = floats(ctx.scratch(4 * r * m.rows));
    transpose(ps[j], m.rows, r, pt);
    orthonormalize(k, pt, m.rows, dot);
    transpose(pt, r, m.rows, ps[j]);
    return pt;
  });

  // 3. Qᵀ (r × cols) = Pᵀ (r × rows) · M (rows × cols), averaged.
  const second = floats(ctx.scratch(4 * sizes.q));
  qAt = 0;
  for (let j = 0; j < matrices.length; j++) {
    const m = matrices[j], r = matrixRank(m, call.rank);
    k.matmul(pts[j], view(source, m), {
      c: second.subarray(qAt, qAt + r * m.cols),
      m: r,
      k: m.rows,
      n: m.cols,
    });
    qAt += r * m.cols;
  }
  await ctx.allReduce(second);
  if (call.average) k.divide(second, size);
  q.set(second);

  // 4. The result P (rows × r) · Qᵀ (r × cols), and what it missed stays in the residual.
  for (let j = 0; j < matrices.length; j++) {
    const m = matrices[j], r = matrixRank(m, call.rank);
    const out = view(tensor, m);
    k.matmul(ps[j], qts[j], { c: out, m: m.rows, k: r, n: m.cols });
    // Each rank keeps M − its share of the result: all of the average's, 1/n of a sum's.
    if (residual !== undefined) k.axpy(view(residual, m), out, { alpha: call.average ? -1 : -1 / size });
  }
}

/** `out` (cols × rows) = the transpose of `a` (rows × cols): a rank-r panel, a few floats a row. */
function transpose(a: Float32Array, rows: number, cols: number, out: Float32Array): void {
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = a[i * cols + j];
}

/** Modified Gram–Schmidt on the `r` rows (each `length` long) of `rows`. */
function orthonormalize(
  k: CompressedContext["kernels"],
  rows: Float32Array,
  length: number,
  dot: Float32Array,
): void {
  const r = rows.length / length;
  const row = (i: number): Float32Array => rows.subarray(i * length, (i + 1) * length);
  for (let i = 0; i < r; i++) {
    const v = row(i);
    k.matmul(v, v, { c: dot, m: 1, k: length, n: 1 });
    k.scale(v, 1 / (Math.sqrt(dot[0]) + EPSILON));
    for (let t = i + 1; t < r; t++) {
      const w = row(t);
      k.matmul(v, w, { c: dot, m: 1, k: length, n: 1 });
      k.axpy(w, v, { alpha: -dot[0] });
    }
  }
}

/** The ranges `[lo, hi)` of `[0, count)` outside the matrices (sorted, disjoint). */
export function uncovered(count: number, matrices: readonly MatrixSpan[]): [number, number][] {
  const out: [number, number][] = [];
  let at = 0;
  for (const m of matrices) {
    if (m.offset > at) out.push([at, m.offset]);
    at = m.offset + m.rows * m.cols;
  }
  if (at < count) out.push([at, count]);
  return out;
}

/**
 * PowerSGD's predicted seconds over messages: ring all-reduces of P (with the uncompressed elements) and
 * of Q, plus `computeSeconds` (the products and the orthogonalisation, measured: `bench/compress.ts`).
 * Without `shape.matrices`, the tensor is one matrix as square as its count allows.
 *
 * @param shape The call.
 * @param constants The network's α, β, γ.
 * @param computeSeconds The kernels' time on one rank.
 * @returns Seconds.
 */
export function powerSgdAllReduceCost(
  shape: CompressedShape,
  constants: CostConstants,
  computeSeconds = 0,
): number {
  const rows = 2 ** Math.round(Math.log2(Math.sqrt(shape.count)));
  const matrices = shape.matrices ?? [{ offset: 0, rows, cols: Math.floor(shape.count / rows) }];
  const sizes = powerSgdSizes(shape.count, matrices, shape.rank ?? 2);
  const n = shape.size;
  return ringAllReduceCost({ size: n, bytes: 4 * (sizes.uncompressed + sizes.p) }, constants) +
    ringAllReduceCost({ size: n, bytes: 4 * sizes.q }, constants) + computeSeconds;
}
