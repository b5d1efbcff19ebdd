/**
 * Telling a revoke from other failures: a peer's abort whose reason is `pg.revoke()`'s message becomes the
 * RevokedError it was on the revoking rank, on the Worker (the transport's failure) and on the main thread
 * (a segment call's).
 *
 * @module
 */
import { RevokedError, TransportError } from "../../core/errors.ts";

/** The message a revoke aborts the world with (and the one every rank's RevokedError carries). */
export function revokeMessage(group: number, rank: number, reason: string): string {
  return `Group ${group} revoked by rank ${rank}: ${reason}`;
}

/**
 * A peer's abort whose reason is a revoke (`pg.revoke()` there, or relayed by another rank), as the
 * RevokedError it was there: every rank then fails with the same kind of error, naming who revoked.
 *
 * @param error The transport's (or a segment call's) failure.
 * @returns The revoke, or `undefined` for any other failure.
 */
export function peerRevoked(error: Error): RevokedError | undefined {
  if (!(error instanceof TransportError) || error.peer === undefined) return undefined;
  const m = /^Rank (\d+) aborted: (?:Rank \d+ aborted: )*(Group \d+ revoked by rank \d+[\s\S]*)$/.exec(
    error.message,
  );
  if (m === null || Number(m[1]) !== error.peer) return undefined;
  return new RevokedError(m[2], { cause: error });
}
