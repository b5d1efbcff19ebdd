/**
 * A call's tensors as the communication thread reaches them: a region of a SharedArrayBuffer (staged), a
 * tensor of the main thread by its address, or a tensor in this rank's pool of the host segment.
 *
 * @module
 */
import { DistError } from "../../core/errors.ts";
import type { HostSegment } from "../../transport/segment.ts";
import type { PointerRegion, PoolRegion, Region } from "./_protocol.ts";

/** The view of an empty range (shared: nothing can be written through it). */
const EMPTY = new Uint8Array(0);

/**
 * A tensor's bytes as this thread reaches them.
 *
 * @param region The tensor, as the call names it.
 * @param segment The host segment, for a pool tensor.
 * @returns Its bytes, or undefined for none.
 * @throws {DistError} If a pool tensor reaches a rank without a host segment.
 */
export function regionView(
  region: Region | PointerRegion | PoolRegion | undefined,
  segment: HostSegment | undefined,
): Uint8Array | undefined {
  if (region === undefined) return undefined;
  if ("pool" in region) {
    if (segment === undefined) throw new DistError("A pool tensor reached a rank without a host segment");
    return segment.pool(segment.rank).subarray(region.pool, region.pool + region.byteLength);
  }
  if ("address" in region) return pointerView(region.address, region.byteLength);
  return new Uint8Array(region.buffer, region.byteOffset, region.byteLength);
}

/**
 * Views of the main thread's tensors, by address and length, most recently used last. A training loop
 * passes the same tensors call after call: a view made once serves them all, where a new one per call
 * (an external ArrayBuffer) makes V8 count its bytes as new external memory each time and collect
 * garbage every few calls (a mark-compact of several milliseconds per 8 MiB call, measured).
 */
const views = new Map<string, Uint8Array>();
const VIEWS = 64;

/** The bytes at an address of this process (a tensor of the main thread, kept alive by its call). */
function pointerView(address: number, byteLength: number): Uint8Array {
  if (byteLength === 0) return EMPTY;
  const key = `${address}:${byteLength}`;
  let v = views.get(key);
  if (v === undefined) {
    const pointer = Deno.UnsafePointer.create(BigInt(address)) as Deno.PointerObject;
    v = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(pointer, byteLength));
    if (views.size >= VIEWS) views.delete(views.keys().next().value as string);
  } else views.delete(key);
  views.set(key, v);
  return v;
}
