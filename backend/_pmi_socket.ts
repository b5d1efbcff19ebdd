/**
 * The socket MPICH's launcher (Hydra's `mpiexec`) passes each rank for its PMI, named by `PMI_FD`: what a
 * descriptor of this process is (`/proc/self/fd`, `/proc/self/fdinfo`), and why `PMI_FD` may not name that
 * socket (a program between mpiexec and deno did not pass it on). Both the PMI client of the rendezvous
 * (`_pmi.ts`) and the mpi backend's `MPI_Init` (`mpi/_runtime.ts`) check it before they speak on it.
 *
 * @module
 */

/** What {@linkcode pmiSocketProblem} needs to know about one file descriptor of this process. */
export interface FdInfo {
  /** What `/proc/self/fd/N` links to, e.g. `"socket:[1234]"` or a file's path. */
  readonly target: string;
  /** The open flags (`flags:` of `/proc/self/fdinfo/N`), including `O_CLOEXEC` and `O_NONBLOCK`. */
  readonly flags: number;
}

const O_NONBLOCK = 0o4000;
const O_CLOEXEC = 0o2000000;

/**
 * One file descriptor of this process, from `/proc/self/fd` and `/proc/self/fdinfo`.
 *
 * @param fd The descriptor.
 * @returns Its target and flags, `null` if it is not open, `undefined` if this cannot be known here (no
 *   `/proc`, or no read permission).
 */
export function inspectFd(fd: number): FdInfo | null | undefined {
  try {
    Deno.statSync("/proc/self/fd");
  } catch {
    return undefined;
  }
  let target: string;
  try {
    target = Deno.readLinkSync(`/proc/self/fd/${fd}`);
  } catch (e) {
    return e instanceof Deno.errors.NotFound ? null : undefined;
  }
  try {
    const m = /^flags:\s*([0-7]+)/m.exec(Deno.readTextFileSync(`/proc/self/fdinfo/${fd}`));
    return m ? { target, flags: parseInt(m[1], 8) } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Why MPICH's `MPI_Init` cannot reach its launcher through `PMI_FD`, or `undefined` when it can (or this
 * cannot be known). Hydra's `mpiexec` opens a socket per rank and names its number in `PMI_FD`; the
 * process it starts must inherit it. npx and npm run deno from a node process that does not pass it on,
 * and deno then opens its own files and sockets under the same numbers: MPICH talks to one of those and
 * dies inside `MPI_Init` ("PMI_Get_appnum returned -1", "Error reading initack"). An inherited descriptor
 * cannot be close-on-exec (exec closes those), while everything deno opens is, which tells them apart.
 *
 * @param env The environment (`PMI_FD`, and `PMI_SIZE` for the suggested command).
 * @param inspect How to look at a descriptor. @default {@linkcode inspectFd}
 * @returns The message of the error to throw, naming what was expected, what was found and what to run.
 */
export function pmiSocketProblem(
  env: Readonly<Record<string, string | undefined>>,
  inspect: (fd: number) => FdInfo | null | undefined = inspectFd,
): string | undefined {
  const name = env["PMI_FD"];
  if (name === undefined || !/^\d+$/.test(name)) return undefined;
  const fd = Number(name);
  const info = inspect(fd);
  if (info === undefined) return undefined;
  let found: string;
  if (info === null) found = `fd ${fd} is not open in this process`;
  else if (info.flags & O_CLOEXEC) {
    found = `fd ${fd} is ${info.target}, which this process opened itself (it is close-on-exec, so it ` +
      `was not inherited)`;
  } else if (!info.target.startsWith("socket:")) found = `fd ${fd} is ${info.target}, not a socket`;
  else if (info.flags & O_NONBLOCK) {
    found = `fd ${fd} is a non-blocking socket, and MPICH's handshake on it fails ("Error reading initack")`;
  } else return undefined;
  return `Cannot initialise MPI: PMI_FD=${fd} should name the socket mpiexec passed to this process for ` +
    `MPICH's PMI, found ${found}. A program between mpiexec and deno (npx, npm or node) did not pass the ` +
    `socket on, and MPI_Init would fail inside MPICH ("PMI_Get_appnum returned -1"). Run the deno binary ` +
    `itself under mpiexec: ${suggestedCommand(env)}`;
}

/** `mpiexec -n N "$(npx -y deno@V eval ...)" run -A script`, with this job's N, V and script. */
function suggestedCommand(env: Readonly<Record<string, string | undefined>>): string {
  const n = env["PMI_SIZE"] && /^\d+$/.test(env["PMI_SIZE"]) ? env["PMI_SIZE"] : "N";
  let script = "script.ts";
  try {
    const main = new URL(Deno.mainModule);
    if (main.protocol === "file:") {
      const path = decodeURIComponent(main.pathname);
      const cwd = `${Deno.cwd()}/`;
      script = path.startsWith(cwd) ? path.slice(cwd.length) : path;
    } else script = main.href;
  } catch {
    // No mainModule (a worker, or no read permission for the cwd): the placeholder stays.
  }
  let binary = "";
  try {
    binary = ` (here that binary is ${Deno.execPath()})`;
  } catch {
    // No --allow-read: the path is left out.
  }
  return `mpiexec -n ${n} "$(npx -y deno@${Deno.version.deno} eval 'console.log(Deno.execPath())')" ` +
    `run -A ${script}${binary}`;
}
