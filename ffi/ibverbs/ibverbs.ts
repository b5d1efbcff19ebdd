/**
 * The libibverbs library: its symbol table (the exported functions only; the data path — post send,
 * post receive, poll, notify — is static inline in verbs.h and is dispatched through the context's
 * function table in `ops.ts`), the lazy opener through the project's one locator (`DCOMM_IBVERBS_PATH`,
 * then `libibverbs.so.1` through the loader), and the errors: every failed call becomes an
 * {@linkcode IbverbsError} naming the call and errno in words.
 *
 * @module
 */
import { DistError, type DistErrorOptions, UnsupportedError } from "../../core/errors.ts";
import { errno, errnoName, libc, strerror } from "../libc/libc.ts";
import { type LibrarySpec, openLibrary } from "../locate.ts";

/** How the locator finds libibverbs. */
export const IBVERBS_LIBRARY: LibrarySpec = {
  name: "libibverbs",
  envVar: "DCOMM_IBVERBS_PATH",
  sonames: ["libibverbs.so.1", "libibverbs.so"],
  fix: "install libibverbs (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers; " +
    "RHEL: dnf install libibverbs; or MLNX_OFED/DOCA-OFED)",
};

/** The symbols bound from libibverbs, with their C declarations. */
export const IBVERBS_SYMBOLS = {
  ibv_get_device_list: {
    // struct ibv_device **ibv_get_device_list(int *num_devices);
    parameters: ["buffer"], // int *num_devices
    result: "pointer",
  },
  ibv_free_device_list: {
    // void ibv_free_device_list(struct ibv_device **list);
    parameters: ["pointer"], // struct ibv_device **list
    result: "void",
  },
  ibv_get_device_name: {
    // const char *ibv_get_device_name(struct ibv_device *device);
    parameters: ["pointer"], // struct ibv_device *device
    result: "pointer",
  },
  ibv_get_device_guid: {
    // __be64 ibv_get_device_guid(struct ibv_device *device);
    parameters: ["pointer"], // struct ibv_device *device
    result: "u64",
  },
  ibv_open_device: {
    // struct ibv_context *ibv_open_device(struct ibv_device *device);
    parameters: ["pointer"], // struct ibv_device *device
    result: "pointer",
  },
  ibv_close_device: {
    // int ibv_close_device(struct ibv_context *context);
    parameters: ["pointer"], // struct ibv_context *context
    result: "i32",
  },
  ibv_query_device: {
    // int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr);
    parameters: [
      "pointer", // struct ibv_context *context
      "buffer", // struct ibv_device_attr *device_attr (232 bytes)
    ],
    result: "i32",
  },
  ibv_query_port: {
    // int ibv_query_port(struct ibv_context *context, uint8_t port_num,
    //                    struct _compat_ibv_port_attr *port_attr);  (fills 48 bytes)
    parameters: [
      "pointer", // struct ibv_context *context
      "u8", // uint8_t port_num
      "buffer", // struct _compat_ibv_port_attr *port_attr
    ],
    result: "i32",
  },
  ibv_query_gid: {
    // int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
    parameters: [
      "pointer", // struct ibv_context *context
      "u8", // uint8_t port_num
      "i32", // int index
      "buffer", // union ibv_gid *gid (16 bytes)
    ],
    result: "i32",
  },
  ibv_alloc_pd: {
    // struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
    parameters: ["pointer"], // struct ibv_context *context
    result: "pointer",
  },
  ibv_dealloc_pd: {
    // int ibv_dealloc_pd(struct ibv_pd *pd);
    parameters: ["pointer"], // struct ibv_pd *pd
    result: "i32",
  },
  ibv_reg_mr: {
    // struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
    // (The exported symbol; the header's macro of the same name ends in the same ibv_reg_mr_iova2.)
    parameters: [
      "pointer", // struct ibv_pd *pd
      "pointer", // void *addr (host memory, or CUDA memory with the peer-memory module)
      "usize", // size_t length
      "i32", // int access
    ],
    result: "pointer",
  },
  ibv_reg_dmabuf_mr: {
    // struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
    //                                  uint64_t iova, int fd, int access);  (rdma-core >= 34)
    parameters: [
      "pointer", // struct ibv_pd *pd
      "u64", // uint64_t offset (into the dma-buf)
      "usize", // size_t length
      "u64", // uint64_t iova (the address the region is known by)
      "i32", // int fd (the dma-buf)
      "i32", // int access
    ],
    result: "pointer",
    optional: true,
  },
  ibv_dereg_mr: {
    // int ibv_dereg_mr(struct ibv_mr *mr);
    parameters: ["pointer"], // struct ibv_mr *mr
    result: "i32",
  },
  ibv_create_comp_channel: {
    // struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context);
    parameters: ["pointer"], // struct ibv_context *context
    result: "pointer",
  },
  ibv_destroy_comp_channel: {
    // int ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
    parameters: ["pointer"], // struct ibv_comp_channel *channel
    result: "i32",
  },
  ibv_create_cq: {
    // struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
    //                              struct ibv_comp_channel *channel, int comp_vector);
    parameters: [
      "pointer", // struct ibv_context *context
      "i32", // int cqe
      "pointer", // void *cq_context
      "pointer", // struct ibv_comp_channel *channel (NULL: no events)
      "i32", // int comp_vector
    ],
    result: "pointer",
  },
  ibv_destroy_cq: {
    // int ibv_destroy_cq(struct ibv_cq *cq);
    parameters: ["pointer"], // struct ibv_cq *cq
    result: "i32",
  },
  ibv_get_cq_event: {
    // int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    // (Reads the channel's fd: call it only once the fd is readable, or it blocks the thread.)
    parameters: [
      "pointer", // struct ibv_comp_channel *channel
      "buffer", // struct ibv_cq **cq
      "buffer", // void **cq_context
    ],
    result: "i32",
  },
  ibv_ack_cq_events: {
    // void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
    parameters: [
      "pointer", // struct ibv_cq *cq
      "u32", // unsigned int nevents
    ],
    result: "void",
  },
  ibv_create_qp: {
    // struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);
    parameters: [
      "pointer", // struct ibv_pd *pd
      "buffer", // struct ibv_qp_init_attr *qp_init_attr (64 bytes; cap is written back)
    ],
    result: "pointer",
  },
  ibv_modify_qp: {
    // int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    parameters: [
      "pointer", // struct ibv_qp *qp
      "buffer", // struct ibv_qp_attr *attr (144 bytes)
      "i32", // int attr_mask
    ],
    result: "i32",
  },
  ibv_query_qp: {
    // int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
    //                  struct ibv_qp_init_attr *init_attr);
    parameters: [
      "pointer", // struct ibv_qp *qp
      "buffer", // struct ibv_qp_attr *attr (144 bytes)
      "i32", // int attr_mask
      "buffer", // struct ibv_qp_init_attr *init_attr (64 bytes)
    ],
    result: "i32",
  },
  ibv_destroy_qp: {
    // int ibv_destroy_qp(struct ibv_qp *qp);
    parameters: ["pointer"], // struct ibv_qp *qp
    result: "i32",
  },
  ibv_wc_status_str: {
    // const char *ibv_wc_status_str(enum ibv_wc_status status);
    parameters: ["i32"], // enum ibv_wc_status status
    result: "pointer",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The loaded symbols of libibverbs. */
export type IbverbsSymbols = Deno.DynamicLibrary<typeof IBVERBS_SYMBOLS>["symbols"];

let library: { lib: Deno.DynamicLibrary<typeof IBVERBS_SYMBOLS>; path: string } | undefined;

/**
 * The libibverbs symbols, opening the library on the first call (the locator tries
 * `DCOMM_IBVERBS_PATH`, then `libibverbs.so.1` through the loader).
 *
 * @returns The bound symbols.
 * @throws {UnsupportedError} On an OS other than Linux.
 * @throws {LibraryNotFoundError} If libibverbs cannot be found; the message lists every path tried.
 */
export function ibverbs(): IbverbsSymbols {
  if (library !== undefined) return library.lib.symbols;
  if (Deno.build.os !== "linux") {
    throw new UnsupportedError(`Cannot use RDMA verbs on ${Deno.build.os}: libibverbs is Linux only`);
  }
  // errno is read through libc right after a failed call: open libc first, so that opening it then
  // cannot overwrite the errno being read.
  libc();
  library = openLibrary(IBVERBS_LIBRARY, IBVERBS_SYMBOLS);
  return library.lib.symbols;
}

/**
 * The path libibverbs was opened from, opening it if needed.
 *
 * @returns The path (a bare soname when the loader's search found it).
 * @throws {LibraryNotFoundError} If libibverbs cannot be found.
 */
export function ibverbsPath(): string {
  ibverbs();
  return (library as { path: string }).path;
}

/**
 * Why libibverbs cannot be opened, or `undefined` when it can (never throws).
 *
 * @returns The reason, e.g. the locator's message.
 */
export function ibverbsMissing(): string | undefined {
  try {
    ibverbs();
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/**
 * A libibverbs call failed; `errno` says why.
 *
 * @example What a failed registration says (here built by hand)
 * ```ts
 * import { DistError, IbverbsError } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * const error = new IbverbsError("ibv_reg_mr(1048576 bytes)", 12, { hint: "raise ulimit -l" });
 * assert.ok(error instanceof DistError);
 * assert.equal(error.code, "IBVERBS");
 * assert.equal(error.errno, 12);
 * assert.equal(error.message, "ibv_reg_mr(1048576 bytes) failed with ENOMEM (raise ulimit -l)");
 * ```
 */
export class IbverbsError extends DistError {
  /** The call, as `name(arguments)`. */
  readonly call: string;
  /** The errno value (0 when the call gave none). */
  readonly errno: number;

  /**
   * Builds the error of a failed call; the message says errno in words.
   *
   * @param call The call, as `name(arguments)`.
   * @param errno The errno value.
   * @param options `hint`: the errno's meaning for this call (default `strerror`), `prefix`: what was
   * being done, and the cause and code.
   */
  constructor(
    call: string,
    errno: number,
    options: DistErrorOptions & { hint?: string; prefix?: string } = {},
  ) {
    const { hint, prefix, ...rest } = options;
    const why = errno === 0
      ? `${call} failed${hint ? ` (${hint})` : ""}`
      : `${call} failed with ${errnoName(errno)} (${hint ?? strerror(errno)})`;
    super(`${prefix ? `${prefix}: ` : ""}${why}`, { code: "IBVERBS", ...rest });
    this.call = call;
    this.errno = errno;
  }
}

/**
 * There is no RDMA device to use: either shape of `ibv_get_device_list`'s "none", or no such name.
 *
 * @example What registering says when the device named is not there (or there is none)
 * ```ts
 * import { NoRdmaDeviceError, rdmaDevices, registerMemory, UnsupportedError } from "@dcomm/dcomm/rdma";
 * import assert from "node:assert/strict";
 * if (rdmaDevices().library !== undefined) { // libibverbs loads
 *   assert.throws(() => registerMemory(new Uint8Array(64), { device: "no-such-device" }), (e: unknown) => {
 *     assert.ok(e instanceof NoRdmaDeviceError && e instanceof UnsupportedError);
 *     assert.equal(e.code, "NO_RDMA_DEVICE");
 *     // "No RDMA devices: ibv_get_device_list failed with ..." or "No RDMA device named no-such-device: found ..."
 *     assert.match(e.message, /^Cannot register 64 bytes of host memory: No RDMA device/);
 *     return true;
 *   });
 * }
 * ```
 */
export class NoRdmaDeviceError extends UnsupportedError {
  /** errno of `ibv_get_device_list` when it returned NULL; 0 when it returned an empty list. */
  readonly errno: number;
  /**
   * Creates the error.
   *
   * @param message What was looked for and what was found.
   * @param options The errno and the cause.
   */
  constructor(message: string, options: DistErrorOptions & { errno?: number } = {}) {
    const { errno: code = 0, ...rest } = options;
    super(message, { code: "NO_RDMA_DEVICE", ...rest });
    this.errno = code;
  }
}

/**
 * The errno of a call that returned an int: rdma-core returns the errno value itself from most calls
 * (`ibv_modify_qp`, the destroy calls, post send/receive) and -1 with errno set from a few
 * (`ibv_query_gid`); both are handled.
 *
 * @param rc The call's return value (non-zero).
 * @returns The errno value.
 */
export function errnoOf(rc: number): number {
  return rc > 0 ? rc : errno();
}

/**
 * Throws an {@linkcode IbverbsError} if an int-returning call failed.
 *
 * @param rc The call's return value.
 * @param call The call, as `name(arguments)`.
 * @param prefix What was being done, for the message.
 * @throws {IbverbsError} If `rc` is not 0.
 */
export function checkRc(rc: number, call: string, prefix?: string): void {
  if (rc !== 0) throw new IbverbsError(call, errnoOf(rc), { prefix });
}

/**
 * Throws an {@linkcode IbverbsError} (with errno) if a pointer-returning call returned NULL.
 *
 * @param pointer The call's result.
 * @param call The call, as `name(arguments)`.
 * @param prefix What was being done, for the message.
 * @returns The pointer.
 * @throws {IbverbsError} If it is NULL.
 */
export function checkPointer(pointer: Deno.PointerValue, call: string, prefix?: string): Deno.PointerObject {
  if (pointer === null) throw new IbverbsError(call, errno(), { prefix });
  return pointer;
}

/**
 * A work completion status in words, as libibverbs says it.
 *
 * @param status An `enum ibv_wc_status` value.
 * @returns For example `"transport retry counter exceeded"`.
 */
export function wcStatusText(status: number): string {
  const text = ibverbs().ibv_wc_status_str(status);
  return text === null ? `status ${status}` : Deno.UnsafePointerView.getCString(text);
}
