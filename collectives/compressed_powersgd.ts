/**
 * PowerSGD all-reduce (Vogels, Karimireddy & Jaggi, NeurIPS 2019; torch's `powerSGD_hook`): each matrix
 * M (rows × cols) of the tensor, plus this rank's residual, is approximated by P·Qᵀ of rank r with one
 * step of subspace iteration warm-started from the previous step's Q:
 *
 * 1. P = M·Q on every rank, and the elements outside the matrices (biases) beside them: one sum
 *    all-reduce;
 * 2. P's columns orthonormalised (modified Gram–Schmidt, the same bits on every rank);
 * 3. Q = Mᵀ·P, all-reduced and divided by n: Q is now Mᵀ·P averaged over the ranks;
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
 * Cost (`sim/compression.ts`): the two all-reduces, plus three products of rows·cols·r multiply-adds per
 * matrix (P, Q, P·Qᵀ): γ_matmul · 6·r·Σ rows·cols flops.
 *
 * @module
 */
import {
  type CompressedCall,
  type CompressedContext,
  floats,
  matrixRank,
  type MatrixSpan,
  powerSgdSizes,
} from "./_compressed.ts";

/** Keeps a zero column of P from becoming NaN (torch's `orthogonalization_epsilon`, but never 0). */
const EPSILON = 1e-8;

/**
 * Averages (or sums) `call.tensor` over the ranks, its matrices as rank-`call.rank` products.
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

  // 1. [uncompressed | Pᵀ of each matrix], summed.
  const first = floats(ctx.scratch(4 * (sizes.uncompressed + sizes.p)));
  let at = 0;
  for (const [lo, hi] of gaps) {
    first.set(tensor.subarray(lo, hi), at);
    at += hi - lo;
  }
  const pts: Float32Array[] = [], qs: Float32Array[] = [];
  let qAt = 0;
  for (const m of matrices) {
    const r = matrixRank(m, call.rank);
    const pt = first.subarray(at, at + r * m.rows);
    const qm = q.subarray(qAt, qAt + r * m.cols);
    // Pᵀ (r × rows) = Qᵀ (r × cols) · Mᵀ (cols × rows): Q is stored cols × r, M rows × cols.
    k.matmul(qm, view(source, m), { c: pt, m: r, k: m.cols, n: m.rows, transA: true, transB: true });
    pts.push(pt);
    qs.push(qm);
    at += r * m.rows;
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

  // 2. Orthonormal columns of P (rows of Pᵀ).
  const dot = floats(ctx.scratch(16), 0, 1);
  for (let j = 0; j < matrices.length; j++) orthonormalize(k, pts[j], matrices[j].rows, dot);

  // 3. Q = Mᵀ · P, averaged.
  const second = floats(ctx.scratch(4 * sizes.q));
  qAt = 0;
  for (let j = 0; j < matrices.length; j++) {
    const m = matrices[j], r = matrixRank(m, call.rank);
    const out = second.subarray(qAt, qAt + r * m.cols);
    // Q (cols × r) = Mᵀ (cols × rows) · P (rows × r): M is stored rows × cols, P as Pᵀ (r × rows).
    k.matmul(view(source, m), pts[j], { c: out, m: m.cols, k: m.rows, n: r, transA: true, transB: true });
    qAt += r * m.cols;
  }
  await ctx.allReduce(second);
  if (call.average) k.divide(second, size);
  q.set(second);

  // 4. The result P · Qᵀ (rows × cols), and what it missed stays in the residual.
  for (let j = 0; j < matrices.length; j++) {
    const m = matrices[j], r = matrixRank(m, call.rank);
    const out = view(tensor, m);
    k.matmul(pts[j], qs[j], { c: out, m: m.rows, k: r, n: m.cols, transA: true, transB: true });
    if (residual !== undefined) k.axpy(view(residual, m), out, { alpha: -1 });
  }
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
