/**
 * Checks the `RESULT {json}` lines of `tests/backend/_fixtures/collectives.ts` run on real ranks under any
 * launcher: every rank ran the same cases, none was wrong, every rank holds the same bits.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { RankResult } from "../backend/_fixtures/collectives.ts";

/** The fixture's path, to run under a launcher (`deno run -A <it> [profile]`). */
export const COLLECTIVES_FIXTURE: string =
  new URL("../backend/_fixtures/collectives.ts", import.meta.url).pathname;

/**
 * Every `RESULT {json}` line of `output` (a launcher's prefix before it is allowed), in rank order.
 *
 * @param output What the ranks printed.
 * @returns The results.
 */
export function collectiveResults(output: string): RankResult[] {
  return [...output.matchAll(/^(?:\[[^\]]*\]:? ?)?RESULT (\{.*\})$/gm)]
    .map((m) => JSON.parse(m[1]) as RankResult)
    .sort((a, b) => a.rank - b.rank);
}

/**
 * Fails unless `results` are `size` ranks' worth of right answers with the same bits on every rank.
 *
 * @param results The ranks' results.
 * @param size The world size.
 */
export function checkResults(results: RankResult[], size: number): void {
  assert.equal(results.length, size);
  const failures = results.flatMap((r) => r.failures);
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} wrong results`);
  const ran = results[0].ran;
  assert.ok(ran > 0);
  for (const r of results) assert.equal(r.ran, ran, `rank ${r.rank} ran ${r.ran} cases, rank 0 ran ${ran}`);
  for (const [id, hash] of Object.entries(results[0].hashes)) {
    for (const r of results) {
      assert.equal(r.hashes[Number(id)], hash, `case #${id}: rank ${r.rank} holds other bits than rank 0`);
    }
  }
}
