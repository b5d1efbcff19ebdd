/**
 * Faults: a rank killed mid-collective, mismatched calls, a rank that never joins a call. Every rank must
 * fail fast with an error that says what happened and to whom — never hang.
 */
import assert from "node:assert/strict";
import { spawnThreads } from "../../backend/threads.ts";
import type { TimeoutResult } from "./_fixtures/timeouts.ts";
import { type Rank, startRanks, until } from "../_util/processes.ts";

const FIXTURE = new URL("./_fixtures/fault_rank.ts", import.meta.url).pathname;

function failure(rank: Rank): { name: string; ms: number; message: string } | undefined {
  const line = rank.lines.find((l) => l.startsWith("FAILED "));
  const m = line && /^FAILED (\S+) (\d+) (.*)$/.exec(line);
  return m ? { name: m[1], ms: Number(m[2]), message: m[3] } : undefined;
}

/** dcomm's objects in /dev/shm (inboxes with their segment areas). */
function shmObjects(): string[] {
  return [...Deno.readDirSync("/dev/shm")].map((e) => e.name).filter((n) => n.startsWith("dcomm-")).sort();
}

const KILLED = [
  ["tcp", "16 MiB"],
  ["hybrid", "16 MiB"],
  ["shm", "16 MiB"],
  ["shm", "1 KiB"],
  ["tcp", "DDP buckets"],
  [
    "shm",
    "DDP buckets",
  ],
  ["shm", "DDP 1-bit buckets"],
  ["tcp", "DDP 1-bit buckets"],
  ["tcp", "ZeRO-3 gathers"],
  ["shm", "ZeRO-3 gathers"],
  ["tcp", "gather"],
  ["shm", "gather"],
  ["tcp", "allGatherv"],
  ["shm", "allGatherv"],
  ["tcp", "batch"],
  ["shm", "batch"],
  // Not here yet: rank 0 receiving from ANY_SOURCE while the others send, the sender killed. Rank 0 takes
  // the message that came first, so it should read the killed rank's last message and then find it gone,
  // whatever the live senders keep sending; over TCP that fails about 1 run in 10 (measured on the commit
  // before this one and after it: the survivors go on receiving and never fail), over shm more often (the
  // dead sender is found by its pid, which a receive from any source checks only now and then). Issue 21.
];
for (const [transport, size] of KILLED) {
  Deno.test(`a rank killed mid-collective makes every other rank fail within seconds (${transport}, ${size})`, async () => {
    const before = shmObjects();
    const variant = size === "1 KiB"
      ? "small"
      : size === "DDP buckets"
      ? "ddp"
      : size === "DDP 1-bit buckets"
      ? "ddp-1bit"
      : size === "ZeRO-3 gathers"
      ? "zero3"
      : size === "gather" || size === "allGatherv" || size === "batch" || size === "anySource"
      ? size
      : "big";
    // hybrid: ranks 0, 1 on one host and 2, 3 on another (shared memory within, TCP between).
    const ranks = await startRanks(
      FIXTURE,
      4,
      ["loop", variant],
      transport === "hybrid"
        ? { DCOMM_TRANSPORT: "auto", DCOMM_HOST_OF: "a,a,b,b" }
        : { DCOMM_TRANSPORT: transport },
    );
    await until(() => ranks.every((r) => r.lines.includes("STARTED")), 60_000);
    await new Promise((r) => setTimeout(r, 200));
    const killedAt = Date.now();
    ranks[2].child.kill("SIGKILL");
    const survivors = [ranks[0], ranks[1], ranks[3]];
    await until(() => survivors.every((r) => failure(r) !== undefined), 30_000).catch((e) => {
      for (const r of ranks) {
        try {
          r.child.kill("SIGKILL");
        } catch {
          // ended already
        }
      }
      const lines = ranks.map((x, i) => `rank ${i}: ${x.lines.join(" | ")}`).join("\n");
      throw new Error(`${(e as Error).message}; the ranks printed:\n${lines}`);
    });
    const elapsed = Date.now() - killedAt;
    assert.ok(elapsed < 10_000, `the survivors took ${elapsed} ms to fail`);
    await Promise.all(survivors.map((r) => r.done));
    for (const r of survivors) {
      const f = failure(r);
      assert.ok(f, `a survivor printed no failure: ${r.lines.join(" | ")}`);
      const all = ranks.map((x, i) => `rank ${i}: ${x.lines.join(" | ")}`).join("\n");
      assert.match(f.name, /TransportError|DistError/, all);
      assert.match(f.message, /[Rr]ank 2\b/, `the error does not name the dead rank:\n${all}`);
    }
    await ranks[2].done;
    // The killed rank and the failed ones leave nothing behind in /dev/shm.
    assert.deepEqual(shmObjects(), before);
  });
}

const MISMATCHES = [
  // Over messages: each message's descriptor; a rooted call first agrees on its descriptor (root included).
  ...[
    "count",
    "op",
    "dtype",
    "collective",
    "algorithm",
    "root",
    "rootEach",
    "reduceRoot",
    "counts",
    "gatherRoot",
  ]
    .map((v) => [v, "tcp", "ring"]),
  // Through the host segment: the descriptor in each rank's log is what catches them.
  ...[
    "count",
    "op",
    "dtype",
    "collective",
    "algorithm",
    "root",
    "rootEach",
    "reduceRoot",
    "counts",
    "gatherRoot",
  ]
    .map((v) => [v, "shm", "auto"]),
];
for (const [variant, transport, algorithm] of MISMATCHES) {
  Deno.test(`mismatched calls (${variant}, ${transport} ${algorithm}) fail on every rank, naming both ranks and both calls`, async () => {
    const ranks = await startRanks(FIXTURE, 3, ["mismatch", variant], {
      DCOMM_TRANSPORT: transport,
      FAULT_ALGORITHM: algorithm,
    });
    await Promise.all(ranks.map((r) => r.done));
    const messages = ranks.map((r) => failure(r)?.message ?? `no failure: ${r.lines.join(" | ")}`);
    for (const m of messages) assert.doesNotMatch(m, /^no failure/, m);
    // The rank that detected it names both calls; the others learn its reason through the abort.
    const detail = messages.find((m) => /Mismatched calls/.test(m));
    assert.ok(detail, messages.join("\n"));
    if (variant === "rootEach") {
      // Every rank named another root: any two of them disagree.
      const named = new Set([...detail.matchAll(/rank (\d)\b/gi)].map((m) => m[1]));
      assert.ok(named.size >= 2, detail);
    } else {
      assert.match(detail, /rank 1\b/i);
      assert.match(detail, /rank [02]\b/i);
    }
    assert.match(
      detail,
      /(allReduce|broadcast|reduce|allGather|gather)\(.*\).*(allReduce|broadcast|reduce|allGather|gather)\(/,
    );
    if (variant === "counts") assert.match(detail, /counts #[0-9a-f]+.*counts #[0-9a-f]+/, detail);
    if (/root|Root/.test(variant)) assert.match(detail, /root \d.*root \d/, detail);
    for (const m of messages) assert.match(m, /Mismatched calls|aborted/);
  });
}

for (const transport of ["tcp", "shm"]) {
  Deno.test(`a rank that skips a collective makes the others time out, naming the call and the awaited rank (${transport})`, async () => {
    const ranks = await startRanks(FIXTURE, 3, ["skip"], {
      DCOMM_TRANSPORT: transport,
      FAULT_TIMEOUT_MS: "1500",
    });
    await Promise.all(ranks.map((r) => r.done));
    const f0 = failure(ranks[0]);
    assert.ok(f0, ranks[0].lines.join(" | "));
    assert.match(f0.message, /Timed out after 1500 ms in allReduce\(1024 × float32/);
    assert.ok(f0.ms < 6000, `rank 0 failed after ${f0.ms} ms`);
    const f2 = failure(ranks[2]);
    assert.ok(f2);
    assert.match(f2.message, /Timed out|aborted/);
    assert.match(f0.message, /waiting for rank 1\b/);
  });
}

for (const call of ["small", "big", "gather", "barrier"]) {
  Deno.test(`a rank that closed its group fails the others' next call through the host segment at once (${call})`, async () => {
    const ranks = await startRanks(FIXTURE, 3, ["closed", call], { DCOMM_TRANSPORT: "shm" });
    await Promise.all(ranks.map((r) => r.done));
    for (const r of [0, 2]) {
      const f = failure(ranks[r]);
      assert.ok(f, ranks[r].lines.join(" | "));
      assert.match(
        f.message,
        new RegExp(`^Rank 1 closed its process group while rank ${r} waits for it in `),
      );
      assert.ok(f.ms < 5000, `rank ${r} failed after ${f.ms} ms`);
    }
  });
}

for (const transport of ["tcp", "shm"]) {
  Deno.test(`a receive from ANY_SOURCE that no rank sends to times out, naming every rank it waited for (${transport})`, async () => {
    const ranks = await startRanks(FIXTURE, 3, ["skip", "anySource"], {
      DCOMM_TRANSPORT: transport,
      FAULT_TIMEOUT_MS: "1500",
    });
    await Promise.all(ranks.map((r) => r.done));
    const f0 = failure(ranks[0]);
    assert.ok(f0, ranks[0].lines.join(" | "));
    assert.equal(
      f0.message,
      "Timed out after 1500 ms in recv(1024 × float32) from ANY_SOURCE in group 0 on rank 0, waiting for rank 1, rank 2",
    );
    assert.ok(f0.ms < 6000, `rank 0 failed after ${f0.ms} ms`);
  });
}

Deno.test("a call's own short timeout fires after calls with the long default (one timer serves all)", async () => {
  const results = await spawnThreads(new URL("./_fixtures/timeouts.ts", import.meta.url), {
    worldSize: 2,
    timeoutMs: 60_000,
  }).catch((e: Error) => [{ message: `spawnThreads failed: ${e.message}`, ms: -1 }]);
  const r0 = results[0] as TimeoutResult;
  assert.match(r0.message, /Timed out after 400 ms in allReduce\(16 × float32/);
  assert.ok(r0.ms >= 390 && r0.ms < 5_000, `failed after ${r0.ms} ms`);
});
