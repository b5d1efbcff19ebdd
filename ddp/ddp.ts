/**
 * {@linkcode DistributedDataParallel}: gradient buckets whose averaging overlaps the backward pass, as
 * torch's `DistributedDataParallel` does, over any {@linkcode ProcessGroup}.
 *
 * - The parameters' gradients are assigned to buckets in reverse registration order (the order a backward
 *   pass produces them), each bucket of one dtype and at most `bucketMb` (25 MiB, torch's default; the
 *   first `firstBucketMb`, 1 MiB, so that communication starts early); a parameter larger than the cap
 *   gets a bucket of its own.
 * - `gradReady(i)` says that parameter `i`'s gradient is final for this step. A bucket whose gradients are
 *   all ready is handed to the hook (an all-reduce by default) at once, and runs on the communication
 *   thread while the backward pass goes on. Buckets launch in bucket order on every rank, whatever order
 *   the gradients come in, so the ranks' collectives always match.
 * - `await synchronize()` waits for every bucket, copies the averages back into the gradients (none to copy
 *   with the gradients as bucket views, the default when no gradient arrays are given) and reports the step.
 * - `noSync(fn)` runs a step without communication, for gradient accumulation.
 * - The parameters are broadcast from rank 0 when the helper is made, so every rank starts the same.
 * - A parameter that gets no `gradReady` in a step is an error at `synchronize()` naming it, unless
 *   `findUnusedParameters` treats such gradients as zero.
 *
 * @module
 */
import { type DType, dtypeOf, dtypeSize, type TypedArray } from "../core/dtype.ts";
import { DistError, RevokedError, TransportError } from "../core/errors.ts";
import type { ProcessGroup } from "../backend/process_group.ts";
import { allReduceHook, type CommHook, type HookBucket, type HookReport } from "./hooks.ts";

/**
 * Options of {@linkcode DistributedDataParallel.create}.
 *
 * @example Gradients of your own, small buckets, a compressing hook
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type DdpOptions, DistributedDataParallel, fp16CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const params = [new Float32Array(6), new Float32Array(2)]; // a 2 × 3 weight and its bias
 * const options: DdpOptions<Float32Array> = {
 *   grads: params.map((p) => new Float32Array(p.length)),
 *   bucketMb: 1,
 *   firstBucketMb: 0.001,
 *   hook: fp16CompressHook(),
 *   shapes: [[2, 3], undefined],
 * };
 * await using ddp = await DistributedDataParallel.create(pg, params, options);
 * assert.equal(ddp.grads[0], options.grads?.[0]); // the arrays given, not views into the buckets
 * assert.equal(ddp.hook.name, "fp16");
 * ```
 */
export interface DdpOptions<T extends TypedArray = TypedArray> {
  /**
   * The gradient arrays, one per parameter, same lengths and dtypes. Without them the helper allocates the
   * buckets and {@linkcode DistributedDataParallel.grads} are views into them: no copies (torch's
   * `gradient_as_bucket_view`).
   * @default views into the buckets
   */
  grads?: readonly T[];
  /** Bucket capacity in MiB. @default 25 */
  bucketMb?: number;
  /** Capacity of the first bucket (the last parameters) in MiB. @default 1 */
  firstBucketMb?: number;
  /** The communication hook. @default allReduceHook() */
  hook?: CommHook;
  /** The rank whose parameters every rank starts from, or `false` to skip the broadcast. @default 0 */
  broadcastFrom?: number | false;
  /**
   * Treat the gradient of a parameter without `gradReady()` in a step as zero, instead of failing. Every
   * rank must agree on it.
   * @default false
   */
  findUnusedParameters?: boolean;
  /** The dtype of `Uint16Array` parameters (`"float16"` or `"bfloat16"`). @default none: required for them */
  dtype?: DType;
  /**
   * The shape of each parameter (row-major; its product the parameter's length), or undefined for one
   * without: hooks that work on matrices (`powerSgdHook`) see a `[rows, ...rest]` parameter as
   * `rows × product(rest)`, and send the others uncompressed.
   * @default none
   */
  shapes?: readonly (readonly number[] | undefined)[];
  /**
   * Keep training when a rank dies: a step whose collectives fail with a `TransportError` (a lost rank) or
   * a `RevokedError` (another rank's revoke) revokes the
   * group, shrinks it to the ranks still here (`pg.shrink()`), and averages the step's gradients again over
   * them, from a copy of each bucket taken at its launch; {@linkcode DistributedDataParallel.pg} is then the
   * new group. Needs a backend that can shrink (cpu, over TCP, shared memory or hybrid) and a hook without
   * state (`allReduceHook`, `fp16CompressHook`, `bf16CompressHook`). @default false
   */
  faultTolerant?: boolean | { readonly windowMs?: number };
}

/**
 * A bucket's layout.
 *
 * @example The last parameters go first; a bucket closes once it holds its capacity
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type BucketInfo, DistributedDataParallel } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const params = [new Float32Array(1 << 16), new Float32Array(1 << 16), new Float32Array(16)];
 * await using ddp = await DistributedDataParallel.create(pg, params, { firstBucketMb: 0.001 });
 * const buckets: readonly BucketInfo[] = ddp.buckets;
 * assert.deepEqual(buckets.map((b) => b.params), [[2, 1], [0]]); // the first bucket: 1 KiB or more
 * assert.deepEqual(buckets.map((b) => b.bytes), [64 + 4 * (1 << 16), 4 * (1 << 16)]);
 * ```
 */
export interface BucketInfo {
  /** Its number, in launch order. */
  readonly index: number;
  /** The parameters it holds, by registration index, in the order they sit in it. */
  readonly params: readonly number[];
  /** The element type. */
  readonly dtype: DType;
  /** Elements. */
  readonly count: number;
  /** Bytes. */
  readonly bytes: number;
}

/**
 * What one bucket did in a step.
 *
 * @example Each bucket's collectives and the dtype on the wire
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { type BucketReport, DistributedDataParallel, fp16CompressHook } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const hook = fp16CompressHook();
 * await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(8)], { hook });
 * ddp.gradReady(0);
 * const [bucket]: readonly BucketReport[] = (await ddp.synchronize()).buckets;
 * assert.equal(bucket.hook.wireDtype, "float16");
 * assert.equal(bucket.hook.works[0].bytes, 8 * 2);
 * assert.ok(bucket.launchedAt > 0);
 * ```
 */
export interface BucketReport extends BucketInfo {
  /** The hook's report: its collectives and the dtype on the wire. */
  readonly hook: HookReport;
  /** When the bucket was handed to the hook (`performance.timeOrigin + performance.now()`, ms). */
  readonly launchedAt: number;
}

/**
 * What a step's {@linkcode DistributedDataParallel.synchronize} reports.
 *
 * @example A step that communicated, and one under `noSync`
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { DistributedDataParallel, type StepReport } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * await using ddp = await DistributedDataParallel.create(pg, [new Float32Array(256)]);
 * ddp.gradReady(0);
 * const step: StepReport = await ddp.synchronize();
 * assert.equal(step.communicated, true);
 * assert.ok(step.lastFinishedAt >= step.firstStartedAt);
 * console.log(`waited ${step.waitMs.toFixed(2)} ms, sent ${step.bytesSent} bytes`);
 * const local = await ddp.noSync(async () => {
 *   ddp.gradReady(0);
 *   return await ddp.synchronize(); // gradient accumulation: sends nothing
 * });
 * assert.equal(local.communicated, false);
 * ```
 */
export interface StepReport {
  /** Whether the step communicated (false under `noSync`). */
  readonly communicated: boolean;
  /** Every bucket, in launch order. */
  readonly buckets: readonly BucketReport[];
  /** Payload bytes this rank sent. */
  readonly bytesSent: number;
  /** When the first collective started, by the communication thread's clock (epoch ms). */
  readonly firstStartedAt: number;
  /** When the last collective finished, by the communication thread's clock (epoch ms). */
  readonly lastFinishedAt: number;
  /** Milliseconds `synchronize()` waited for communication after it was called. */
  readonly waitMs: number;
  /** The parameters treated as unused (zero gradient) this step. */
  readonly unused: readonly number[];
  /**
   * With `faultTolerant`, on a step whose collectives failed: the group's size before and after the shrink
   * its gradients were averaged again over, and the new group's members by their ranks in the group before.
   */
  readonly shrunk?: { readonly from: number; readonly to: number; readonly members: readonly number[] };
}

interface Bucket {
  readonly info: BucketInfo;
  /** Where each of `info.params` starts in the buffer. */
  readonly offsets: readonly number[];
  /** The flat gradients. */
  readonly buffer: TypedArray;
  /** Gradients not yet ready this step. */
  pending: number;
  launchedAt: number;
  running: Promise<HookReport> | undefined;
}

const MIB = 1 << 20;

/**
 * Data-parallel training helper over a process group: gradient buckets averaged as the backward pass
 * produces them.
 *
 * @example Two steps on a world of one, the second without communication
 * ```ts
 * import { init } from "@dcomm/dcomm";
 * import { DistributedDataParallel } from "@dcomm/dcomm/ddp";
 * import assert from "node:assert/strict";
 * await using pg = await init({ rank: 0, worldSize: 1, env: {} });
 * const params = [new Float32Array(4), new Float32Array(2)];
 * await using ddp = await DistributedDataParallel.create(pg, params);
 * ddp.grads[1].fill(0.5); // the backward pass writes the last layer first...
 * ddp.gradReady(1); // ...and its bucket starts at once
 * ddp.grads[0].fill(1);
 * ddp.gradReady(0);
 * const step = await ddp.synchronize();
 * assert.equal(step.buckets.length, 1);
 * assert.deepEqual([...ddp.grads[1]], [0.5, 0.5]);
 * await ddp.noSync(() => ddp.grads.forEach((_, i) => ddp.gradReady(i)));
 * ```
 */
export class DistributedDataParallel<T extends TypedArray = TypedArray> {
  #pg: ProcessGroup;
  /** The parameters, as registered. */
  readonly params: readonly T[];
  /** The gradients, one per parameter: the arrays given, or views into the buckets. */
  readonly grads: readonly T[];
  /** The hook that averages each bucket. */
  readonly hook: CommHook;
  #buckets: Bucket[];
  #shapes: readonly (readonly number[] | undefined)[];
  /** For each parameter: its bucket and its offset there. */
  #where: { bucket: number; offset: number }[];
  #viewGrads: boolean;
  #ready: boolean[];
  #next = 0;
  #sync = true;
  #findUnused: boolean;
  #closed = false;
  /** With `faultTolerant`: each bucket's gradients as they were launched, and shrink's window. */
  #shadows: TypedArray[] | undefined;
  /** With `faultTolerant`: each bucket's average of the last step that completed here. */
  #lastResult: TypedArray[] | undefined;
  /** Steps that communicated and completed on this rank. */
  #steps = 0;
  #windowMs: number | undefined;
  #shrinks: { from: number; to: number; members: number[] }[] = [];

  private constructor(
    pg: ProcessGroup,
    params: readonly T[],
    grads: readonly T[] | undefined,
    layout: { buckets: Bucket[]; where: { bucket: number; offset: number }[] },
    options: DdpOptions<T>,
  ) {
    this.#pg = pg;
    this.params = params;
    this.#buckets = layout.buckets;
    this.#where = layout.where;
    this.#viewGrads = grads === undefined;
    this.grads = grads ?? params.map((p, i) => {
      // A view of the parameter's own class (a Float16Array parameter gets a Float16Array gradient).
      const { bucket, offset } = layout.where[i];
      const buffer = layout.buckets[bucket].buffer;
      const View = p.constructor as new (buffer: ArrayBufferLike, byteOffset: number, length: number) => T;
      return new View(buffer.buffer, buffer.byteOffset + offset * buffer.BYTES_PER_ELEMENT, p.length);
    });
    this.hook = options.hook ?? allReduceHook();
    this.#shapes = options.shapes ?? [];
    this.#ready = params.map(() => false);
    this.#findUnused = options.findUnusedParameters ?? false;
    const ft = options.faultTolerant ?? false;
    if (ft !== false) {
      if (this.hook.state() !== undefined) {
        throw new TypeError(
          `Cannot create DistributedDataParallel: faultTolerant needs a hook without state (allreduce, fp16, bf16), found the ${this.hook.name} hook, whose state a failed step leaves half updated`,
        );
      }
      this.#shadows = layout.buckets.map((b) => b.buffer.slice());
      this.#lastResult = layout.buckets.map((b) => b.buffer.slice());
      this.#windowMs = typeof ft === "object" ? ft.windowMs : undefined;
    }
  }

  /** The process group: the one given, or, after a fault-tolerant step shrank it, the survivors'. */
  get pg(): ProcessGroup {
    return this.#pg;
  }

  /**
   * With `faultTolerant`: each shrink so far: the group's size before and after, and the new group's
   * members by their ranks in the group before.
   */
  get shrinks(): readonly {
    readonly from: number;
    readonly to: number;
    readonly members: readonly number[];
  }[] {
    return this.#shrinks;
  }

  /**
   * Registers the parameters, lays out the buckets and broadcasts the parameters from `broadcastFrom`.
   * Every rank of `pg` calls it with parameters of the same lengths and dtypes, in the same order.
   *
   * @param pg The process group.
   * @param params The parameters, in registration order (the forward pass's).
   * @param options Gradients, bucket sizes, hook, broadcast, unused parameters.
   * @returns The helper; close it (or `await using` it) to release its buckets.
   * @throws {TypeError} On a parameter that is not a tensor of a dcomm dtype, or gradients that do not match.
   * @throws {RangeError} On bad bucket sizes or an empty parameter list.
   */
  static async create<T extends TypedArray>(
    pg: ProcessGroup,
    params: readonly T[],
    options: DdpOptions<T> = {},
  ): Promise<DistributedDataParallel<T>> {
    if (!Array.isArray(params) || params.length === 0) {
      throw new RangeError(`Cannot create DistributedDataParallel: expected a non-empty array of parameters`);
    }
    const dtypes = params.map((p, i) => {
      try {
        return dtypeOf(p, p instanceof Uint16Array ? options.dtype : undefined);
      } catch (e) {
        throw new TypeError(`Cannot create DistributedDataParallel: parameter ${i}: ${(e as Error).message}`);
      }
    });
    const grads = options.grads;
    if (grads !== undefined) {
      if (grads.length !== params.length) {
        throw new TypeError(
          `Cannot create DistributedDataParallel: expected ${params.length} gradients (one per parameter), ` +
            `found ${grads.length}`,
        );
      }
      grads.forEach((g, i) => {
        const ok = g?.constructor === params[i].constructor && g.length === params[i].length;
        if (!ok) {
          throw new TypeError(
            `Cannot create DistributedDataParallel: gradient ${i} must be a ${
              params[i].constructor.name
            } of ` +
              `${params[i].length} elements like its parameter, found ${describe(g)}`,
          );
        }
      });
    }
    const shapes = options.shapes;
    if (shapes !== undefined) {
      if (!Array.isArray(shapes) || shapes.length !== params.length) {
        throw new TypeError(
          `Cannot create DistributedDataParallel: expected ${params.length} shapes (one per parameter, or ` +
            `undefined), found ${describe(shapes)}`,
        );
      }
      shapes.forEach((shape, i) => {
        if (shape === undefined) return;
        const ok = Array.isArray(shape) && shape.every((d) => Number.isInteger(d) && d >= 1) &&
          shape.reduce((a, b) => a * b, 1) === params[i].length;
        if (!ok) {
          throw new TypeError(
            `Cannot create DistributedDataParallel: shape ${i} must be positive integers whose product is ` +
              `parameter ${i}'s ${params[i].length} elements, found ${JSON.stringify(shape)}`,
          );
        }
      });
    }
    const cap = mib("bucketMb", options.bucketMb ?? 25);
    const firstCap = mib("firstBucketMb", options.firstBucketMb ?? 1);
    const layout = assignBuckets(params, dtypes, firstCap, cap, (count, dtype) => pg.alloc(count, { dtype }));
    const ddp = new DistributedDataParallel<T>(pg, params, grads, layout, options);
    const root = options.broadcastFrom ?? 0;
    if (root !== false) await Promise.all(params.map((p, i) => pg.broadcast(p, { root, dtype: dtypes[i] })));
    return ddp;
  }

  /** The buckets' layout, in launch order. */
  get buckets(): readonly BucketInfo[] {
    return this.#buckets.map((b) => b.info);
  }

  /** Whether steps communicate (false inside {@linkcode DistributedDataParallel.noSync}). */
  get requireSync(): boolean {
    return this.#sync;
  }

  /**
   * Says that parameter `i`'s gradient is final for this step; a bucket whose gradients are all final goes
   * to the hook at once (in bucket order).
   *
   * @param i The parameter's registration index.
   * @throws {RangeError} If `i` is not a parameter index, or was already marked this step.
   */
  gradReady(i: number): void {
    this.#open("mark a gradient ready");
    if (!Number.isInteger(i) || i < 0 || i >= this.params.length) {
      throw new RangeError(
        `Cannot mark gradient ${i} ready: expected an index in 0..${this.params.length - 1}`,
      );
    }
    if (this.#ready[i]) {
      throw new RangeError(`Cannot mark gradient ${i} ready: it already is, this step`);
    }
    this.#ready[i] = true;
    if (!this.#sync) return;
    const { bucket, offset } = this.#where[i];
    const b = this.#buckets[bucket];
    if (!this.#viewGrads) copyInto(b.buffer, offset, this.grads[i]);
    b.pending--;
    this.#launchReady();
  }

  /**
   * Waits for every bucket of the step, leaves the averages in the gradients, and starts the next step.
   *
   * @returns What the step did.
   * @throws {DistError} If a parameter had no `gradReady()` this step (code `DDP_UNUSED`, naming them),
   *   unless `findUnusedParameters`; or what a bucket's collective failed with.
   */
  async synchronize(): Promise<StepReport> {
    this.#open("synchronize");
    const t0 = performance.now();
    if (!this.#sync) {
      this.#ready.fill(false);
      return {
        communicated: false,
        buckets: [],
        bytesSent: 0,
        firstStartedAt: 0,
        lastFinishedAt: 0,
        waitMs: 0,
        unused: [],
      };
    }
    const unused = this.#ready.flatMap((r, i) => (r ? [] : [i]));
    if (unused.length > 0) {
      if (!this.#findUnused) {
        const error = new DistError(
          `Cannot synchronize: parameter${unused.length > 1 ? "s" : ""} ${unused.join(", ")} had no ` +
            `gradReady() this step; mark every gradient, or create the helper with findUnusedParameters: true ` +
            `(on every rank) to treat them as zero`,
          { code: "DDP_UNUSED" },
        );
        // The buckets already launched must still finish before the helper can be used again.
        await this.#settle();
        throw error;
      }
      for (const i of unused) {
        const { bucket, offset } = this.#where[i];
        const b = this.#buckets[bucket];
        const zero = b.buffer instanceof BigInt64Array || b.buffer instanceof BigUint64Array ? 0n : 0;
        b.buffer.fill(zero as never, offset, offset + this.params[i].length);
        this.#ready[i] = true;
        b.pending--;
      }
      this.#launchReady();
    }
    let reports: BucketReport[] = [];
    let shrunk: { from: number; to: number; members: number[] } | undefined;
    try {
      for (const b of this.#buckets) {
        const hook = await (b.running as Promise<HookReport>);
        reports.push({ ...b.info, hook, launchedAt: b.launchedAt });
      }
    } catch (e) {
      // A lost rank or a revoke (not a mismatch, which is the program's, nor a timeout, which may be a slow peer).
      if (this.#shadows === undefined || !(e instanceof TransportError || e instanceof RevokedError)) {
        this.#reset();
        throw e;
      }
      reports = await this.#recover(e);
      shrunk = this.#shrinks.at(-1);
    } finally {
      this.#reset();
    }
    if (!this.#viewGrads) {
      this.params.forEach((p, i) => {
        const { bucket, offset } = this.#where[i];
        copyInto(
          this.grads[i],
          0,
          this.#buckets[bucket].buffer.subarray(offset, offset + p.length) as TypedArray,
        );
      });
    }
    this.#steps++;
    if (this.#lastResult) {
      this.#buckets.forEach((b, i) => (this.#lastResult as TypedArray[])[i].set(b.buffer as never));
    }
    const works = reports.flatMap((r) => r.hook.works);
    return {
      communicated: true,
      buckets: reports,
      bytesSent: works.reduce((n, w) => n + w.bytesSent, 0),
      firstStartedAt: Math.min(...works.map((w) => w.startedAt)),
      lastFinishedAt: Math.max(...works.map((w) => w.finishedAt)),
      waitMs: performance.now() - t0,
      unused,
      ...(shrunk ? { shrunk } : {}),
    };
  }

  /**
   * Runs `fn` (a step's forward and backward passes) without communication: gradients accumulate where
   * the caller adds them, and the next step outside `noSync` averages the sum. Ends with a synchronize of
   * its own (which sends nothing).
   *
   * @param fn The step.
   * @returns What `fn` returned.
   */
  async noSync<T>(fn: () => T | Promise<T>): Promise<T> {
    this.#open("run a step without sync");
    if (this.#ready.some((r) => r)) {
      throw new DistError(
        "Cannot start noSync: gradients of this step are already marked ready; synchronize first",
      );
    }
    this.#sync = false;
    try {
      const value = await fn();
      await this.synchronize();
      return value;
    } finally {
      this.#sync = true;
      this.#ready.fill(false);
    }
  }

  /** Waits for the buckets in flight and releases them. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#settle();
    for (const b of this.#buckets) {
      try {
        this.pg.release(b.buffer);
      } catch {
        // A closed group keeps its memory until the process ends; nothing more to give back.
      }
    }
  }

  /** Closes the helper, as {@linkcode DistributedDataParallel.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #open(what: string): void {
    if (this.#closed) throw new DistError(`Cannot ${what}: this DistributedDataParallel is closed`);
  }

  /**
   * A step whose collectives failed, again on the ranks still here: every bucket settles, the group is
   * revoked (so every rank's calls fail, not only those that waited for the lost one) and shrunk, and each
   * bucket is averaged from its launch copy over the new group, in bucket order.
   */
  async #recover(failure: DistError): Promise<BucketReport[]> {
    await Promise.allSettled(this.#buckets.map((b) => b.running));
    const old = this.#pg;
    try {
      old.revoke(`a step of DistributedDataParallel failed: ${failure.message}`);
    } catch {
      // revoked already, or closed: the shrink says what is wrong
    }
    const next = await old.shrink({ windowMs: this.#windowMs });
    this.#pg = next;
    const reports: BucketReport[] = [];
    // The quorum's step: a rank whose step failed may find that others completed it (their collectives had
    // what they needed before the lost rank went); those are one step ahead. The first of them then sends
    // that step's averages to all, which the ranks behind take as their step's result; the ranks ahead go
    // on to average their own step again, which the others join at their next synchronize().
    const quorum = await next.allGatherObject({ step: this.#steps, rank: old.rank });
    const steps = quorum.map((q) => q.step);
    this.#shrinks.push({ from: old.size, to: next.size, members: quorum.map((q) => q.rank) });
    const ahead = Math.max(...steps), behind = Math.min(...steps);
    if (ahead - behind > 1) {
      throw new DistError(`Cannot recover the step: the ranks left are at steps ${steps.join(", ")}`, {
        cause: failure,
      });
    }
    if (ahead !== behind) {
      const root = steps.indexOf(ahead), last = this.#lastResult as TypedArray[];
      for (const [i, b] of this.#buckets.entries()) {
        const into = this.#steps === ahead ? last[i] : b.buffer;
        const work = await next.broadcast(into, { root, dtype: b.info.dtype }).wait();
        reports.push({
          ...b.info,
          hook: { works: work ? [work] : [], wireDtype: b.info.dtype },
          launchedAt: 0,
        });
      }
      if (this.#steps === behind) return reports;
      reports.length = 0;
    }
    for (const [i, b] of this.#buckets.entries()) {
      b.buffer.set((this.#shadows as TypedArray[])[i] as never);
      b.launchedAt = performance.timeOrigin + performance.now();
      const hook = await this.hook.run(next, this.#hookBucket(b));
      reports.push({ ...b.info, hook, launchedAt: b.launchedAt });
    }
    return reports;
  }

  #hookBucket(b: Bucket): HookBucket {
    return {
      index: b.info.index,
      buffer: b.buffer,
      dtype: b.info.dtype,
      params: b.info.params,
      offsets: b.offsets,
      shapes: b.info.params.map((i) => this.#shapes[i]),
    };
  }

  /** Hands every bucket that is ready, in order, to the hook. */
  #launchReady(): void {
    while (this.#next < this.#buckets.length && this.#buckets[this.#next].pending === 0) {
      const b = this.#buckets[this.#next++];
      this.#shadows?.[b.info.index].set(b.buffer as never);
      b.launchedAt = performance.timeOrigin + performance.now();
      b.running = this.hook.run(this.#pg, this.#hookBucket(b));
      // A failure is seen by synchronize(); until then it must not count as unhandled.
      b.running.catch(() => {});
    }
  }

  /** Waits for every bucket in flight, ignoring failures, and starts the next step. */
  async #settle(): Promise<void> {
    await Promise.allSettled(this.#buckets.map((b) => b.running));
    this.#reset();
  }

  #reset(): void {
    this.#ready.fill(false);
    this.#next = 0;
    for (const b of this.#buckets) {
      b.pending = b.info.params.length;
      b.running = undefined;
    }
  }
}

/** Copies `src` into `dst` from element `at` (same element type: their bytes, whatever it is). */
function copyInto(dst: TypedArray, at: number, src: TypedArray): void {
  new Uint8Array(dst.buffer, dst.byteOffset + at * dst.BYTES_PER_ELEMENT, src.byteLength).set(
    new Uint8Array(src.buffer, src.byteOffset, src.byteLength),
  );
}

function mib(name: string, value: number): number {
  if (typeof value !== "number" || !(value > 0) || !Number.isFinite(value)) {
    throw new RangeError(`Invalid ${name}: expected a number of MiB > 0, found ${value}`);
  }
  return Math.max(1, Math.round(value * MIB));
}

function describe(v: unknown): string {
  if (v === null || typeof v !== "object") return String(v);
  const t = v as { constructor?: { name?: string }; length?: number };
  return `a ${t.constructor?.name ?? "object"} of ${t.length} elements`;
}

/**
 * Torch's bucket assignment: parameters in reverse registration order; a bucket holds one dtype and
 * closes once it reaches its capacity (the first bucket's is `firstCap`), so a parameter larger than the
 * capacity has a bucket of its own.
 */
function assignBuckets(
  params: readonly TypedArray[],
  dtypes: readonly DType[],
  firstCap: number,
  cap: number,
  alloc: (count: number, dtype: DType) => TypedArray,
): { buckets: Bucket[]; where: { bucket: number; offset: number }[] } {
  const groups: { dtype: DType; params: number[]; count: number }[] = [];
  const open = new Map<DType, { dtype: DType; params: number[]; count: number }>();
  for (let i = params.length - 1; i >= 0; i--) {
    const dtype = dtypes[i];
    let g = open.get(dtype);
    if (g === undefined) {
      g = { dtype, params: [], count: 0 };
      groups.push(g);
      open.set(dtype, g);
    }
    g.params.push(i);
    g.count += params[i].length;
    const limit = g === groups[0] ? firstCap : cap;
    if (g.count * dtypeSize(dtype) >= limit) open.delete(dtype);
  }
  const where: { bucket: number; offset: number }[] = new Array(params.length);
  const buckets = groups.map((g, index): Bucket => {
    let at = 0;
    for (const i of g.params) {
      where[i] = { bucket: index, offset: at };
      at += params[i].length;
    }
    const offsets = g.params.map((i) => where[i].offset);
    const info: BucketInfo = {
      index,
      params: g.params,
      dtype: g.dtype,
      count: g.count,
      bytes: g.count * dtypeSize(g.dtype),
    };
    return {
      info,
      offsets,
      buffer: alloc(g.count, g.dtype),
      pending: g.params.length,
      launchedAt: 0,
      running: undefined,
    };
  });
  return { buckets, where };
}
