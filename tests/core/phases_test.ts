/** `core/phases.ts`: the per-thread phase clocks the timeline reads. */
import assert from "node:assert/strict";
import {
  addPhase,
  PHASE_CODEC,
  PHASE_REDUCING,
  PHASE_WAITING,
  phaseMark,
  phasesOn,
  phasesSince,
  setPhases,
  timePhase,
} from "../../core/phases.ts";

Deno.test("phasesSince() gives the totals since a mark; moving is the rest, never below 0", () => {
  const mark = phaseMark();
  addPhase(PHASE_WAITING, 1);
  addPhase(PHASE_REDUCING, 2);
  addPhase(PHASE_CODEC, 0.5);
  assert.deepEqual(phasesSince(mark, 5, true), { waitingMs: 1, movingMs: 1.5, reducingMs: 2, codecMs: 0.5 });
  // Unmeasured waiting is part of moving.
  assert.deepEqual(phasesSince(mark, 5, false), { movingMs: 2.5, reducingMs: 2, codecMs: 0.5 });
  assert.equal(phasesSince(mark, 1, true).movingMs, 0);
  // Marks nest: an inner call's totals are inside the outer one's.
  const inner = phaseMark();
  addPhase(PHASE_REDUCING, 1);
  assert.equal(phasesSince(inner, 1, true).reducingMs, 1);
  assert.equal(phasesSince(mark, 9, true).reducingMs, 3);
});

Deno.test("timePhase() times only while phases are on", () => {
  assert.equal(phasesOn, false, "off by default");
  let mark = phaseMark();
  assert.equal(timePhase(PHASE_CODEC, () => 7), 7);
  assert.equal(phasesSince(mark, 1, false).codecMs, 0);
  setPhases(true);
  try {
    mark = phaseMark();
    const t0 = performance.now();
    while (performance.now() - t0 < 2) { /* 2 ms of work */ }
    const spent = performance.now() - t0;
    timePhase(PHASE_CODEC, () => {
      const t1 = performance.now();
      while (performance.now() - t1 < 2) { /* 2 ms of codec */ }
    });
    const codec = phasesSince(mark, 10, false).codecMs;
    assert.ok(codec >= 2 && codec < 2 + spent + 50, `${codec} ms`);
  } finally {
    setPhases(false);
  }
});
