/**
 * The process's limit on open files (`ulimit -n`), which the store server's connection cap and the TCP
 * transport's socket count stay below.
 *
 * @module
 */

/**
 * The soft limit on open files, from `/proc/self/limits` (Linux).
 *
 * @returns The limit (`Infinity` for "unlimited"), or `undefined` where it cannot be read (not Linux, no
 *   `/proc`, or no permission to read it).
 */
export function openFileLimit(): number | undefined {
  const path = "/proc/self/limits";
  try {
    if (Deno.build.os !== "linux") return undefined;
    if (Deno.permissions.querySync({ name: "read", path }).state !== "granted") return undefined;
    const soft = /^Max open files\s+(\d+|unlimited)/m.exec(Deno.readTextFileSync(path))?.[1];
    if (soft === undefined) return undefined;
    return soft === "unlimited" ? Infinity : Number(soft);
  } catch {
    return undefined;
  }
}
