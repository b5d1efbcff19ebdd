/**
 * Layout tables of the C structs that bindings build or read by hand, one shape for every library: the
 * struct's C type and `sizeof`, and each field the binding uses keyed by its C member designator (so
 * `"wr.rdma.rkey"` is `offsetof(struct ibv_send_wr, wr.rdma.rkey)`), with its byte offset, size and,
 * where a binding walks the fields rather than naming each access, a kind. The tables are data: the
 * layout tests compile a C program against the real header that prints `offsetof`/`sizeof` of every
 * field of every table, and compare. `_struct.ts` reads and writes structs through them.
 *
 * @module
 */

/** How a binding that walks a struct's fields reads or writes one (`usize` is `size_t`). */
export type FieldKind = "i32" | "u32" | "usize" | "pointer";

/** Where one field lies in its struct. */
export interface Field {
  /** Byte offset from the start of the struct. */
  readonly offset: number;
  /** Size in bytes (an array's whole size, e.g. 16 for a GID). */
  readonly size: number;
  /** How it is read or written, where a binding walks the fields; absent where each access is named. */
  readonly kind?: FieldKind;
}

/** The layout of one C struct or union on 64-bit Linux: its size and the fields a binding uses. */
export interface StructLayout<K extends string = string> {
  /** The C type as a declaration spells it: `struct ibv_sge`, `union ibv_gid`, `ncclConfig_t`. */
  readonly type: string;
  /** `sizeof` the type. */
  readonly size: number;
  /** Each field used, keyed by its C member designator, in declaration order. */
  readonly fields: Readonly<Record<K, Field>>;
}

/** One field as a table writes it: offset and size in bytes, and the kind where the binding needs one. */
export type FieldSpec = readonly [offset: number, size: number, kind?: FieldKind];

/**
 * Builds a frozen {@linkcode StructLayout} from a compact table.
 *
 * @param type The C type, as `struct ibv_sge`.
 * @param size `sizeof` the type.
 * @param fields Each field, keyed by its C member designator: `[offset, size]` or `[offset, size, kind]`.
 * @returns The layout; its fields keep the table's order.
 * @throws {RangeError} If a size or offset is not a non-negative integer, or a field ends past `size`.
 *
 * @example A table and a look-up
 * ```ts
 * import { structLayout } from "./_layout.ts";
 * import assert from "node:assert/strict";
 * const SGE = structLayout("struct ibv_sge", 16, { addr: [0, 8], length: [8, 4], lkey: [12, 4] });
 * assert.equal(SGE.fields.lkey.offset, 12);
 * assert.throws(() => structLayout("struct s", 4, { x: [2, 4] }), RangeError);
 * ```
 */
export function structLayout<K extends string>(
  type: string,
  size: number,
  fields: Readonly<Record<K, FieldSpec>>,
): StructLayout<K> {
  if (!Number.isSafeInteger(size) || size <= 0) {
    throw new RangeError(`Invalid sizeof ${type}: expected a positive integer, found ${size}`);
  }
  const out = {} as Record<K, Field>;
  for (const name of Object.keys(fields) as K[]) {
    const [offset, bytes, kind] = fields[name];
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(bytes) || offset < 0 || bytes <= 0) {
      throw new RangeError(
        `Invalid field ${type}.${name}: expected a non-negative offset and a positive size, ` +
          `found offset ${offset}, size ${bytes}`,
      );
    }
    if (offset + bytes > size) {
      throw new RangeError(
        `Invalid field ${type}.${name}: expected it to end within sizeof ${size}, found it ending at ` +
          `${offset + bytes}`,
      );
    }
    out[name] = Object.freeze(kind === undefined ? { offset, size: bytes } : { offset, size: bytes, kind });
  }
  return Object.freeze({ type, size, fields: Object.freeze(out) });
}

/**
 * The field names of a layout, in the table's order, typed as its keys.
 *
 * @param layout The struct.
 * @returns Its C member designators.
 *
 * @example Field names in declaration order
 * ```ts
 * import { fieldNames, structLayout } from "./_layout.ts";
 * import assert from "node:assert/strict";
 * const GID = structLayout("union ibv_gid", 16, { raw: [0, 16], "global.interface_id": [8, 8] });
 * assert.deepEqual(fieldNames(GID), ["raw", "global.interface_id"]);
 * ```
 */
export function fieldNames<K extends string>(layout: StructLayout<K>): K[] {
  return Object.keys(layout.fields) as K[];
}
