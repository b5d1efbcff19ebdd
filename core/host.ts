/**
 * The identity of the host this process runs on, which the cpu backend's rendezvous publishes and the
 * sharded trainer (`zero/`) groups ranks by.
 *
 * @module
 */

/**
 * An identity shared by the processes of one host: one booted machine (its boot id) and one network
 * namespace (processes in different namespaces reach each other only over a network, as different hosts
 * do; the emulated cluster of `bench/cluster.ts` is such namespaces). `DCOMM_HOST_ID` overrides it, as
 * `NCCL_HOSTID` does NCCL's: ranks with different values count as different hosts (and talk over TCP).
 */
export function hostIdentity(): string {
  try {
    const forced = Deno.env.get("DCOMM_HOST_ID");
    if (forced) return `forced/${forced}`;
  } catch {
    // no --allow-env: the machine's identity
  }
  let boot: string;
  try {
    boot = Deno.readTextFileSync("/proc/sys/kernel/random/boot_id").trim();
  } catch {
    boot = Deno.hostname();
  }
  try {
    return `${boot}/${Deno.readLinkSync("/proc/self/ns/net")}`;
  } catch {
    return boot; // no /proc (or no read permission): the boot id alone
  }
}
