/**
 * The emulated cluster (`bench/cluster.ts`): hosts as network namespaces with shaped links, a launcher per
 * host; ranks of a host over shared memory, hosts over TCP; nothing left behind (no namespace, and with
 * them no veth, bridge or qdisc) after a run, a failed run or the command itself. Needs root and
 * iproute2, which CI has.
 */
import assert from "node:assert/strict";
import {
  clusterUnavailable,
  createCluster,
  gsoFor,
  namespacePids,
  namespacesWith,
  resultOf,
  runOnCluster,
} from "../../bench/cluster.ts";
import { gatedTest } from "../_util/skip.ts";

const missing = await clusterUnavailable();
const FIXTURE = new URL("./_fixtures/cluster_rank.ts", import.meta.url).pathname;
const CLUSTER = new URL("../../bench/cluster.ts", import.meta.url).pathname;

async function qdiscs(ns: string, dev: string): Promise<string> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", ns, "tc", "qdisc", "show", "dev", dev],
    stdout: "piped",
  })
    .output();
  return new TextDecoder().decode(out.stdout);
}

async function gso(ns: string, dev: string): Promise<string> {
  const out = await new Deno.Command("ip", { args: ["-n", ns, "-d", "link", "show", dev], stdout: "piped" })
    .output();
  return new TextDecoder().decode(out.stdout);
}

Deno.test("gsoFor() takes the largest power of two within 600 µs of the rate, 4-64 KiB", () => {
  assert.equal(gsoFor(12.5e6), 4096); // 100 Mb/s: 7.5 KB
  assert.equal(gsoFor(25e6), 8192); // 200 Mb/s: 15 KB
  assert.equal(gsoFor(125e6), 65536); // 1 Gb/s: 75 KB
  assert.equal(gsoFor(1.25e9), 65536); // 10 Gb/s: capped
  assert.equal(gsoFor(1e6), 4096); // 8 Mb/s: the floor
});

Deno.test("resultOf() parses the JSON after the marker, and says what failed with the output's end", () => {
  const ok = [
    { host: 0, code: 0, output: '[rank0]: starting\n[rank0]: RESULT {"rows":[1,2]}\n' },
    { host: 1, code: 0, output: "" },
  ];
  assert.deepEqual(resultOf(ok, "RESULT", "the run"), { rows: [1, 2] });
  assert.throws(
    () => resultOf([{ host: 0, code: 0, output: "[rank0]: no marker here" }], "RESULT", "the run at 1gbit"),
    /the run at 1gbit failed:\n\[rank0\]: no marker here/,
  );
  // A host that failed fails the run even where another printed its result.
  assert.throws(
    () => resultOf([...ok, { host: 2, code: 1, output: "[rank4]: Rank 5 exited" }], "RESULT", "the run"),
    /the run failed:[^]*Rank 5 exited/,
  );
});

gatedTest(
  "2 hosts × 2 ranks: shaped links, shm within a host, TCP between, the sums right, nothing left after",
  { missing },
  async () => {
    const cluster = await createCluster({ hosts: 2, rate: "200mbit", delay: "100us" });
    try {
      assert.deepEqual(
        await namespacesWith(cluster.tag),
        [...cluster.namespaces, cluster.switchNamespace].sort(),
      );
      // Both ends of every link are shaped; tbf's bucket holds a packet and 0.5 ms of the rate (8 KiB +
      // 12.5 KB at 200 Mb/s), the packets are 8 KiB.
      for (const [h, ns] of cluster.namespaces.entries()) {
        for (const text of [await qdiscs(ns, "eth0"), await qdiscs(cluster.switchNamespace, `p${h}`)]) {
          assert.match(text, /(netem|tbf).*rate 200Mbit/);
          if (cluster.shaping === "tbf") {
            // tc keeps the bucket in its own time units: what it prints is within a few bytes of it.
            const burst = Number(/ burst (\d+)b /.exec(text)?.[1]);
            assert.ok(Math.abs(burst - 20692) <= 100, `bucket of ${burst} bytes, expected 20692: ${text}`);
          }
        }
        assert.match(await gso(ns, "eth0"), /gso_max_size 8192 /);
        assert.match(await gso(cluster.switchNamespace, `p${h}`), /gso_max_size 8192 /);
      }
      const runs = await runOnCluster(cluster, 2, [FIXTURE], { timeoutMs: 120_000 });
      for (const r of runs) assert.equal(r.code, 0, r.output.slice(-2000));
      const results = runs.flatMap((r) =>
        [...r.output.matchAll(/RESULT (\{.*\})/g)].map((m) => JSON.parse(m[1]))
      );
      assert.equal(results.length, 4, runs.map((r) => r.output).join("\n"));
      for (const r of results) {
        assert.equal(r.right, true, JSON.stringify(r));
        assert.equal(r.transport, "shm+tcp");
        assert.equal(r.hierarchical, "hierarchical");
      }
      // Every launcher and rank is gone from the hosts.
      for (const ns of cluster.namespaces) assert.deepEqual(await namespacePids(ns), []);
    } finally {
      await cluster.destroy();
    }
    assert.deepEqual(await namespacesWith(cluster.tag), []);
  },
);

gatedTest("interrupted, the command stops every rank and removes everything", { missing }, async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      CLUSTER,
      "--hosts",
      "2",
      "--ranks-per-host",
      "1",
      FIXTURE,
      "--fail-on-host",
      "none",
      "--hang",
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Wait until both hosts' ranks are up (each prints that it waits).
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while ((text.match(/waiting until stopped/g) ?? []).length < 2) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  child.kill("SIGINT");
  const status = await child.status;
  await reader.cancel();
  await child.stderr.cancel();
  assert.equal(status.code, 130, text);
  assert.deepEqual(await namespacesWith("dcn"), []);
  const left = await new Deno.Command("pgrep", { args: ["-f", FIXTURE], stdout: "piped" }).output();
  assert.equal(new TextDecoder().decode(left.stdout).trim(), "", "a rank outlived the cluster");
});

gatedTest("a host whose ranks fail makes the command exit non-zero, and it still removes everything", {
  missing,
}, async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLUSTER, "--hosts", "2", "--ranks-per-host", "1", FIXTURE, "--fail-on-host", "1"],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 1, text);
  assert.match(text, /\[host1\] .*failing on purpose/);
  assert.match(text, /host 1 exited with code 1/);
  assert.deepEqual(await namespacesWith("dcn"), [], "no namespace of any cluster is left");
});

Deno.test("without ip and tc (or root), the command says what is missing and exits 2", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLUSTER, "--hosts", "2", FIXTURE],
    env: { PATH: "/nonexistent" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 2, text);
  assert.match(
    text,
    /^Cannot build the emulated cluster: (ip is not installed|network namespaces need root)/m,
  );
});
