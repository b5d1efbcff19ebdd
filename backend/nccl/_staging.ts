/**
 * Staging of host tensors for the `nccl` backend: a TypedArray is copied into pinned memory, from there
 * to the device on the group's stream, and back the same way, so that both copies are queued
 * asynchronously with the collective and the event loop never waits. Slots are pooled by power-of-two
 * size; a slot whose collective failed is never reused (the device may still touch it) until close.
 *
 * @module
 */
import { DeviceBuffer } from "../../gpu/device_buffer.ts";
import { PinnedBuffer } from "../../gpu/pinned_buffer.ts";

/** A pinned buffer and a device buffer of the same size. */
export interface StagingSlot {
  /** Pinned host memory. */
  readonly pinned: PinnedBuffer;
  /** Device memory (bytes). */
  readonly device: DeviceBuffer;
  /** The size class, in bytes. */
  readonly bytes: number;
}

function sizeClass(bytes: number): number {
  return Math.max(4096, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
}

/** Pooled staging slots of one device. */
export class StagingPool implements Disposable {
  #device: number;
  #free = new Map<number, StagingSlot[]>();
  #quarantined: StagingSlot[] = [];
  #all = new Set<StagingSlot>();

  /**
   * @param device The device the slots' device memory is on.
   */
  constructor(device: number) {
    this.#device = device;
  }

  /**
   * A slot of at least `bytes`.
   *
   * @param bytes The size needed.
   * @returns The slot; give it back with {@linkcode StagingPool.release}.
   * @throws {CudaError} If allocation fails.
   */
  acquire(bytes: number): StagingSlot {
    const size = sizeClass(bytes);
    const reuse = this.#free.get(size)?.pop();
    if (reuse) return reuse;
    const pinned = PinnedBuffer.alloc(size);
    let device: DeviceBuffer;
    try {
      device = DeviceBuffer.alloc(size, { dtype: "uint8", device: this.#device });
    } catch (e) {
      pinned[Symbol.dispose]();
      throw e;
    }
    const slot = { pinned, device, bytes: size };
    this.#all.add(slot);
    return slot;
  }

  /**
   * Returns a slot whose work has completed.
   *
   * @param slot The slot.
   */
  release(slot: StagingSlot): void {
    const list = this.#free.get(slot.bytes) ?? [];
    list.push(slot);
    this.#free.set(slot.bytes, list);
  }

  /**
   * Retires a slot whose work failed or was aborted; it is freed only at close.
   *
   * @param slot The slot.
   */
  quarantine(slot: StagingSlot): void {
    this.#quarantined.push(slot);
  }

  /** Frees every slot (after the streams that used them are idle). */
  [Symbol.dispose](): void {
    for (const slot of this.#all) {
      slot.device[Symbol.dispose]();
      slot.pinned[Symbol.dispose]();
    }
    this.#all.clear();
    this.#free.clear();
    this.#quarantined = [];
  }
}
