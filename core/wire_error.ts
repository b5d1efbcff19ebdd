/**
 * Errors across threads: {@linkcode toWire} turns a thrown value into a plain record that survives
 * `postMessage` (structured clone), and {@linkcode fromWire} turns it back into an error of the same class.
 * Structured clone alone keeps only `Error`, `TypeError`, `RangeError` and the other built-in classes, and
 * drops `code`, `peer` and every other own field; a `MismatchError` would arrive as a plain `Error`.
 *
 * Kept: the class (every {@linkcode DistError} subclass of `errors.ts`, the built-in error classes,
 * `DOMException`, `Deno.errors.*`), `name`, `message`, `stack` (the thread's own), `cause` (recursively,
 * whether an error or a cloneable value), an `AggregateError`'s `errors`, and every own field whose value
 * clones (`code`, `peer`, `tried`, `status`, ...). A class this module does not know (e.g. an `MpiError`)
 * comes back as the nearest known class it extends, with its own `name` and fields. A thrown value that is
 * not an error comes back as an `Error` whose message is `String(value)` and whose cause is the value.
 *
 * @example Across a worker boundary
 * ```ts
 * import { fromWire, toWire } from "./wire_error.ts";
 * import { MismatchError } from "./errors.ts";
 * const wire = structuredClone(toWire(new MismatchError("Rank 1 called broadcast")));
 * const back = fromWire(wire);
 * if (!(back instanceof MismatchError) || back.code !== "MISMATCH") throw new Error("lost the class");
 * ```
 *
 * @module
 */
import {
  CudaError,
  DistError,
  LibraryNotFoundError,
  MismatchError,
  NcclError,
  RevokedError,
  StoreError,
  TimeoutError,
  TransportError,
  UnsupportedError,
} from "./errors.ts";

/** The cause of a {@linkcode WireError}: an error, or any other value (as it cloned, or as text). */
export type WireCause = { readonly error: WireError } | { readonly value: unknown };

/** An error as a structured-clone-safe record. */
export interface WireError {
  /**
   * The class to rebuild: a name of {@linkcode WIRE_ERROR_CLASSES}, `"DOMException"`, or
   * `"Deno.errors.<Name>"`.
   */
  readonly type: string;
  /** The error's `name` (differs from `type` for a subclass this module does not know). */
  readonly name: string;
  /** The message. */
  readonly message: string;
  /** The stack as the thread that threw it saw it. */
  readonly stack?: string;
  /** The {@linkcode DistError} code, when it is one. */
  readonly code?: string;
  /** The peer rank, for a {@linkcode TransportError}. */
  readonly peer?: number;
  /** The underlying failure. */
  readonly cause?: WireCause;
  /** An `AggregateError`'s errors. */
  readonly errors?: readonly WireCause[];
  /** Every other own field whose value clones (`tried`, `status`, ...). */
  readonly fields?: Readonly<Record<string, unknown>>;
}

/** A class {@linkcode fromWire} can rebuild: constructed as `new C(message, options)`. */
export type ErrorClass = new (message: string, options: Record<string, unknown>) => Error;

/** The classes rebuilt by name: dcomm's errors and the built-in ones. */
export const WIRE_ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = {
  Error,
  TypeError,
  RangeError,
  SyntaxError,
  ReferenceError,
  EvalError,
  URIError,
  DistError,
  TimeoutError,
  TransportError,
  MismatchError,
  RevokedError,
  StoreError,
  LibraryNotFoundError,
  UnsupportedError,
  CudaError: CudaError as unknown as ErrorClass,
  NcclError: NcclError as unknown as ErrorClass,
};

/** Names of the DistError family, matched by name when the class is another copy of `errors.ts`. */
const DIST_NAMES = new Set([
  "DistError",
  "TimeoutError",
  "TransportError",
  "MismatchError",
  "RevokedError",
  "StoreError",
  "LibraryNotFoundError",
  "UnsupportedError",
  "CudaError",
  "NcclError",
]);

/** Past this depth a cause chain is cut: causes can form cycles. */
const MAX_DEPTH = 16;

const RESERVED = new Set(["name", "message", "stack", "cause", "errors", "code", "peer"]);

function denoErrors(): Record<string, ErrorClass> {
  const deno = (globalThis as { Deno?: { errors?: Record<string, ErrorClass> } }).Deno;
  return deno?.errors ?? {};
}

// The nearest class of `e` this module can rebuild: by identity first; then, for a copy of errors.ts
// loaded from another URL, by the name of a DistError-family class in its chain.
function typeOf(e: Error): string {
  if (typeof DOMException === "function" && e instanceof DOMException) return "DOMException";
  if (e instanceof AggregateError) return "AggregateError";
  const byProto = new Map<object, string>();
  for (const [name, cls] of Object.entries(WIRE_ERROR_CLASSES)) byProto.set(cls.prototype, name);
  for (const [name, cls] of Object.entries(denoErrors())) {
    if (typeof cls === "function") byProto.set(cls.prototype, `Deno.errors.${name}`);
  }
  const chain: object[] = [];
  for (let p = Object.getPrototypeOf(e); p !== null; p = Object.getPrototypeOf(p)) chain.push(p);
  const isDistCopy = chain.some((p) =>
    (p as { constructor?: { name?: string } }).constructor?.name === "DistError"
  );
  for (const p of chain) {
    const known = byProto.get(p);
    if (known !== undefined && (known !== "Error" || !isDistCopy)) return known;
    const name = (p as { constructor?: { name?: string } }).constructor?.name;
    if (isDistCopy && name !== undefined && DIST_NAMES.has(name)) return name;
  }
  return "Error";
}

// The value as it clones, or undefined when it does not (functions, symbols, host objects).
function cloned(value: unknown): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: structuredClone(value) };
  } catch {
    return { ok: false };
  }
}

function causeToWire(value: unknown, depth: number): WireCause {
  if (value instanceof Error) return { error: errorToWire(value, depth) };
  const c = cloned(value);
  return c.ok ? { value: c.value } : { value: String(value) };
}

function errorToWire(e: Error, depth: number): WireError {
  const type = typeOf(e);
  let name = "Error", message = "", stack: string | undefined;
  try {
    name = String(e.name);
    message = String(e.message);
    stack = typeof e.stack === "string" ? e.stack : undefined;
  } catch {
    // A getter that throws: keep what was read.
  }
  const record: {
    -readonly [K in keyof WireError]: WireError[K];
  } = { type, name, message };
  if (stack !== undefined) record.stack = stack;
  const own = e as unknown as Record<string, unknown>;
  if (typeof own.code === "string") record.code = own.code;
  if (typeof own.peer === "number") record.peer = own.peer;
  if ("cause" in e && e.cause !== undefined) {
    record.cause = depth < MAX_DEPTH
      ? causeToWire(e.cause, depth + 1)
      : { value: `(cause chain cut after ${MAX_DEPTH} levels)` };
  }
  if (e instanceof AggregateError && Array.isArray(e.errors) && depth < MAX_DEPTH) {
    record.errors = e.errors.map((x) => causeToWire(x, depth + 1));
  }
  const fields: Record<string, unknown> = {};
  for (const key of Object.keys(e)) {
    if (RESERVED.has(key)) continue;
    const c = cloned(own[key]);
    if (c.ok) fields[key] = c.value;
  }
  if (Object.keys(fields).length > 0) record.fields = fields;
  return record;
}

/**
 * A thrown value as a structured-clone-safe record; never throws.
 *
 * @param error What was thrown.
 * @returns The record, for `postMessage`; {@linkcode fromWire} rebuilds the error.
 */
export function toWire(error: unknown): WireError {
  if (error instanceof Error) return errorToWire(error, 0);
  return { type: "Error", name: "Error", message: String(error), cause: causeToWire(error, 1) };
}

function causeFromWire(cause: WireCause): unknown {
  return "error" in cause ? fromWire(cause.error) : cause.value;
}

function define(target: object, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: false, configurable: true });
}

/**
 * The error a {@linkcode WireError} describes: the same class (or the nearest one known here), name,
 * message, stack, code, peer, cause and fields.
 *
 * @param wire What {@linkcode toWire} made, after any number of structured clones.
 * @returns The error.
 */
export function fromWire(wire: WireError): Error {
  const cause = wire.cause === undefined ? undefined : causeFromWire(wire.cause);
  const options: Record<string, unknown> = { ...wire.fields };
  if (cause !== undefined) options.cause = cause;
  if (wire.code !== undefined) options.code = wire.code;
  if (wire.peer !== undefined) options.peer = wire.peer;
  let error: Error;
  if (wire.type === "DOMException" && typeof DOMException === "function") {
    error = new DOMException(wire.message, wire.name);
    if (cause !== undefined) define(error, "cause", cause);
  } else if (wire.type === "AggregateError") {
    const errors = (wire.errors ?? []).map(causeFromWire);
    error = cause === undefined
      ? new AggregateError(errors, wire.message)
      : new AggregateError(errors, wire.message, { cause });
  } else {
    const cls = wire.type.startsWith("Deno.errors.")
      ? denoErrors()[wire.type.slice("Deno.errors.".length)]
      : WIRE_ERROR_CLASSES[wire.type];
    error = new (typeof cls === "function" ? cls : Error)(wire.message, options);
    // Built-in classes ignore unknown options, and Error's own constructor keeps only `cause`.
    if (cause !== undefined && !("cause" in error)) define(error, "cause", cause);
  }
  if (error.name !== wire.name) define(error, "name", wire.name);
  const own = error as unknown as Record<string, unknown>;
  const fields: Record<string, unknown> = { ...wire.fields };
  if (wire.code !== undefined) fields.code = wire.code;
  if (wire.peer !== undefined) fields.peer = wire.peer;
  for (const [key, value] of Object.entries(fields)) {
    if (own[key] === value) continue;
    try {
      Object.defineProperty(error, key, { value, writable: true, enumerable: true, configurable: true });
    } catch {
      // A non-configurable property of the class: it keeps the value its constructor gave.
    }
  }
  if (wire.stack !== undefined) define(error, "stack", wire.stack);
  return error;
}
