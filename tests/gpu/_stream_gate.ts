/**
 * A gate that holds a CUDA stream on the device: `cuStreamWaitValue32` (the CUDA driver's stream memory
 * operation) makes the stream wait until a word of pinned host memory reaches 1, so whatever is queued
 * after it (an NCCL collective) does not run until the gate opens. The gate opens from a Worker after a
 * fixed delay, on its own thread: an `ncclCommAbort` that waits for the stream blocks the main thread,
 * and the abort can only finish once the held collective runs (NCCL's kernels then see the abort flag).
 * This is how the watchdog tests make a collective that does not complete on a one-rank communicator,
 * where NCCL refuses a receive without a send at once.
 *
 * @module
 */
import { PinnedBuffer } from "../../gpu/pinned_buffer.ts";

const CU_STREAM_WAIT_VALUE_GEQ = 0;

type Driver = Deno.DynamicLibrary<{
  cuInit: { parameters: ["u32"]; result: "i32" };
  cuStreamWaitValue32_v2: { parameters: ["pointer", "u64", "u32", "u32"]; result: "i32"; optional: true };
  cuStreamWaitValue32: { parameters: ["pointer", "u64", "u32", "u32"]; result: "i32"; optional: true };
}>;

let driver: Driver | undefined;

function cuda(): Driver {
  driver ??= Deno.dlopen("libcuda.so.1", {
    cuInit: { parameters: ["u32"], result: "i32" },
    // CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
    cuStreamWaitValue32_v2: { parameters: ["pointer", "u64", "u32", "u32"], result: "i32", optional: true },
    cuStreamWaitValue32: { parameters: ["pointer", "u64", "u32", "u32"], result: "i32", optional: true },
  }) as Driver;
  const rc = driver.symbols.cuInit(0);
  if (rc !== 0) throw new Error(`cuInit failed: CUresult ${rc}`);
  return driver;
}

/** Holds streams until opened; open it (or dispose it) before the test ends. */
export class StreamGate {
  readonly #word: PinnedBuffer;
  readonly #flag: Uint32Array;
  #worker: Worker | undefined;
  #opened: Promise<void> | undefined;

  constructor() {
    this.#word = PinnedBuffer.alloc(4);
    this.#flag = this.#word.array("uint32") as Uint32Array;
    this.#flag[0] = 0;
  }

  /** Queues the wait on `stream`: work queued on it afterwards runs once the gate opens. */
  hold(stream: Deno.PointerValue): void {
    const { symbols } = cuda();
    const wait = symbols.cuStreamWaitValue32_v2 ?? symbols.cuStreamWaitValue32;
    if (wait === null) throw new Error("libcuda.so.1 exports no cuStreamWaitValue32");
    // Pinned memory is mapped at the same address on the device (unified addressing, every 64-bit Linux).
    const address = BigInt(Deno.UnsafePointer.value(this.#word.pointer));
    const rc = wait(stream, address, 1, CU_STREAM_WAIT_VALUE_GEQ);
    if (rc !== 0) throw new Error(`cuStreamWaitValue32 failed: CUresult ${rc}`);
  }

  /** Opens the gate from another thread after `ms` milliseconds, whatever the main thread is doing. */
  openAfter(ms: number): Promise<void> {
    if (this.#opened) return this.#opened;
    const worker = new Worker(new URL("./_gate_worker.ts", import.meta.url), { type: "module" });
    this.#worker = worker;
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    worker.onmessage = () => resolve();
    worker.onerror = (e) => {
      e.preventDefault();
      reject(new Error(`the gate's worker failed: ${e.message}`));
    };
    worker.postMessage({ address: String(Deno.UnsafePointer.value(this.#word.pointer)), afterMs: ms });
    this.#opened = promise.finally(() => worker.terminate());
    return this.#opened;
  }

  /** Opens the gate (at once unless a delayed opening is under way), then frees its memory. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#opened) await this.#opened.catch(() => {});
    this.#flag[0] = 1;
    this.#worker?.terminate();
    // cudaFreeHost waits for the device, so the streams held have passed the gate by then.
    this.#word[Symbol.dispose]();
  }
}
