/**
 * {@linkcode ProbeSlot}: the one probe a pair may have pending ({@linkcode Pair.probe}), written once for
 * every transport: a probe waits for the header of the next message no posted receive takes, and a
 * second probe while one waits gets the same promise, so a pair never holds more than one.
 *
 * @module
 */
import type { MessageHeader, Pair } from "./transport.ts";

/**
 * The pending probe of one pair.
 *
 * @example A probe resolved by the next header that arrives
 * ```ts
 * import { ProbeSlot } from "./_probe.ts";
 * import assert from "node:assert/strict";
 * const slot = new ProbeSlot();
 * const probe = slot.wait();
 * assert.equal(slot.wait(), probe); // one at a time
 * slot.offer(new Uint8Array(32), 8);
 * assert.equal((await probe).bytes, 8);
 * assert.equal(slot.pending, false);
 * ```
 */
export class ProbeSlot {
  #waiting: PromiseWithResolvers<MessageHeader> | undefined;

  /** Whether a probe waits. */
  get pending(): boolean {
    return this.#waiting !== undefined;
  }

  /**
   * The pending probe's promise, or a new one.
   *
   * @returns Resolves with the next header offered.
   */
  wait(): Promise<MessageHeader> {
    this.#waiting ??= Promise.withResolvers<MessageHeader>();
    return this.#waiting.promise;
  }

  /**
   * Resolves the pending probe, if one waits, with a copy of `desc`.
   *
   * @param desc The message's descriptor.
   * @param bytes Its payload's length.
   * @param arrivedAt When its header arrived. @default now
   */
  offer(desc: Uint8Array, bytes: number, arrivedAt: number = performance.now()): void {
    const waiting = this.#waiting;
    if (waiting === undefined) return;
    this.#waiting = undefined;
    waiting.resolve({ desc: desc.slice(), bytes, arrivedAt });
  }

  /** Withdraws the pending probe, if one waits: it rejects with an `AbortError`. */
  cancel(): void {
    this.reject(new DOMException("The probe was withdrawn", "AbortError"));
  }

  /**
   * Rejects the pending probe, if one waits.
   *
   * @param error Why.
   */
  reject(error: Error): void {
    const waiting = this.#waiting;
    if (waiting === undefined) return;
    this.#waiting = undefined;
    waiting.reject(error);
  }
}

/**
 * A header already here (the first message that arrived before its receive), else the pending probe.
 *
 * @param slot The pair's slot.
 * @param first The first early message, if any.
 * @returns The probe's promise.
 */
export function probeOf(
  slot: ProbeSlot,
  first: { readonly desc: Uint8Array; readonly bytes: number; readonly arrivedAt?: number } | undefined,
): ReturnType<Pair["probe"]> {
  return first === undefined
    ? slot.wait()
    : Promise.resolve({ desc: first.desc.slice(), bytes: first.bytes, arrivedAt: first.arrivedAt });
}
