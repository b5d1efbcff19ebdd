/**
 * A `/dev/shm` too small for the world (Docker's default is 64 MiB): a rank that cannot create its object
 * removes it and says what `/dev/shm` needs and has and how to fix it, its peers fail at once naming it,
 * and with a host segment rank 0 shrinks the segment (or turns it off) to fit, saying so once.
 *
 * Each test runs in a user and mount namespace (`unshare -rm`) with a tmpfs of the size it needs on
 * /dev/shm: real processes, a real tmpfs, no root. Where unprivileged namespaces are off, they are ignored.
 */
import assert from "node:assert/strict";
import { inboxBytes } from "../../transport/_ring_transport.ts";
import { segmentAreaBytes } from "../../transport/segment.ts";
import { gatedTest } from "../_util/skip.ts";

const WORLD = new URL("./_fixtures/shm_space_world.ts", import.meta.url).pathname;
const LAUNCH = new URL("../../cli/launch.ts", import.meta.url).pathname;
const RANK = new URL("./_fixtures/shm_space_rank.ts", import.meta.url).pathname;
const MIB = 1 << 20;

/** Whether this machine lets us mount a tmpfs on /dev/shm in a namespace of our own. */
const canUnshare = ((): boolean => {
  try {
    return new Deno.Command("unshare", {
      args: ["-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
      stdout: "null",
      stderr: "null",
    }).outputSync().code === 0;
  } catch {
    return false;
  }
})();
const missing = Deno.build.os !== "linux"
  ? "needs Linux"
  : canUnshare
  ? undefined
  : "unprivileged user and mount namespaces (unshare -rm) are off on this machine";

/**
 * Runs deno with `args` (for at most 60 s) with a tmpfs of `size` (as `mount -o size=` takes it) on
 * /dev/shm, then prints what is left there.
 */
async function withShm(size: string, args: readonly string[]): Promise<{ code: number; text: string }> {
  const script = `mount -t tmpfs -o size=${size} tmpfs /dev/shm || exit 99; timeout -k 5 60 "$@"; code=$?; ` +
    `echo "LEFT:[$(ls -A /dev/shm | tr '\\n' ' ')]"; exit $code`;
  const out = await new Deno.Command("unshare", {
    args: ["-rm", "sh", "-c", script, "sh", Deno.execPath(), ...args],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(90_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.notEqual(out.code, 99, text);
  return { code: out.code, text };
}

interface Result {
  rank: number;
  ok: boolean;
  name?: string;
  message?: string;
  peer?: number;
  ms: number;
  layout?: { buffers: number; bufferBytes: number } | null;
}

interface WorldReport {
  results: Result[];
  logs: string[];
  left: string[];
}

/** A world of `size` ranks in one process (`shm_space_world.ts`) in a /dev/shm of `shm`. */
async function world(
  shm: string,
  size: number,
  ringBytes: number,
  segment: boolean,
  fit = true,
): Promise<WorldReport> {
  const { text } = await withShm(shm, [
    "run",
    "-A",
    WORLD,
    String(size),
    String(ringBytes),
    segment ? "default" : "none",
    fit ? "1" : "0",
  ]);
  const line = text.split("\n").find((l) => l.startsWith("{"));
  assert.ok(line !== undefined, text);
  return JSON.parse(line) as WorldReport;
}

/** The bytes of /dev/shm `size` objects of `bytes` take (whole pages). */
const worldBytes = (size: number, bytes: number): number => size * Math.ceil(bytes / 4096) * 4096;
const areaOffset = (size: number, ringBytes: number): number =>
  Math.ceil(inboxBytes(size, ringBytes) / 65536) * 65536;
const DEFAULT_AREA = segmentAreaBytes({ buffers: 4, bufferBytes: MIB });

/** Checks that one rank failed to create its object and every other failed at once naming it. */
function oneFailed(report: WorldReport, size: number): Result {
  const failed = report.results.filter((r) => /^Cannot create the shared memory/.test(r.message ?? ""));
  assert.equal(failed.length, 1, JSON.stringify(report.results));
  const [own] = failed;
  assert.equal(own.name, "TransportError");
  assert.match(
    own.message ?? "",
    new RegExp(`^Cannot create the shared memory of rank ${own.rank} in /dev/shm`),
  );
  assert.match(own.message ?? "", /posix_fallocate\(.*\) failed: ENOSPC/);
  const slowest = Math.max(...report.results.map((r) => r.ms));
  for (const r of report.results.filter((r) => r !== own)) {
    assert.equal(r.ok, false);
    assert.equal(r.name, "TransportError", r.message);
    assert.equal(r.peer, own.rank);
    assert.match(
      r.message ?? "",
      new RegExp(
        `^Cannot connect the shm transport of rank ${r.rank}: rank ${own.rank} \\(pid \\d+\\) failed: Cannot create the shared memory of rank ${own.rank}`,
      ),
    );
  }
  // Not the 300 s timeout: within a second of the failure.
  assert.ok(
    slowest - own.ms < 1000,
    `the peers failed ${(slowest - own.ms).toFixed(0)} ms after rank ${own.rank}`,
  );
  assert.equal(report.results.length, size);
  assert.deepEqual(report.left, [], "the failed rank removed its object, and the others theirs");
  return own;
}

gatedTest(
  "a rank whose inbox does not fit /dev/shm removes it, says what it needs and has, and its peers fail at once naming it",
  { missing },
  async (): Promise<void> => {
    // 4 ranks of 1 MiB rings, about 3 MiB each: 3 of them fit 11 MiB.
    const report = await world("11m", 4, MIB, false);
    const own = oneFailed(report, 4);
    const need = worldBytes(4, inboxBytes(4, MIB));
    const message = own.message ?? "";
    assert.ok(message.includes(`The 4 ranks of this host need ${need} bytes`), message);
    assert.match(message, new RegExp(`/dev/shm has \\d+ bytes \\([\\d.]+ MiB\\) free of ${11 * MIB}\\.`));
    assert.ok(message.includes(`docker run --shm-size=${Math.ceil(need / MIB)}m`), message);
    assert.ok(message.includes("run fewer ranks on this host"), message);
    assert.ok(!message.includes("DCOMM_SEGMENT"), "no segment: no segment fixes");
  },
);

gatedTest(
  "a rank whose segment does not fit /dev/shm (fitSegment: false) is told how to turn it off or shrink it",
  { missing },
  async (): Promise<void> => {
    // 2 ranks of 1 MiB rings and the default segment, about 5.2 MiB each: one fits 8 MiB.
    const report = await world("8m", 2, MIB, true, false);
    const own = oneFailed(report, 2);
    const each = areaOffset(2, MIB) + DEFAULT_AREA;
    const message = own.message ?? "";
    assert.ok(message.includes(`need ${worldBytes(2, each)} bytes`), message);
    assert.ok(message.includes(`${each} bytes each`), message);
    assert.ok(message.includes(`docker run --shm-size=${Math.ceil(worldBytes(2, each) / MIB)}m`), message);
    assert.ok(message.includes("DCOMM_SEGMENT=0 or init({ segment: false })"), message);
    // The largest halving of the 1 MiB buffers that fits 8 MiB.
    assert.ok(message.includes("init({ segment: { bufferBytes: 524288 } })"), message);
  },
);

gatedTest(
  "rank 0 shrinks the segment's buffers to fit /dev/shm, and says so once",
  { missing },
  async (): Promise<void> => {
    const report = await world("8m", 2, MIB, true);
    for (const r of report.results) {
      assert.ok(r.ok, r.message);
      assert.deepEqual(r.layout, { buffers: 4, bufferBytes: 512 << 10 });
    }
    assert.equal(report.logs.length, 1, report.logs.join("\n"));
    assert.match(
      report.logs[0],
      /^dcomm: \/dev\/shm has 8\.0 MiB free, but the 2 ranks of this host need 10\.4 MiB with .*: using segment buffers of 512 KiB instead of 1 MiB \(6\.4 MiB\)\. To get the segment back, give \/dev\/shm at least 11 MiB \(docker run --shm-size=11m\); DCOMM_SEGMENT=0 or init\(\{ segment: false \}\) turns it off without this line$/,
    );
    assert.deepEqual(report.left, []);
  },
);

gatedTest(
  "rank 0 turns the segment off when not even its smallest fits /dev/shm, and says so once",
  { missing },
  async (): Promise<void> => {
    const report = await world("2560k", 2, MIB, true);
    for (const r of report.results) {
      assert.ok(r.ok, r.message);
      assert.equal(r.layout, null);
    }
    assert.equal(report.logs.length, 1, report.logs.join("\n"));
    assert.match(
      report.logs[0],
      /: running without the host segment \(2\.0 MiB\): collectives use the rings alone\./,
    );
    assert.deepEqual(report.left, []);
  },
);

gatedTest(
  "4 ranks of the cpu backend run in Docker's default 64 MiB /dev/shm, with one warning from rank 0",
  { missing },
  async (): Promise<void> => {
    const { code, text } = await withShm("64m", ["run", "-A", LAUNCH, "--nproc-per-node", "4", RANK]);
    assert.equal(code, 0, text);
    for (let rank = 0; rank < 4; rank++) assert.match(text, new RegExp(`\\[rank${rank}\\]: SUM 10 true`));
    const warnings = text.split("\n").filter((line) => line.includes("dcomm: /dev/shm has"));
    assert.equal(warnings.length, 1, text);
    assert.match(warnings[0], /^\[rank0\]: dcomm: \/dev\/shm has 64\.0 MiB free, .*--shm-size=65m/);
    assert.match(text, /LEFT:\[\]/);
  },
);
