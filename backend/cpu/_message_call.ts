/**
 * A call run as a message algorithm over the transport, on the communication thread: its descriptor
 * (numbered in the group's one sequence, the segment's where the group has a block in it), the
 * communicator that stamps the descriptor on every message and checks every message it receives, and the
 * {@linkcode CollectiveContext} the algorithm runs on.
 *
 * @module
 */
import { silentRanksText } from "./_heartbeat.ts";
import { dtypeSize, type ReduceOp } from "../../core/dtype.ts";
import { MismatchError, TimeoutError } from "../../core/errors.ts";
import type { CollectiveContext, Comm } from "../../collectives/comm.ts";
import { disseminationBarrier } from "../../collectives/dissemination_barrier.ts";
import type { Transport } from "../../transport/transport.ts";
import { ANY_SOURCE } from "../process_group.ts";
import { type WorkReport, workReport } from "../work.ts";
import {
  type CallDescriptor,
  countsMark,
  decodeDescriptor,
  describeCall,
  encodeDescriptor,
  sameDescriptor,
} from "./_descriptor.ts";
import { ALGORITHM_NAMES, runAlgorithm } from "./_dispatch.ts";
import type { GroupState } from "./_groups.ts";
import { type OpRequest, rootedCollective } from "./_protocol.ts";
import type { Reducer } from "./_reducer.ts";
import type { ScratchPool } from "./_scratch.ts";
import type { SegmentExecutor } from "./_segment_exec.ts";

/** What every call over messages needs of the engine that runs it. */
export interface MessageEnv {
  /** Connected to every rank. */
  readonly transport: Transport;
  /** Reductions in WASM. */
  readonly reducer: Reducer;
  /** The pipelining chunk (bytes). */
  readonly chunkBytes: number;
  /** Whether messages carry the call's descriptor for the mismatch check. */
  readonly checkCalls: boolean;
  /** The algorithms' scratch, given back by the engine after each call. */
  readonly scratch: ScratchPool;
  /** The host segment, whose sequence numbers the calls of groups with a block in it. */
  readonly segment: SegmentExecutor | undefined;
  /** A tensor's bytes as this thread reaches them. */
  view(region: OpRequest["input"]): Uint8Array | undefined;
}

/** One call over messages, from its descriptor to its report. */
export class MessageCall {
  /** The call's descriptor, as its messages carry it (a receive's from any rank: once its sender is known). */
  descriptor: CallDescriptor;
  /** `performance.now()` when it was made. */
  readonly began: number;
  readonly #startedAt: number;
  readonly #env: MessageEnv;
  #op: OpRequest;
  readonly #group: GroupState;
  readonly #algorithm: string;
  #ctx: CollectiveContext | undefined;
  /** A receive from any rank whose sender is not known yet. */
  #anySource: boolean;
  readonly #waitingOn = new Set<number>();
  #bytesSent = 0;

  /**
   * @param env The engine's.
   * @param op The call.
   * @param group Its group.
   * @param algorithm The algorithm it runs (resolved).
   */
  constructor(env: MessageEnv, op: OpRequest, group: GroupState, algorithm: string) {
    this.#env = env;
    this.#op = op;
    this.#group = group;
    this.#algorithm = algorithm;
    this.#anySource = op.collective === "recv" && op.root === ANY_SOURCE;
    if (this.#anySource) {
      // Numbered once the sender is known (per direction); until then, every other member is waited on.
      this.descriptor = { ...descriptorOf({ ...op, root: group.index }, group, algorithm, false), root: -1 };
      for (const rank of group.ranks) if (rank !== env.transport.rank) this.#waitingOn.add(rank);
    } else {
      this.descriptor = this.#prepare(op);
    }
    this.#startedAt = performance.timeOrigin + performance.now();
    this.began = performance.now();
  }

  /** Numbers the call, and makes the communicator and context its algorithm runs on. */
  #prepare(op: OpRequest): CallDescriptor {
    const env = this.#env, group = this.#group, algorithm = this.#algorithm;
    const desc = descriptorOf(op, group, algorithm);
    const p2p = op.collective === "send" || op.collective === "recv";
    if (group.segment && !p2p) {
      // Numbered in the group's one sequence of calls, which the segment's calls share.
      desc.seq = (env.segment as SegmentExecutor).beginCall(group.id, (seq) => ({ ...desc, seq })) >>> 0;
    }
    const encoded = encodeDescriptor(desc, ALGORITHM_NAMES);
    const waitingOn = this.#waitingOn;
    const transport = env.transport;
    const checkCalls = env.checkCalls;
    const comm: Comm = {
      rank: group.index,
      size: group.ranks.length,
      send: async (peer: number, data: Uint8Array): Promise<void> => {
        this.#bytesSent += data.byteLength;
        await transport.pair(group.ranks[peer]).send(encoded, data);
      },
      async recv(peer: number, into: Uint8Array): Promise<void> {
        const from = group.ranks[peer];
        waitingOn.add(from);
        await transport.pair(from).recv(into, (got, payloadBytes) => {
          if (checkCalls && !sameDescriptor(got, encoded)) {
            throw mismatch(from, decodeDescriptor(got, ALGORITHM_NAMES), transport.rank, desc);
          }
          if (payloadBytes !== into.byteLength) {
            throw new MismatchError(
              `Rank ${from} sent ${payloadBytes} bytes but rank ${transport.rank} expected ${into.byteLength} ` +
                `in ${describeCall(desc)}`,
            );
          }
        });
        waitingOn.delete(from);
      },
    };
    // The ordered algorithms fold avg as the kernels' avg (the sum scaled once, as the segment's plans do).
    const reducer = env.reducer, dtype = op.dtype;
    const reduceOp = algorithm === "ordered" ? op.op : reduceOpOf(op.op);
    this.#ctx = {
      comm,
      elemSize: dtypeSize(op.dtype),
      chunkBytes: env.chunkBytes,
      reduce: (dst, src) => reducer.reduce(dtype, reduceOp, dst, src),
      reduceMany: (dst, srcs) => reducer.reduceMany(dtype, reduceOp, dst, srcs),
      scratch: (n) => env.scratch.take(n),
      hosts: group.hosts,
    };
    return desc;
  }

  /**
   * The member whose send to this rank arrives first: a probe on every other member's pair, the first
   * header that is this group's send to this rank wins (its other checks are the receive's own), and the
   * other probes are withdrawn. A member whose next message is something else is not sending to this
   * rank now (messages between two ranks are in order), and is passed over.
   */
  async #firstSender(): Promise<number> {
    const group = this.#group, transport = this.#env.transport;
    const peers = group.ranks.filter((rank) => rank !== transport.rank);
    const { promise, resolve } = Promise.withResolvers<number>();
    // Senders whose message is already here: the one that came first wins (not the lowest rank, which
    // would starve the others, and keep a rank from ever reading a dead peer's last message).
    const here: { rank: number; at: number }[] = [];
    let looking = true;
    for (const rank of peers) {
      transport.pair(rank).probe().then((header) => {
        const d = decodeDescriptor(header.desc, ALGORITHM_NAMES);
        if (!(d.collective === "send" && d.group === group.id && d.root === group.index)) {
          this.#waitingOn.delete(rank);
        } else if (looking) here.push({ rank, at: header.arrivedAt ?? Infinity });
        else resolve(rank);
      }, () => {}); // a failed transport fails the call through the engine
    }
    // The probes of messages already here settle within these turns of the microtask queue.
    for (let turn = 0; turn < 4; turn++) await null;
    looking = false;
    if (here.length > 0) resolve(here.reduce((a, b) => (b.at < a.at ? b : a)).rank);
    try {
      return group.ranks.indexOf(await promise);
    } finally {
      for (const rank of peers) transport.pair(rank).cancelProbe();
    }
  }

  /** The error of the call timed out now, naming the ranks it waits for. */
  timedOut(): TimeoutError {
    const peers = [...this.#waitingOn];
    const waiting = peers.length ? `, waiting for rank ${peers.join(", rank ")}` : "";
    const d = this.descriptor;
    const call = this.#anySource
      ? `recv(${d.count} × ${d.dtype}) from ANY_SOURCE in group ${d.group}`
      : describeCall(d);
    return new TimeoutError(
      `Timed out after ${this.#op.timeoutMs} ms in ${call} on rank ${this.#env.transport.rank}${waiting}` +
        silentRanksText(),
    );
  }

  /** Runs the algorithm on the call's tensors (and divides for `avg`). */
  async run(): Promise<void> {
    if (this.#anySource) {
      this.#op = { ...this.#op, root: await this.#firstSender() };
      this.descriptor = this.#prepare(this.#op);
      this.#anySource = false;
    }
    const op = this.#op, ctx = this.#ctx as CollectiveContext, env = this.#env;
    if (
      env.checkCalls && ctx.comm.size > 1 && rootedCollective(op.collective)
    ) {
      // Ranks that disagree on the root may each wait for a message the other never sends, or each
      // finish having only sent: they first agree on the call (its descriptor, root included) in a
      // dissemination round, which no rank leaves until every rank's descriptor has matched along the
      // way. `checkCalls: false` saves its ⌈log2 n⌉ empty messages.
      await disseminationBarrier(ctx);
    }
    await runAlgorithm(ctx, op, this.#algorithm, { input: env.view(op.input), output: env.view(op.output) });
    if (op.op === "avg" && this.#algorithm !== "ordered") this.#average();
  }

  /** The report of the call, done now; counts it in its group's sequence. */
  report(): WorkReport {
    const t1 = performance.now(), op = this.#op;
    if (op.collective !== "send" && op.collective !== "recv") this.#group.seq++;
    return workReport({
      collective: op.collective,
      algorithm: this.#algorithm,
      transport: this.#env.transport.kind,
      bytes: op.count * dtypeSize(op.dtype),
      bytesSent: this.#bytesSent,
      timeMs: t1 - this.began,
      startedAt: this.#startedAt,
      finishedAt: performance.timeOrigin + t1,
      peer: op.collective === "send" || op.collective === "recv" ? op.root : undefined,
    });
  }

  #average(): void {
    const op = this.#op, group = this.#group;
    const target = op.collective === "allReduce"
      ? op.input
      : op.collective === "reduce"
      ? (group.index === op.root ? op.input : undefined)
      : op.collective === "reduceScatter"
      ? op.output
      : undefined;
    const v = this.#env.view(target);
    if (v) this.#env.reducer.divide(op.dtype, v, group.ranks.length);
  }
}

function reduceOpOf(op: ReduceOp): ReduceOp {
  // avg is a sum that the engine divides once the algorithm is done.
  return op === "avg" ? "sum" : op;
}

/**
 * The descriptor of a call over messages; send/recv are numbered per direction (`count`: whether this
 * call takes its number).
 */
function descriptorOf(op: OpRequest, group: GroupState, algorithm: string, count = true): CallDescriptor {
  if (op.collective === "send" || op.collective === "recv") {
    // Both ends describe the message as the sender's call, numbered per direction.
    const sending = op.collective === "send";
    const counter = sending ? group.sent : group.received;
    const seq = counter.get(op.root) ?? 0;
    if (count) counter.set(op.root, seq + 1);
    return {
      group: group.id,
      seq,
      collective: "send",
      dtype: op.dtype,
      op: "sum",
      algorithm: "",
      root: sending ? op.root : group.index,
      count: op.count,
      servers: 0,
    };
  }
  return {
    group: group.id,
    seq: group.seq,
    collective: op.collective,
    dtype: op.dtype,
    op: op.op,
    algorithm,
    root: rootedCollective(op.collective) ? op.root : 0,
    count: op.count,
    servers: op.counts !== undefined
      ? countsMark(op)
      : algorithm === "ps"
      ? op.servers ?? group.ranks.length
      : 0,
    stage: op.stage ?? 0,
  };
}

function mismatch(from: number, theirs: CallDescriptor, me: number, mine: CallDescriptor): MismatchError {
  const call = (d: CallDescriptor, rank: number): string =>
    d.collective === "send" && mine.collective === "send" && rank === me
      ? `expected recv(${d.count} × ${d.dtype}) #${d.seq} from rank ${from} in group ${d.group}`
      : `called ${describeCall(d)}`;
  return new MismatchError(
    `Mismatched calls: rank ${from} ${call(theirs, from)} but rank ${me} ${call(mine, me)}`,
  );
}
