/**
 * Messages between {@linkcode spawnThreads} and a rank's thread.
 *
 * @module
 */
import type { WireError } from "../core/wire_error.ts";

/** How a rank thread starts. */
export interface ThreadStart {
  /** The module whose `main` the thread runs. */
  module: string;
  /** This rank. */
  rank: number;
  /** The number of ranks. */
  worldSize: number;
  /** The store's port on loopback. */
  port: number;
  /** The store's secret. */
  secret: string;
  /** The in-process mesh. */
  mesh: unknown;
  /** The user's argument. */
  args: unknown;
  /** Timeout of every wait. */
  timeoutMs: number;
  /** More init options. */
  init: Record<string, unknown>;
}

/**
 * How a rank thread ended: `main`'s value, or what it threw as a {@linkcode WireError} (class, code,
 * cause and fields survive the trip; `fromWire` rebuilds it).
 */
export type ThreadReply = { ok: true; value: unknown } | { ok: false; error: WireError };
