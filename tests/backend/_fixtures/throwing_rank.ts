/**
 * A rank for the spawnThreads error tests: rank 1 fails as `args.kind` says; the other ranks return their
 * rank.
 */
import type { ProcessGroup } from "../../../backend/process_group.ts";
import { MismatchError, TransportError } from "../../../core/errors.ts";

/** Fails on rank 1 as `args.kind` says. */
export function main(pg: ProcessGroup, ctx: { args: unknown }): unknown {
  const { kind } = ctx.args as { kind: string };
  if (pg.rank !== 1) return pg.rank;
  if (kind === "mismatch") {
    throw new MismatchError("Rank 1 called broadcast where rank 0 called allReduce", {
      cause: new TransportError("Rank 0 sent an ABORT", { peer: 0, cause: "the wire said so" }),
    });
  }
  if (kind === "type") throw new TypeError("Expected a Float32Array, found a string");
  if (kind === "uncloneable") return { f: () => 1 };
  throw new Error(`Unknown kind: expected mismatch, type or uncloneable, found ${kind}`);
}
