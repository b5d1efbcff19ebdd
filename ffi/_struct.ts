/**
 * Views of C structs through their layout tables (`_layout.ts`), for every binding: every read and write
 * names a field, and the field's size picks the access, so a 2-byte field is never written as 4. Structs
 * the binding owns live in ArrayBuffers; structs C owns are read through `UnsafePointerView.getArrayBuffer`.
 * Also the pointer arithmetic of structs reached from other structs.
 *
 * @module
 */
import type { Field, StructLayout } from "./_layout.ts";

/** A struct in memory, read and written by field name (little-endian, except where a method says). */
export class Struct<K extends string> {
  /** The layout. */
  readonly layout: StructLayout<K>;
  /** The struct's bytes (exactly `layout.size`). */
  readonly bytes: Uint8Array<ArrayBuffer>;
  readonly #view: DataView<ArrayBuffer>;

  /**
   * @param layout The struct's layout.
   * @param buffer Memory holding the struct; a zeroed one of `layout.size` bytes when omitted.
   * @param byteOffset Where the struct starts in `buffer`.
   */
  constructor(layout: StructLayout<K>, buffer?: ArrayBuffer, byteOffset = 0) {
    this.layout = layout;
    const memory = buffer ?? new ArrayBuffer(layout.size);
    this.bytes = new Uint8Array(memory, byteOffset, layout.size);
    this.#view = new DataView(memory, byteOffset, layout.size);
  }

  /**
   * A view of a struct that C owns.
   *
   * @param layout The struct's layout.
   * @param pointer Its address (at least `layout.size` readable bytes).
   * @returns The view; valid only while C keeps the memory.
   */
  static at<K extends string>(layout: StructLayout<K>, pointer: Deno.PointerObject): Struct<K> {
    return new Struct(layout, Deno.UnsafePointerView.getArrayBuffer(pointer, layout.size));
  }

  /** The address of the struct's first byte (for structs in ArrayBuffers, valid while they live). */
  get pointer(): Deno.PointerObject {
    return Deno.UnsafePointer.of(this.bytes) as Deno.PointerObject;
  }

  #field(name: K, sizes: readonly number[]): Field {
    const field = this.layout.fields[name];
    if (field === undefined || !sizes.includes(field.size)) {
      throw new TypeError(
        `Cannot access ${this.layout.type}.${name} (${field?.size ?? "no such"} bytes) as ${
          sizes.join(" or ")
        }`,
      );
    }
    return field;
  }

  /**
   * Reads an unsigned integer field of 1, 2 or 4 bytes.
   *
   * @param name The field.
   * @returns Its value.
   */
  get(name: K): number {
    const { offset, size } = this.#field(name, [1, 2, 4]);
    if (size === 1) return this.#view.getUint8(offset);
    if (size === 2) return this.#view.getUint16(offset, true);
    return this.#view.getUint32(offset, true);
  }

  /**
   * Reads a 4-byte field as a signed integer (C `int` and enums that may be negative).
   *
   * @param name The field.
   * @returns Its value.
   */
  getInt(name: K): number {
    return this.#view.getInt32(this.#field(name, [4]).offset, true);
  }

  /**
   * Reads a 4-byte field stored in network byte order (`__be32`).
   *
   * @param name The field.
   * @returns Its value in host order.
   */
  getBe32(name: K): number {
    return this.#view.getUint32(this.#field(name, [4]).offset, false);
  }

  /**
   * Reads an 8-byte unsigned field.
   *
   * @param name The field.
   * @returns Its value.
   */
  getBig(name: K): bigint {
    return this.#view.getBigUint64(this.#field(name, [8]).offset, true);
  }

  /**
   * Reads a pointer field.
   *
   * @param name The field.
   * @returns The pointer, or `null`.
   */
  getPointer(name: K): Deno.PointerValue {
    return Deno.UnsafePointer.create(this.getBig(name));
  }

  /**
   * The bytes of a field (a view, not a copy).
   *
   * @param name The field.
   * @returns A view of the field's bytes.
   */
  fieldBytes(name: K): Uint8Array<ArrayBuffer> {
    const { offset, size } = this.layout.fields[name];
    return this.bytes.subarray(offset, offset + size);
  }

  /**
   * Reads a NUL-terminated string from a char array field.
   *
   * @param name The field.
   * @returns The text up to the first NUL.
   */
  getString(name: K): string {
    const bytes = this.fieldBytes(name);
    const end = bytes.indexOf(0);
    return new TextDecoder().decode(end < 0 ? bytes : bytes.subarray(0, end));
  }

  /**
   * Writes an integer field of 1, 2 or 4 bytes (negative values are written in two's complement).
   *
   * @param name The field.
   * @param value The value; it must fit the field.
   * @returns This struct.
   */
  set(name: K, value: number): this {
    const { offset, size } = this.#field(name, [1, 2, 4]);
    const limit = 2 ** (size * 8);
    if (!Number.isInteger(value) || value >= limit || value < -(limit / 2)) {
      throw new RangeError(`Expected ${this.layout.type}.${name} to fit ${size} bytes, found ${value}`);
    }
    const unsigned = value < 0 ? value + limit : value;
    if (size === 1) this.#view.setUint8(offset, unsigned);
    else if (size === 2) this.#view.setUint16(offset, unsigned, true);
    else this.#view.setUint32(offset, unsigned, true);
    return this;
  }

  /**
   * Writes a 4-byte field in network byte order (`__be32`).
   *
   * @param name The field.
   * @param value The value in host order (0 to 2^32 - 1).
   * @returns This struct.
   */
  setBe32(name: K, value: number): this {
    this.#view.setUint32(this.#field(name, [4]).offset, value >>> 0, false);
    return this;
  }

  /**
   * Writes an 8-byte unsigned field.
   *
   * @param name The field.
   * @param value The value.
   * @returns This struct.
   */
  setBig(name: K, value: bigint): this {
    this.#view.setBigUint64(this.#field(name, [8]).offset, BigInt.asUintN(64, value), true);
    return this;
  }

  /**
   * Writes a pointer field.
   *
   * @param name The field.
   * @param pointer The pointer (`null` writes NULL).
   * @returns This struct.
   */
  setPointer(name: K, pointer: Deno.PointerValue): this {
    return this.setBig(name, pointer === null ? 0n : Deno.UnsafePointer.value(pointer));
  }
}

/**
 * The pointer `offset` bytes away from `pointer` (negative allowed).
 *
 * @param pointer A non-null pointer.
 * @param offset Bytes, possibly negative.
 * @returns The moved pointer.
 */
export function movePointer(pointer: Deno.PointerObject, offset: number): Deno.PointerObject {
  return Deno.UnsafePointer.create(Deno.UnsafePointer.value(pointer) + BigInt(offset)) as Deno.PointerObject;
}

/**
 * Reads the pointer stored at `pointer + offset`.
 *
 * @param pointer A non-null pointer.
 * @param offset Bytes, possibly negative.
 * @returns The stored pointer, or `null`.
 */
export function readPointer(pointer: Deno.PointerObject, offset: number): Deno.PointerValue {
  return new Deno.UnsafePointerView(movePointer(pointer, offset)).getPointer();
}

/**
 * Reads the unsigned 64-bit value stored at `pointer + offset`.
 *
 * @param pointer A non-null pointer.
 * @param offset Bytes, possibly negative.
 * @returns The value.
 */
export function readU64(pointer: Deno.PointerObject, offset: number): bigint {
  return new Deno.UnsafePointerView(movePointer(pointer, offset)).getBigUint64();
}
