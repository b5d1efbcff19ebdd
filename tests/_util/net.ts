/**
 * What the tests that start worlds share: a free loopback port, and a rank's torchrun-style environment.
 *
 * @module
 */

/** A TCP port that was free on 127.0.0.1 a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}

/** `RANK`, `WORLD_SIZE`, `MASTER_ADDR` (loopback) and `MASTER_PORT` of a rank, plus `extra`. */
export function worldEnv(
  rank: number,
  size: number,
  port: number,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    RANK: String(rank),
    WORLD_SIZE: String(size),
    MASTER_ADDR: "127.0.0.1",
    MASTER_PORT: String(port),
    ...extra,
  };
}
