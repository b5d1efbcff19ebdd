/**
 * An emulated cluster on one Linux machine (`deno task cluster`): N "hosts", each a network namespace with
 * one interface, joined by veth pairs to a bridge that lives in a switch namespace of its own, every link
 * shaped with `tc netem` (rate and delay) on both of its ends, so that each direction is limited to the
 * link's rate and one-way latency (netem shapes egress only: the host's side shapes what the host sends,
 * the switch's side what it receives; where the kernel lacks netem, `tbf` limits the rate and the latency
 * is the veths' own). dcomm's launcher runs once per host inside its namespace
 * (`ip netns exec`, `--nnodes --node-rank --master-addr`, one store secret for all), so ranks of a host
 * talk over shared memory and hosts over TCP through their shaped links. Every host's output is collected
 * and prefixed `[hostH]`; the namespaces (and with them every veth, bridge and qdisc) are removed when the
 * run ends, fails or is interrupted.
 *
 * ```sh
 * sudo deno task cluster --hosts 4 --ranks-per-host 2 --rate 1gbit --delay 50us examples/train_mnist.ts --epochs 1
 * ```
 *
 * Needs root and `ip`/`tc` (iproute2); without them it says which and exits 2.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { generateSecret, STORE_SECRET_ENV } from "../store/secret.ts";

/** How a cluster is shaped. */
export interface ClusterOptions {
  /** Hosts (namespaces). */
  hosts: number;
  /** Each link's rate, as tc writes it (`1gbit`, `10gbit`). */
  rate: string;
  /** Each link's one-way latency, as tc writes it (`50us`); half of it on each end. */
  delay: string;
  /**
   * The largest packet (GSO) the veths send, in bytes. @default the largest power of two within 600 µs of
   * the rate, in 4-64 KiB (4 KiB at 100 Mb/s, 64 KiB from 1 Gb/s)
   */
  gso?: number;
  /** How late the shaper may be dequeued without the link losing rate, in ms (see `burst`). @default 0.5 */
  jitterMs?: number;
  /** tbf's bucket in bytes. @default one `gso` packet plus `jitterMs` of the rate */
  burst?: number;
}

/** A cluster that exists: its names, and how to remove it. */
export interface Cluster {
  /** The namespace of each host. */
  readonly namespaces: readonly string[];
  /** The address of each host. */
  readonly addresses: readonly string[];
  /** The switch's namespace. */
  readonly switchNamespace: string;
  /** What every name of this cluster starts with. */
  readonly tag: string;
  /**
   * How the links are shaped: `"netem"` (rate and delay) or `"tbf"` (rate only, where the kernel has no
   * netem: the latency is then the veths' own).
   */
  readonly shaping: "netem" | "tbf";
  /** Removes every namespace (and so every veth, bridge and qdisc) of the cluster. Idempotent. */
  destroy(): Promise<void>;
}

/** Why this machine cannot run a cluster, or undefined if it can. */
export async function clusterUnavailable(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `network namespaces need Linux, found ${Deno.build.os}`;
  if (Deno.uid() !== 0) return `network namespaces need root, found uid ${Deno.uid()} (run with sudo)`;
  for (const tool of ["ip", "tc"]) {
    try {
      const out = await new Deno.Command(tool, { args: ["-V"], stdout: "null", stderr: "null" }).output();
      if (!out.success) return `${tool} -V failed: install iproute2`;
    } catch {
      return `${tool} is not installed: apt-get install -y iproute2`;
    }
  }
  return undefined;
}

async function sh(cmd: string, args: string[]): Promise<void> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (exit ${out.code}): ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
}

/** The processes in a namespace (none if it does not exist). */
export async function namespacePids(ns: string): Promise<string[]> {
  const out = await new Deno.Command("ip", { args: ["netns", "pids", ns], stdout: "piped", stderr: "null" })
    .output();
  return new TextDecoder().decode(out.stdout).split(/\s+/).filter((p) => p !== "");
}

/** Namespaces whose names start with `prefix`. */
export async function namespacesWith(prefix: string): Promise<string[]> {
  const out = await new Deno.Command("ip", { args: ["netns", "list"], stdout: "piped", stderr: "null" })
    .output();
  return new TextDecoder().decode(out.stdout).split("\n").map((l) => l.split(" ")[0]).filter((n) =>
    n.startsWith(prefix)
  ).sort();
}

/**
 * Builds the cluster: a switch namespace with a bridge, and per host a namespace whose `eth0` (address
 * 10.77.0.(h+1)/24) is one end of a veth whose other end is on the bridge; both ends shaped.
 *
 * @param options Hosts, rate, delay.
 * @returns The cluster; destroy it when done (it is destroyed already if this throws).
 */
export async function createCluster(options: ClusterOptions): Promise<Cluster> {
  const tag = `dcn${Deno.pid % 100000}`;
  const sw = `${tag}-sw`;
  const namespaces = Array.from({ length: options.hosts }, (_, h) => `${tag}-h${h}`);
  const addresses = namespaces.map((_, h) => `10.77.0.${h + 1}`);
  let destroyed: Promise<void> | undefined;
  let shaping: "netem" | "tbf" = "netem";
  const cluster: Cluster = {
    namespaces,
    addresses,
    switchNamespace: sw,
    tag,
    get shaping() {
      return shaping;
    },
    destroy(): Promise<void> {
      destroyed ??= removeAll();
      return destroyed;
    },
  };
  async function removeAll(): Promise<void> {
    // A process still in a namespace keeps it (and its links) alive after `ip netns del`: stop them first.
    for (const ns of [...namespaces, sw]) {
      for (const signal of ["TERM", "KILL"]) {
        const pids = await namespacePids(ns);
        if (pids.length === 0) break;
        await new Deno.Command("kill", { args: [`-${signal}`, ...pids], stdout: "null", stderr: "null" })
          .output();
        for (let i = 0; i < 20 && (await namespacePids(ns)).length > 0; i++) {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      try {
        await sh("ip", ["netns", "del", ns]);
      } catch {
        // not made yet, or gone
      }
    }
  }
  // Half the latency on each end of a link: one way crosses both. Without netem (a kernel built without
  // sch_netem), tbf limits the rate.
  const half = halfDelay(options.delay);
  const bytesPerSecond = rateBytes(options.rate);
  // The largest packet the veths hand down at once (GSO), and tbf's bucket. A bucket of one packet loses
  // tokens whenever the qdisc is dequeued late (its timer's softirq waits for a CPU), and it is dequeued late
  // all the time on a busy machine: measured here with iperf3, every host sending to the next at 1 Gb/s,
  // buckets of one 64 KiB packet gave 216 MB/s on 8 hosts in all and 155 on 2 (both ways), where a bucket of
  // two gave 950 and 238, the links' rate. So the bucket is one packet plus `jitterMs` of the rate (0.5 ms:
  // 441-449 MB/s of 500 on 4 hosts at 1 Gb/s with three busy loops competing for the two cores), and the
  // packet at most 600 µs of the rate (4 KiB at 100 Mb/s, 64 KiB from 1 Gb/s): messages of a few packets
  // feel the rate, and 8 hosts at 1 Gb/s do not run out of CPU per packet (iperf3 on 8 hosts: 950 MB/s in
  // all with 64 KiB packets, 807 with 32 KiB, 500 with 16 KiB). What the bucket lets out at once after an
  // idle link (126 KiB at 1 Gb/s, 10 KiB at 100 Mb/s) goes faster than the rate: small messages between
  // quiet hosts are quicker than on a real link.
  const gso = options.gso ?? gsoFor(bytesPerSecond);
  const burst = String(options.burst ?? Math.ceil(gso + bytesPerSecond * (options.jitterMs ?? 0.5) / 1e3));
  const shape = async (ns: string, dev: string): Promise<void> => {
    const tc = ["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"];
    if (shaping === "netem") {
      try {
        await sh("ip", [...tc, "netem", "rate", options.rate, "delay", half, "limit", "100000"]);
        return;
      } catch (e) {
        if (!/unknown/i.test((e as Error).message)) throw e;
        shaping = "tbf";
      }
    }
    await sh("ip", [...tc, "tbf", "rate", options.rate, "burst", burst, "latency", "200ms"]);
  };
  try {
    await sh("ip", ["netns", "add", sw]);
    await sh("ip", ["-n", sw, "link", "add", "br0", "type", "bridge"]);
    await sh("ip", ["-n", sw, "link", "set", "br0", "up"]);
    for (const [h, ns] of namespaces.entries()) {
      await sh("ip", ["netns", "add", ns]);
      const port = `p${h}`;
      await sh("ip", ["-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns]);
      await sh("ip", ["-n", sw, "link", "set", port, "master", "br0", "up"]);
      await sh("ip", ["-n", ns, "addr", "add", `${addresses[h]}/24`, "dev", "eth0"]);
      await sh("ip", ["-n", ns, "link", "set", "eth0", "up", "gso_max_size", String(gso)]);
      await sh("ip", ["-n", sw, "link", "set", port, "gso_max_size", String(gso)]);
      await sh("ip", ["-n", ns, "link", "set", "lo", "up"]);
      await shape(ns, "eth0");
      await shape(sw, port);
    }
    return cluster;
  } catch (e) {
    await cluster.destroy();
    throw e;
  }
}

/** Bytes per second of a tc rate (`1gbit`, `100mbit`). */
export function rateBytes(rate: string): number {
  const m = /^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$/.exec(rate);
  if (!m) {
    throw new RangeError(`Invalid rate: expected a number with kbit, mbit or gbit (1gbit), found "${rate}"`);
  }
  return (Number(m[1]) * { kbit: 1e3, mbit: 1e6, gbit: 1e9 }[m[2] as "kbit"]) / 8;
}

/** The veths' largest packet for a rate: the largest power of two within 600 µs of it, within 4-64 KiB. */
export function gsoFor(bytesPerSecond: number): number {
  let gso = 4096;
  while (gso < 65536 && gso * 2 <= bytesPerSecond * 600e-6) gso *= 2;
  return gso;
}

/** Half of a tc time (`50us` → `25us`). */
function halfDelay(delay: string): string {
  const m = /^(\d+(?:\.\d+)?)(us|ms|s)$/.exec(delay);
  if (!m) throw new RangeError(`Invalid delay: expected a number with us, ms or s (50us), found "${delay}"`);
  return `${Number(m[1]) / 2}${m[2]}`;
}

/** What one host's launcher did. */
export interface HostRun {
  /** The host. */
  host: number;
  /** The launcher's exit code. */
  code: number;
  /** Its output, stdout then stderr. */
  output: string;
}

/**
 * The JSON a rank printed after `marker` (`RESULT {...}`) in the hosts' output.
 *
 * @param runs What {@linkcode runOnCluster} returned.
 * @param marker The word before the JSON, at the start of the rank's output (after the launcher's prefix).
 * @param what What ran, for the error.
 * @returns The parsed JSON.
 * @throws {Error} With the end of the output, when a host failed or nobody printed the marker.
 */
export function resultOf(runs: readonly HostRun[], marker: string, what: string): unknown {
  const text = runs.map((r) => r.output).join("\n");
  const m = new RegExp(`${marker} (.*)$`, "m").exec(text);
  if (!m || runs.some((r) => r.code !== 0)) throw new Error(`${what} failed:\n${text.slice(-3000)}`);
  return JSON.parse(m[1]);
}

/**
 * Runs `script` on every host of `cluster`: one launcher per host in its namespace, `ranksPerHost` ranks
 * each, the store on host 0. A host whose launcher exits non-zero makes the others stop (SIGTERM).
 *
 * @param cluster The cluster.
 * @param ranksPerHost Ranks on each host (the launcher's `--nproc-per-node`, the same on every host).
 * @param script The script and its arguments.
 * @param options Extra environment for every rank, a timeout, a line callback, the launcher.
 * @returns Each host's exit code and output.
 */
export async function runOnCluster(
  cluster: Cluster,
  ranksPerHost: number,
  script: readonly string[],
  options: {
    env?: Record<string, string>;
    timeoutMs?: number;
    onLine?: (host: number, line: string) => void;
    /** The launcher to run (another checkout's, for a comparison). @default this checkout's */
    launcher?: string;
  } = {},
): Promise<HostRun[]> {
  const launcher = options.launcher ?? new URL("../cli/launch.ts", import.meta.url).pathname;
  const secret = generateSecret();
  const port = String(20000 + (Deno.pid % 20000));
  const signal = AbortSignal.timeout(options.timeoutMs ?? 600_000);
  const children: Deno.ChildProcess[] = [];
  // A host that fails stops the others (their ranks would wait for it until their timeout), as the
  // launcher stops a host's other ranks.
  const stopOthers = (failed: number): void => {
    children.forEach((c, h) => {
      if (h === failed) return;
      try {
        c.kill("SIGTERM");
      } catch {
        // already gone
      }
    });
  };
  return await Promise.all(cluster.namespaces.map(async (ns, h) => {
    const child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        ns,
        Deno.execPath(),
        "run",
        "-A",
        launcher,
        "--nnodes",
        String(cluster.namespaces.length),
        "--node-rank",
        String(h),
        "--nproc-per-node",
        String(ranksPerHost),
        "--master-addr",
        cluster.addresses[0],
        "--master-port",
        port,
        ...script,
      ],
      env: { ...options.env, [STORE_SECRET_ENV]: secret, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
      signal,
    }).spawn();
    children[h] = child;
    const collect = async (stream: ReadableStream<Uint8Array>): Promise<string> => {
      let text = "", partial = "";
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        partial += chunk;
        const lines = partial.split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) options.onLine?.(h, line);
      }
      if (partial) options.onLine?.(h, partial);
      return text;
    };
    const status = child.status.then((s) => {
      if (s.code !== 0) stopOthers(h);
      return s;
    });
    const [out, err, done] = await Promise.all([collect(child.stdout), collect(child.stderr), status]);
    return { host: h, code: done.code, output: out + err };
  }));
}

if (import.meta.main) {
  // The cluster's flags come first; everything from the script on is the script's.
  const FLAGS = ["--hosts", "--ranks-per-host", "--rate", "--delay"];
  let split = 0;
  while (split < Deno.args.length && FLAGS.includes(Deno.args[split].split("=")[0])) {
    split += Deno.args[split].includes("=") ? 1 : 2;
  }
  const { values: flags } = parseArgs({
    args: Deno.args.slice(0, split),
    options: {
      hosts: { type: "string", default: "2" },
      "ranks-per-host": { type: "string", default: "1" },
      rate: { type: "string", default: "1gbit" },
      delay: { type: "string", default: "50us" },
    },
  });
  const positionals = Deno.args.slice(split);
  if (positionals.length === 0) {
    console.error(
      "Usage: deno task cluster [--hosts N] [--ranks-per-host L] [--rate 1gbit] [--delay 50us] script.ts [args]",
    );
    Deno.exit(2);
  }
  const why = await clusterUnavailable();
  if (why !== undefined) {
    console.error(`Cannot build the emulated cluster: ${why}`);
    Deno.exit(2);
  }
  const cluster = await createCluster({ hosts: Number(flags.hosts), rate: flags.rate, delay: flags.delay });
  if (cluster.shaping === "tbf") {
    console.error(`This kernel has no netem: links limited to ${flags.rate} by tbf, with no added delay`);
  }
  let interrupted = false;
  const stop = (): void => {
    interrupted = true;
    cluster.destroy().finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  let failed = false;
  try {
    const runs = await runOnCluster(cluster, Number(flags["ranks-per-host"]), positionals, {
      onLine: (h, line) => console.log(`[host${h}] ${line}`),
    });
    for (const r of runs) {
      if (r.code !== 0) {
        failed = true;
        console.error(`host ${r.host} exited with code ${r.code}`);
      }
    }
  } finally {
    await cluster.destroy();
  }
  Deno.exit(interrupted ? 130 : failed ? 1 : 0);
}
