/**
 * The groups as the engine knows them: the world, the groups `newGroup` registered (ids counting up from
 * 1, in turn with the calls), and the sub-groups the engine makes within a group for a compressed
 * all-reduce between hosts (ids above all those, derived alike on every rank).
 *
 * @module
 */
import { DistError } from "../../core/errors.ts";
import { groupUsesSegment } from "./_route.ts";

/** A group as the engine knows it. */
export interface GroupState {
  /** The group id, the same on every rank. */
  readonly id: number;
  /** Global ranks of the members, in group order. */
  readonly ranks: readonly number[];
  /** This rank's index in `ranks`. */
  readonly index: number;
  /** Calls issued in this group so far. */
  seq: number;
  /** The host of each member (the world's host map in group order), or undefined where unknown. */
  readonly hosts: readonly number[] | undefined;
  /** Whether the group's calls may run through the host segment (and are numbered in its sequence). */
  readonly segment: boolean;
  /** Point-to-point messages sent to / received from each group rank so far. */
  readonly sent: Map<number, number>;
  readonly received: Map<number, number>;
}

/** The first id of the sub-groups: above every id newGroup hands out (those count up from 1). */
const SUBGROUPS = 0x40000000;
/** Sub-groups per parent group. */
const PER_PARENT = 256;

/** The engine's groups, by id. */
export class EngineGroups {
  readonly #groups = new Map<number, GroupState>();
  readonly #rank: number;
  readonly #hosts: readonly number[] | undefined;
  readonly #segment: boolean;

  /**
   * @param rank This rank, in the world.
   * @param hosts The host index of every rank of the world, if known.
   * @param segment Whether the world has a host segment.
   */
  constructor(rank: number, hosts: readonly number[] | undefined, segment: boolean) {
    this.#rank = rank;
    this.#hosts = hosts;
    this.#segment = segment;
  }

  /**
   * Registers a group.
   *
   * @param id The group id (the same on every rank).
   * @param ranks The global ranks of the members.
   * @returns The group.
   */
  add(id: number, ranks: readonly number[]): GroupState {
    const hosts = this.#hosts;
    const group: GroupState = {
      id,
      ranks,
      index: ranks.indexOf(this.#rank),
      hosts: hosts && ranks.map((r) => hosts[r]),
      segment: groupUsesSegment(this.#segment, id),
      seq: 0,
      sent: new Map(),
      received: new Map(),
    };
    this.#groups.set(id, group);
    return group;
  }

  /**
   * A registered group.
   *
   * @param id Its id.
   * @returns The group.
   * @throws {DistError} If this rank never registered it.
   */
  get(id: number): GroupState {
    const group = this.#groups.get(id);
    if (!group) throw new DistError(`Unknown group ${id}: newGroup() was not called on this rank`);
    return group;
  }

  /**
   * The sub-group `key` of `parent` with these members, registered on first use: its id is derived from
   * the parent's and the key, so every member names it alike without a word exchanged.
   *
   * @param parent The group it is within.
   * @param key Its name there, 0 to 255.
   * @param ranks Its members, global ranks in its order.
   * @returns The group.
   * @throws {RangeError} If the key is out of range.
   */
  within(parent: GroupState, key: number, ranks: readonly number[]): GroupState {
    if (!(Number.isInteger(key) && key >= 0 && key < PER_PARENT)) {
      throw new RangeError(
        `Invalid sub-group key: expected an integer in 0..${PER_PARENT - 1}, found ${key}`,
      );
    }
    const id = SUBGROUPS + parent.id * PER_PARENT + key;
    return this.#groups.get(id) ?? this.add(id, ranks);
  }
}
