/**
 * The RDMA transport's test cases: the cases every transport passes (`_transport_cases.ts`) and those of
 * its credits, registered by `rdma_test.ts` (real RDMA hardware; skipped where there is none) and by
 * `rdma_loopback_test.ts` (the loopback test double of libibverbs, which runs them anywhere gcc and
 * verbs.h are installed).
 *
 * @module
 */
import assert from "node:assert/strict";
import { TransportError } from "../../core/errors.ts";
import { MemoryStore } from "../../store/memory_store.ts";
import { RdmaTransport, type RdmaTransportOptions } from "../../transport/rdma.ts";
import { gatedTest, type GateOptions } from "../_util/skip.ts";
import { descriptor, firstWrongByte, indexOf } from "./_fixtures/_pattern.ts";
import { message, transportCases, type TransportSuite, world as sharedWorld } from "./_transport_cases.ts";

/** How the cases run on one kind of device. */
export interface RdmaSuite {
  /** Appended to each test name, e.g. `" (loopback test double)"`. */
  readonly label: string;
  /** Whether the suite can run here. */
  readonly gate: GateOptions;
  /** Options for `rank` (the device it uses, for instance). */
  readonly options: (rank: number) => Partial<RdmaTransportOptions>;
}

/** The shared cases' view of a suite. */
function shared(suite: RdmaSuite): TransportSuite<RdmaTransportOptions> {
  return {
    name: "RdmaTransport",
    kind: "rdma",
    label: suite.label,
    gate: suite.gate,
    connect: (store, options) => RdmaTransport.connect(store, { ...suite.options(options.rank), ...options }),
    neverCame: (rank) => `rank ${rank} never published its queue pair`,
  };
}

/** A world of `size` RdmaTransports of `suite` in this process, rendezvoused in memory. */
export function world(
  suite: RdmaSuite,
  size: number,
  options: Partial<RdmaTransportOptions> = {},
): Promise<{ ranks: RdmaTransport[]; store: MemoryStore } & AsyncDisposable> {
  return sharedWorld<RdmaTransportOptions, RdmaTransport>(shared(suite), size, options);
}

/**
 * Registers every case of the suite.
 *
 * @param suite The device kind, its gate and per-rank options.
 */
export function rdmaTransportCases(suite: RdmaSuite): void {
  transportCases(shared(suite));
  const test = (name: string, fn: () => Promise<void>): void =>
    gatedTest(`${name}${suite.label}`, suite.gate, fn);

  test("RdmaTransport runs with one slot of 4 KiB (every write waits for a credit)", async () => {
    await using w = await world(suite, 2, { slots: 1, slotBytes: 4096 });
    const [a, b] = w.ranks;
    const sizes = [0, 4096 - 48, 4096 - 47, 100_000, 5];
    const into = sizes.map((n) => new Uint8Array(n));
    const recvs = Promise.all(into.map((v) => b.pair(0).recv(v)));
    await Promise.all(sizes.map((n, i) => a.pair(1).send(descriptor(i), message(n, 60 + i))));
    (await recvs).forEach((desc, i) => {
      assert.equal(indexOf(desc), i);
      assert.equal(firstWrongByte(into[i], 60 + i), -1);
    });
  });

  test("RdmaTransport.connect() fails fast on both ranks when slots differ", async () => {
    await using store = new MemoryStore();
    const results = await Promise.allSettled(
      [0, 1].map((rank) =>
        RdmaTransport.connect(store, {
          ...suite.options(rank),
          rank,
          size: 2,
          slots: 4 * (rank + 1),
          timeoutMs: 5_000,
        })
      ),
    );
    const messages = results.map((r) => {
      assert.equal(r.status, "rejected");
      const error = (r as PromiseRejectedResult).reason;
      assert.ok(error instanceof TransportError, String(error));
      return error.message;
    });
    assert.deepEqual(messages, [
      "Rank 1 runs with slots 8 but rank 0 with 4",
      "Rank 0 runs with slots 4 but rank 1 with 8",
    ]);
  });
}
