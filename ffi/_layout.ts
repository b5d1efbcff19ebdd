/**
 * Layout tables of C structs that bindings build or read by hand: each field's name, byte offset, size and
 * kind, and the struct's size. The layout tests compile a C program against the real header and compare
 * its `offsetof`/`sizeof` with these tables, so the tables are data rather than code.
 *
 * @module
 */

/** How a field is read or written. */
export type FieldKind = "i32" | "u32" | "usize" | "pointer" | "bytes";

/** One field of a {@linkcode StructLayout}. */
export interface FieldLayout {
  /** The field's name in the C header. */
  readonly name: string;
  /** Its byte offset. */
  readonly offset: number;
  /** Its size in bytes. */
  readonly size: number;
  /** How it is accessed. */
  readonly kind: FieldKind;
}

/** A C struct's layout on x86_64 / aarch64 Linux (LP64). */
export interface StructLayout<F extends FieldLayout = FieldLayout> {
  /** The struct's name in the C header. */
  readonly name: string;
  /** `sizeof` the struct. */
  readonly size: number;
  /** Its fields, in declaration order. */
  readonly fields: readonly F[];
}

/**
 * Looks a field up by name.
 *
 * @param layout The struct.
 * @param name The field.
 * @returns The field.
 * @throws {TypeError} If the struct has no such field.
 */
export function field(layout: StructLayout, name: string): FieldLayout {
  const f = layout.fields.find((x) => x.name === name);
  if (f === undefined) {
    throw new TypeError(
      `Unknown field of ${layout.name}: expected one of ${layout.fields.map((x) => x.name).join(", ")}, ` +
        `found ${name}`,
    );
  }
  return f;
}
