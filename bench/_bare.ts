/**
 * What the bare-socket rank scripts (`_bare_rank.ts`, `_layers_rank.ts`) and the interleaved ones share:
 * a mesh of plain TCP sockets, the loops that move bytes on them, and the timing of a block of calls with
 * the machine's CPUs read around it.
 *
 * @module
 */

/** Writes every byte of `data`. */
export async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  for (let off = 0; off < data.length;) off += await conn.write(data.subarray(off));
}

/** Fills `into` from `conn`; throws if the peer closes first. */
export async function readExact(conn: Deno.Conn, into: Uint8Array): Promise<void> {
  for (let off = 0; off < into.length;) {
    const got = await conn.read(into.subarray(off));
    if (got === null) throw new Error("A peer closed its socket mid-message");
    off += got;
  }
}

/** `a mod n` in `[0, n)`. */
export const mod = (a: number, n: number): number => ((a % n) + n) % n;

/** `dst += src` over fp32 elements, a JavaScript loop (the sum a bare implementation would write). */
export function addFloat32(dst: Uint8Array, src: Uint8Array): void {
  const a = new Float32Array(dst.buffer, dst.byteOffset, dst.length / 4);
  const b = new Float32Array(src.buffer, src.byteOffset, src.length / 4);
  for (let i = 0; i < a.length; i++) a[i] += b[i];
}

/** Sends `out` on `conns[to]` while receiving `into` from `conns[from]`. */
export async function exchange(
  conns: readonly Deno.Conn[],
  to: number,
  out: Uint8Array,
  from: number,
  into: Uint8Array,
): Promise<void> {
  await Promise.all([writeAll(conns[to], out), readExact(conns[from], into)]);
}

/**
 * Ring all-reduce (sum) of the fp32 `buf` among `ring` (ranks, this one at index `me`) over bare sockets:
 * reduce-scatter, then all-gather, one segment per step. `tmp` takes each incoming segment (a new buffer
 * per call without it).
 */
export async function bareRingAllReduce(
  conns: readonly Deno.Conn[],
  buf: Uint8Array,
  ring: readonly number[],
  me: number,
  tmp?: Uint8Array,
): Promise<void> {
  const p = ring.length, right = ring[mod(me + 1, p)], left = ring[mod(me - 1, p)];
  const size = buf.length / p, incoming = tmp ?? new Uint8Array(size);
  const part = (c: number): Uint8Array => buf.subarray(c * size, (c + 1) * size);
  for (let s = 0; s < p - 1; s++) {
    await exchange(conns, right, part(mod(me - s, p)), left, incoming);
    addFloat32(part(mod(me - s - 1, p)), incoming);
  }
  for (let s = 0; s < p - 1; s++) {
    await exchange(conns, right, part(mod(me + 1 - s, p)), left, part(mod(me - s, p)));
  }
}

/**
 * A socket to every other rank: `listener` accepts the higher ranks, which say who they are; this rank
 * connects to each lower one at `addressOf(j)`, retrying for 30 s while its listener comes up.
 *
 * @returns The sockets by peer rank (none for this rank), with Nagle off.
 */
export async function bareMesh(
  rank: number,
  size: number,
  listener: Deno.Listener<Deno.TcpConn>,
  addressOf: (peer: number) => Promise<{ hostname: string; port: number }>,
): Promise<Deno.TcpConn[]> {
  const conns: Deno.TcpConn[] = new Array(size);
  const accepting = (async () => {
    for (let k = rank + 1; k < size; k++) {
      const conn = await listener.accept();
      const id = new Uint8Array(4);
      await readExact(conn, id);
      conns[new DataView(id.buffer).getUint32(0, true)] = conn;
    }
  })();
  for (let j = 0; j < rank; j++) {
    const address = await addressOf(j);
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        const conn = await Deno.connect(address);
        const id = new Uint8Array(4);
        new DataView(id.buffer).setUint32(0, rank, true);
        await writeAll(conn, id);
        conns[j] = conn;
        break;
      } catch (error) {
        if (Date.now() > deadline) {
          throw new Error(`Rank ${rank} could not reach rank ${j}`, { cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }
  await accepting;
  listener.close();
  for (const conn of conns) conn?.setNoDelay(true);
  return conns;
}

/** Clock ticks of all the machine's CPUs, and the wall time, over timed blocks. */
export interface BlockCpu {
  /** Ticks not idle. */
  busy: number;
  /** All ticks. */
  total: number;
  /** Wall seconds. */
  seconds: number;
}

/** Busy and total clock ticks of all CPUs since boot (`/proc/stat`, which network namespaces share). */
function cpuTicks(): { busy: number; total: number } {
  const fields = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/).slice(1, 9)
    .map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - fields[3] - fields[4], total };
}

/**
 * Runs `calls` timed calls of `run` back to back: each call's seconds onto `times`, and, with `cpu`, the
 * CPUs' ticks and the block's wall time added to it.
 */
export async function timedBlock(
  run: () => Promise<unknown>,
  calls: number,
  times: number[],
  cpu?: BlockCpu,
): Promise<void> {
  const before = cpu === undefined ? undefined : cpuTicks();
  const start = performance.now();
  for (let i = 0; i < calls; i++) {
    const t0 = performance.now();
    await run();
    times.push((performance.now() - t0) / 1000);
  }
  if (cpu !== undefined && before !== undefined) {
    const after = cpuTicks();
    cpu.busy += after.busy - before.busy;
    cpu.total += after.total - before.total;
    cpu.seconds += (performance.now() - start) / 1000;
  }
}

/** The share of the CPUs busy over the blocks, and the whole machine's CPU seconds per call. */
export function cpuPerCall(cpu: BlockCpu, calls: number): { busy: number; cpuSeconds: number } {
  const busy = cpu.total > 0 ? cpu.busy / cpu.total : 0;
  return { busy, cpuSeconds: (busy * navigator.hardwareConcurrency * cpu.seconds) / calls };
}
