/**
 * A real Slurm for tests: {@linkcode startSlurm} starts `munged`, `slurmctld` and one or two `slurmd`
 * (Debian's slurm-wlm) as root in a temporary folder of their own (configuration, munge key and socket,
 * state, spool, logs), on ports of their own, with this host as the node: `hostname -s`, and `localhost`
 * as a second node served by a second `slurmd` on the same machine (both names resolve here, so a step
 * over both is a real two-node layout of srun's). Nodes claim 8 CPUs whatever the machine has
 * (`SlurmdParameters=config_overrides`), so `srun -n 4` runs on two cores. No cgroups, no PMI by default
 * (`MpiDefault=none`), no accounting. Every wait has a timeout, and a daemon that cannot start fails the
 * test with the tail of its log.
 *
 * @module
 */

/** What a run of srun gave. */
export interface SrunResult {
  /** The exit code (srun's: non-zero when a task failed). */
  code: number;
  /** The signal that ended srun, if any (e.g. SIGTERM when the timeout was reached). */
  signal: Deno.Signal | null;
  /** Everything the tasks printed to stdout. */
  stdout: string;
  /** Everything the tasks and srun printed to stderr. */
  stderr: string;
  /** How long srun ran, in milliseconds. */
  ms: number;
}

/** Options of {@linkcode SlurmCluster.srun} and {@linkcode SlurmCluster.run}. */
export interface SrunOptions {
  /** Variables added to the command's (and so the tasks') environment. @default {} */
  env?: Record<string, string>;
  /** How long the command may run before it is stopped (SIGTERM). @default 120000 */
  timeoutMs?: number;
  /** The working folder (the job's, for sbatch). @default the test's */
  cwd?: string;
}

/** A running test cluster. */
export interface SlurmCluster {
  /** The folder of its configuration, state, spool and logs (removed when it stops). */
  readonly dir: string;
  /** The variables Slurm's commands need to reach it (`SLURM_CONF`). */
  readonly env: Readonly<Record<string, string>>;
  /** Its nodes: this host's short name first, then `localhost` when there are two. */
  readonly nodes: readonly string[];
  /**
   * Runs `srun args...` against this cluster, in a clean environment (no launcher's or Slurm's variables
   * of the calling process). Each task's output goes to files of its own (`--output`, `--error`), joined
   * in task order after srun's own: srun would interleave long lines of several tasks.
   */
  srun(args: readonly string[], options?: SrunOptions): Promise<SrunResult>;
  /** Runs another of Slurm's commands (`sbatch`, `scontrol`, ...) the same way. */
  run(cmd: string, args: readonly string[], options?: SrunOptions): Promise<SrunResult>;
  /** The last lines of every daemon's output and log, for failure messages. */
  logTail(lines?: number): string;
}

/** Options of {@linkcode startSlurm}. */
export interface StartSlurmOptions {
  /** 1: this host only; 2: and `localhost`, a second node on this machine. @default 2 */
  nodes?: 1 | 2;
  /** The CPUs each node claims. @default 8 */
  cpus?: number;
  /** How long the daemons may take to start and the nodes to become idle. @default 30000 */
  timeoutMs?: number;
}

const COMMANDS = [
  "munged",
  "slurmctld",
  "slurmd",
  "srun",
  "sbatch",
  "sinfo",
  "squeue",
  "scancel",
  "scontrol",
];

/** Whether `cmd` is an executable file in PATH (nothing is run: Slurm's clients look for a controller). */
export function onPath(cmd: string): boolean {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    try {
      const info = Deno.statSync(`${dir}/${cmd}`);
      if (info.isFile && ((info.mode ?? 0) & 0o111) !== 0) return true;
    } catch {
      // Not in this folder.
    }
  }
  return false;
}

/**
 * Why {@linkcode startSlurm} cannot run here, or `undefined` when it can.
 *
 * @returns The reason (not root, or which commands are missing and the packages that have them).
 */
export function whySlurmCannotRun(): string | undefined {
  if (Deno.build.os !== "linux") return `Slurm's daemons need Linux, found ${Deno.build.os}`;
  const missing = COMMANDS.filter((c) => !onPath(c));
  if (missing.length > 0) {
    return `${missing.join(", ")} not found in PATH (apt-get install slurm-wlm munge, run as root)`;
  }
  if (Deno.uid() !== 0) return `the test Slurm's daemons run as root, found uid ${Deno.uid()}`;
  return undefined;
}

/** Free TCP ports, found by listening on port 0 (held together so that they differ). */
function freePorts(n: number): number[] {
  const listeners = Array.from({ length: n }, () => Deno.listen({ hostname: "127.0.0.1", port: 0 }));
  const ports = listeners.map((l) => (l.addr as Deno.NetAddr).port);
  for (const l of listeners) l.close();
  return ports;
}

/** A child whose output is kept (its last 64 KiB). */
interface Daemon {
  name: string;
  child: Deno.ChildProcess;
  output: () => string;
  exited: Promise<Deno.CommandStatus>;
  done: boolean;
}

function spawnDaemon(name: string, cmd: string, args: string[], env: Record<string, string>): Daemon {
  const child = new Deno.Command(cmd, { args, env, stdin: "null", stdout: "piped", stderr: "piped" })
    .spawn();
  let text = "";
  const keep = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      text = (text + decoder.decode(chunk, { stream: true })).slice(-65536);
    }
  };
  const reading = Promise.all([keep(child.stdout), keep(child.stderr)]);
  const daemon: Daemon = {
    name,
    child,
    output: () => text,
    exited: child.status.then(async (s) => {
      daemon.done = true;
      await reading.catch(() => {});
      return s;
    }),
    done: false,
  };
  return daemon;
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}

async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** Runs a Slurm client command with a timeout. */
async function client(
  cmd: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs = 10_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const out = await new Deno.Command(cmd, {
      args,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(timeoutMs),
    }).output();
    const d = new TextDecoder();
    return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
  } catch (e) {
    return { code: -1, stdout: "", stderr: `${cmd} ${args.join(" ")}: ${(e as Error).message}` };
  }
}

/** The environment of a command run against the test cluster: ours without launchers' variables. */
function cleanEnv(extra: Record<string, string>): Record<string, string> {
  const env = Deno.env.toObject();
  for (const name of Object.keys(env)) {
    if (
      /^(SLURM_|SLURMD_|PMI_|PMIX_|OMPI_|MPI_LOCAL|DCOMM_STORE_HOSTED$|DCOMM_SLURM_PORT$)/.test(name) ||
      /^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT)$/.test(name)
    ) delete env[name];
  }
  return { ...env, ...extra };
}

/**
 * Starts a Slurm cluster of this machine and waits until every node is idle.
 *
 * @param options Nodes, CPUs per node and the start timeout.
 * @returns The cluster; dispose of it (`await using`) to cancel its jobs, stop the daemons and remove
 *   its folder.
 * @throws {Error} If a daemon exits or the nodes are not idle in time, with every daemon's log tail.
 */
export async function startSlurm(options: StartSlurmOptions = {}): Promise<SlurmCluster & AsyncDisposable> {
  const reason = whySlurmCannotRun();
  if (reason !== undefined) throw new Error(`Cannot start the test Slurm: ${reason}`);
  const timeoutMs = options.timeoutMs ?? 30_000;
  const cpus = options.cpus ?? 8;
  const host = Deno.hostname().split(".")[0];
  const nodes = options.nodes === 1 || host === "localhost" ? [host] : [host, "localhost"];
  const dir = await Deno.makeTempDir({ prefix: "dcomm-slurm-" });
  await Deno.chmod(dir, 0o755);
  for (const sub of ["munge", "state", "spool", "log", "run", "tmp"]) await Deno.mkdir(`${dir}/${sub}`);
  const key = crypto.getRandomValues(new Uint8Array(1024));
  await Deno.writeFile(`${dir}/munge/munge.key`, key, { mode: 0o600 });
  await Deno.chmod(`${dir}/munge/munge.key`, 0o600);
  const [ctldPort, ...nodePorts] = freePorts(1 + nodes.length);
  const conf = `${dir}/slurm.conf`;
  await Deno.writeTextFile(`${dir}/plugstack.conf`, "");
  await Deno.writeTextFile(
    conf,
    [
      "# The dcomm tests' Slurm (tests/_util/slurm.ts): one machine, its own ports and folders.",
      "ClusterName=dcommtest",
      `SlurmctldHost=${host}(127.0.0.1)`,
      `SlurmctldPort=${ctldPort}`,
      `SlurmdPort=${nodePorts[0]}`,
      "AuthType=auth/munge",
      "CredType=cred/munge",
      `AuthInfo=socket=${dir}/munge/munge.sock`,
      "SlurmUser=root",
      "SlurmdUser=root",
      `StateSaveLocation=${dir}/state`,
      `SlurmdSpoolDir=${dir}/spool/%n`,
      `SlurmctldPidFile=${dir}/run/slurmctld.pid`,
      `SlurmdPidFile=${dir}/run/slurmd.%n.pid`,
      `SlurmctldLogFile=${dir}/log/slurmctld.log`,
      `SlurmdLogFile=${dir}/log/slurmd.%n.log`,
      `PlugStackConfig=${dir}/plugstack.conf`,
      `TmpFS=${dir}/tmp`,
      "MailProg=/bin/true",
      "MpiDefault=none",
      "ProctrackType=proctrack/pgid",
      "TaskPlugin=task/none",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "JobCompType=jobcomp/none",
      "SchedulerType=sched/builtin",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_CPU",
      // The nodes claim more CPUs than the machine has: srun -n 4 on two cores.
      "SlurmdParameters=config_overrides",
      "ReturnToService=2",
      // Ids from a random start: two clusters at once (or one after another) derive other store ports.
      `FirstJobId=${1000 + Math.floor(Math.random() * 1_000_000)}`,
      // srun leaves the other tasks running when one fails: dcomm must notice by itself.
      "KillOnBadExit=0",
      "MinJobAge=2",
      "KillWait=2",
      "InactiveLimit=0",
      ...nodes.map((n, i) =>
        `NodeName=${n} NodeHostname=${host} NodeAddr=127.0.0.1 Port=${nodePorts[i]} CPUs=${cpus} ` +
        `RealMemory=1 State=UNKNOWN`
      ),
      `PartitionName=test Nodes=${nodes.join(",")} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES`,
      "",
    ].join("\n"),
  );
  const env = { SLURM_CONF: conf };
  const daemonEnv = cleanEnv(env);
  const daemons: Daemon[] = [];
  const logTail = (lines = 20): string => {
    const parts = daemons.map((d) => `--- ${d.name} (output)\n${tail(d.output(), lines)}`);
    let logs: string[] = [];
    try {
      logs = [...Deno.readDirSync(`${dir}/log`)].map((e) => `log/${e.name}`).sort();
    } catch {
      // The cluster stopped and its folder is gone.
    }
    for (const file of ["munge/munged.log", ...logs]) {
      try {
        parts.push(`--- ${file}\n${tail(Deno.readTextFileSync(`${dir}/${file}`), lines)}`);
      } catch {
        // Not written yet, or gone.
      }
    }
    return parts.join("\n");
  };

  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (daemons.some((d) => d.name === "slurmctld" && !d.done)) {
      // Tasks of a step whose srun was stopped would outlive it: cancel every job, wait for them to go.
      await client("scancel", ["--quiet", "--full", "--user=root"], daemonEnv);
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline) {
        const q = await client("squeue", ["-h", "-o", "%i"], daemonEnv, 5_000);
        if (q.code !== 0 || q.stdout.trim() === "") break;
        await sleep(200);
      }
    }
    // slurmd before slurmctld before munged: each needs the next to shut down cleanly.
    for (const d of [...daemons].reverse()) {
      if (d.done) continue;
      try {
        d.child.kill("SIGTERM");
      } catch {
        // Already gone.
      }
      const ended = await Promise.race([d.exited.then(() => true), sleep(10_000).then(() => false)]);
      if (!ended) {
        try {
          d.child.kill("SIGKILL");
        } catch {
          // Already gone.
        }
        await Promise.race([d.exited, sleep(5_000)]);
      }
    }
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };

  const failStart = async (why: string): Promise<never> => {
    const logs = logTail(30);
    await stop();
    throw new Error(`Cannot start the test Slurm: ${why}\n${logs}`);
  };
  /** Waits for `ready` (polled), failing when a daemon exits or the time is up. */
  const waitFor = async (what: string, ready: () => Promise<boolean> | boolean): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const dead = daemons.find((d) => d.done);
      if (dead) await failStart(`${dead.name} exited while waiting for ${what}`);
      if (await ready()) return;
      if (Date.now() > deadline) await failStart(`${what} not within ${timeoutMs} ms`);
      await sleep(200);
    }
  };

  try {
    daemons.push(spawnDaemon("munged", "munged", [
      "--foreground",
      "--force",
      `--socket=${dir}/munge/munge.sock`,
      `--key-file=${dir}/munge/munge.key`,
      `--pid-file=${dir}/munge/munged.pid`,
      `--log-file=${dir}/munge/munged.log`,
      `--seed-file=${dir}/munge/munged.seed`,
    ], daemonEnv));
    await waitFor("munged's socket", () => {
      try {
        return Deno.statSync(`${dir}/munge/munge.sock`).isSocket === true;
      } catch {
        return false;
      }
    });
    daemons.push(spawnDaemon("slurmctld", "slurmctld", ["-D", "-c", "-f", conf], daemonEnv));
    for (const node of nodes) {
      daemons.push(spawnDaemon(`slurmd ${node}`, "slurmd", ["-D", "-f", conf, "-N", node], daemonEnv));
    }
    let last = "";
    await waitFor(`the nodes ${nodes.join(", ")} to be idle`, async () => {
      const out = await client("sinfo", ["-h", "-N", "-o", "%N %T"], daemonEnv, 5_000);
      last = out.stdout + out.stderr;
      const states = new Map(
        out.stdout.trim().split("\n").map((l) => l.trim().split(/\s+/) as [string, string]),
      );
      return nodes.every((n) => states.get(n) === "idle");
    }).catch((e) => {
      throw new Error(`${(e as Error).message}\n--- last sinfo\n${last}`);
    });
  } catch (e) {
    await stop();
    throw e;
  }

  const run = async (
    cmd: string,
    args: readonly string[],
    runOptions: SrunOptions = {},
  ): Promise<SrunResult> => {
    const t0 = performance.now();
    const out = await new Deno.Command(cmd, {
      args: [...args],
      env: cleanEnv({ ...env, ...runOptions.env }),
      clearEnv: true,
      cwd: runOptions.cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(runOptions.timeoutMs ?? 120_000),
    }).output();
    const d = new TextDecoder();
    return {
      code: out.code,
      signal: out.signal,
      stdout: d.decode(out.stdout),
      stderr: d.decode(out.stderr),
      ms: performance.now() - t0,
    };
  };
  let runs = 0;
  return {
    dir,
    env,
    nodes,
    logTail,
    run,
    async srun(args: readonly string[], srunOptions?: SrunOptions): Promise<SrunResult> {
      // srun forwards the tasks' output in 4 KiB pieces, so long lines of several tasks interleave: each
      // task writes files of its own instead, read back in task order.
      const out = `${dir}/srun/${++runs}`;
      await Deno.mkdir(out, { recursive: true });
      const r = await run("srun", [`--output=${out}/%t.out`, `--error=${out}/%t.err`, ...args], srunOptions);
      const tasks = [...Deno.readDirSync(out)].map((e) => e.name).sort((a, b) => parseInt(a) - parseInt(b));
      const read = (ext: string): string =>
        tasks.filter((n) => n.endsWith(ext)).map((n) => Deno.readTextFileSync(`${out}/${n}`)).join("");
      return { ...r, stdout: r.stdout + read(".out"), stderr: r.stderr + read(".err") };
    },
    [Symbol.asyncDispose]: stop,
  };
}
