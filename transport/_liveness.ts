/**
 * Whether a peer process has exited, for the transports whose peers are processes of this host.
 *
 * @module
 */
import { processExists } from "../ffi/libc/libc.ts";

// Whether /proc/<pid>/stat may be read without a permission prompt, to tell zombies from live processes.
let procReadable: boolean | undefined;

/**
 * Whether `pid` has exited: gone, or a zombie its parent has not reaped yet.
 *
 * @param pid The process id.
 * @returns True once the process is no longer running.
 */
export function hasExited(pid: number): boolean {
  if (!processExists(pid)) return true;
  procReadable ??= Deno.permissions.querySync({ name: "read", path: "/proc" }).state === "granted";
  if (!procReadable) return false;
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const state = stat[stat.lastIndexOf(")") + 2];
    return state === "Z" || state === "X";
  } catch {
    return !processExists(pid);
  }
}
