/**
 * The symbol table of NCCL (`libnccl.so.2`): the whole API of `nccl.h` 2.30, each parameter commented with
 * its C declaration. Every function returns `ncclResult_t` (i32) unless noted. Functions newer than 2.7 are
 * `optional: true` (a missing one resolves to `null`, which the feature gates report); the `pnccl*`
 * profiling aliases are not bound.
 *
 * `ncclUniqueId` is a 128-byte struct passed BY VALUE to the init functions; Deno passes a struct
 * argument from a buffer of exactly that many bytes (and does not check the length: always pass 128).
 *
 * @module
 */

/** `ncclUniqueId` passed by value: 128 bytes (16 × u64; the C type is `char internal[128]`). */
export const NCCL_UNIQUE_ID_STRUCT = {
  struct: [
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
    "u64",
  ],
} as const;

/**
 * The symbols bound from NCCL, each parameter commented with its C declaration.
 *
 * @example The symbols newer than NCCL 2.7, which resolve to `null` on older libraries
 * ```ts
 * import { NCCL_SYMBOLS } from "@dcomm/dcomm/nccl";
 * import assert from "node:assert/strict";
 * const optional = Object.entries(NCCL_SYMBOLS).filter(([, s]) => "optional" in s && s.optional);
 * assert.ok(optional.some(([name]) => name === "ncclCommSplit")); // 2.18
 * assert.equal(NCCL_SYMBOLS.ncclAllReduce.parameters.length, 7); // sendbuff, recvbuff, count, ..., stream
 * ```
 */
export const NCCL_SYMBOLS = {
  // ---- Versions, ids and errors ----
  ncclGetVersion: {
    // ncclResult_t ncclGetVersion(int *version);
    parameters: [
      "buffer", // int *version
    ],
    result: "i32",
  },
  ncclGetUniqueId: {
    // ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
    parameters: [
      "buffer", // ncclUniqueId *uniqueId (128 bytes)
    ],
    result: "i32",
  },
  ncclGetErrorString: {
    // const char *ncclGetErrorString(ncclResult_t result);
    parameters: [
      "i32", // ncclResult_t result
    ],
    result: "pointer",
  },
  ncclGetLastError: {
    // const char *ncclGetLastError(ncclComm_t comm);  (2.13; comm may be NULL)
    parameters: [
      "pointer", // ncclComm_t comm
    ],
    result: "pointer",
    optional: true,
  },

  // ---- Communicators ----
  ncclCommInitRank: {
    // ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
    parameters: [
      "buffer", // ncclComm_t *comm
      "i32", // int nranks
      NCCL_UNIQUE_ID_STRUCT, // ncclUniqueId commId (by value)
      "i32", // int rank
    ],
    result: "i32",
  },
  ncclCommInitRankConfig: {
    // ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
    //                                     ncclConfig_t *config);  (2.14)
    parameters: [
      "buffer", // ncclComm_t *comm
      "i32", // int nranks
      NCCL_UNIQUE_ID_STRUCT, // ncclUniqueId commId (by value)
      "i32", // int rank
      "buffer", // ncclConfig_t *config
    ],
    result: "i32",
    optional: true,
  },
  ncclCommInitAll: {
    // ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
    parameters: [
      "buffer", // ncclComm_t *comm (ndev handles)
      "i32", // int ndev
      "buffer", // const int *devlist (NULL: devices 0..ndev-1)
    ],
    result: "i32",
  },
  ncclCommInitRankScalable: {
    // ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
    //                                       ncclUniqueId *commIds, ncclConfig_t *config);  (2.23)
    parameters: [
      "buffer", // ncclComm_t *newcomm
      "i32", // int nranks
      "i32", // int myrank
      "i32", // int nId
      "buffer", // ncclUniqueId *commIds (nId × 128 bytes)
      "buffer", // ncclConfig_t *config
    ],
    result: "i32",
    optional: true,
  },
  ncclCommSplit: {
    // ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
    //                            ncclConfig_t *config);  (2.18; config NULL: inherit the parent's)
    parameters: [
      "pointer", // ncclComm_t comm
      "i32", // int color (NCCL_SPLIT_NOCOLOR: no new communicator)
      "i32", // int key
      "buffer", // ncclComm_t *newcomm
      "buffer", // ncclConfig_t *config
    ],
    result: "i32",
    optional: true,
  },
  ncclCommShrink: {
    // ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
    //                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);  (2.27)
    parameters: [
      "pointer", // ncclComm_t comm
      "buffer", // int *excludeRanksList
      "i32", // int excludeRanksCount
      "buffer", // ncclComm_t *newcomm
      "buffer", // ncclConfig_t *config
      "i32", // int shrinkFlags
    ],
    result: "i32",
    optional: true,
  },
  ncclCommGrow: {
    // ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
    //                           ncclComm_t *newcomm, ncclConfig_t *config);  (2.29)
    parameters: [
      "pointer", // ncclComm_t comm (NULL on a joining rank)
      "i32", // int nRanks
      "buffer", // const ncclUniqueId *uniqueId
      "i32", // int rank (-1 on existing ranks)
      "buffer", // ncclComm_t *newcomm
      "buffer", // ncclConfig_t *config
    ],
    result: "i32",
    optional: true,
  },
  ncclCommGetUniqueId: {
    // ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);  (2.29, for ncclCommGrow)
    parameters: [
      "pointer", // ncclComm_t comm
      "buffer", // ncclUniqueId *uniqueId
    ],
    result: "i32",
    optional: true,
  },
  ncclCommFinalize: {
    // ncclResult_t ncclCommFinalize(ncclComm_t comm);  (2.14)
    parameters: [
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
    optional: true,
  },
  ncclCommDestroy: {
    // ncclResult_t ncclCommDestroy(ncclComm_t comm);
    parameters: [
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
  },
  ncclCommAbort: {
    // ncclResult_t ncclCommAbort(ncclComm_t comm);  (2.4)
    parameters: [
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
  },
  ncclCommRevoke: {
    // ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);  (2.28.7)
    parameters: [
      "pointer", // ncclComm_t comm
      "i32", // int revokeFlags (NCCL_REVOKE_DEFAULT = 0)
    ],
    result: "i32",
    optional: true,
  },
  ncclCommGetAsyncError: {
    // ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);  (2.4)
    parameters: [
      "pointer", // ncclComm_t comm
      "buffer", // ncclResult_t *asyncError
    ],
    result: "i32",
  },
  ncclCommCount: {
    // ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
    parameters: [
      "pointer", // const ncclComm_t comm
      "buffer", // int *count
    ],
    result: "i32",
  },
  ncclCommCuDevice: {
    // ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
    parameters: [
      "pointer", // const ncclComm_t comm
      "buffer", // int *device
    ],
    result: "i32",
  },
  ncclCommUserRank: {
    // ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
    parameters: [
      "pointer", // const ncclComm_t comm
      "buffer", // int *rank
    ],
    result: "i32",
  },
  ncclCommSuspend: {
    // ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);  (2.29.7)
    parameters: [
      "pointer", // ncclComm_t comm
      "i32", // int flags (NCCL_SUSPEND_MEM = 1)
    ],
    result: "i32",
    optional: true,
  },
  ncclCommResume: {
    // ncclResult_t ncclCommResume(ncclComm_t comm);  (2.29.7)
    parameters: [
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
    optional: true,
  },
  ncclCommMemStats: {
    // ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);  (2.29.7)
    parameters: [
      "pointer", // ncclComm_t comm
      "i32", // ncclCommMemStat_t stat
      "buffer", // uint64_t *value
    ],
    result: "i32",
    optional: true,
  },

  // ---- Memory and registration ----
  ncclMemAlloc: {
    // ncclResult_t ncclMemAlloc(void **ptr, size_t size);  (2.19)
    parameters: [
      "buffer", // void **ptr
      "usize", // size_t size
    ],
    result: "i32",
    optional: true,
  },
  ncclMemFree: {
    // ncclResult_t ncclMemFree(void *ptr);  (2.19)
    parameters: [
      "pointer", // void *ptr
    ],
    result: "i32",
    optional: true,
  },
  ncclCommRegister: {
    // ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);  (2.19)
    parameters: [
      "pointer", // const ncclComm_t comm
      "pointer", // void *buff
      "usize", // size_t size
      "buffer", // void **handle
    ],
    result: "i32",
    optional: true,
  },
  ncclCommDeregister: {
    // ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);  (2.19)
    parameters: [
      "pointer", // const ncclComm_t comm
      "pointer", // void *handle
    ],
    result: "i32",
    optional: true,
  },
  ncclCommWindowRegister: {
    // ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
    //                                     int winFlags);  (2.27)
    parameters: [
      "pointer", // ncclComm_t comm
      "pointer", // void *buff
      "usize", // size_t size
      "buffer", // ncclWindow_t *win
      "i32", // int winFlags
    ],
    result: "i32",
    optional: true,
  },
  ncclCommWindowDeregister: {
    // ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);  (2.27)
    parameters: [
      "pointer", // ncclComm_t comm
      "pointer", // ncclWindow_t win
    ],
    result: "i32",
    optional: true,
  },
  ncclWinGetUserPtr: {
    // ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);  (2.29)
    parameters: [
      "pointer", // ncclComm_t comm
      "pointer", // ncclWindow_t win
      "buffer", // void **outUserPtr
    ],
    result: "i32",
    optional: true,
  },

  // ---- Reduction operators ----
  ncclRedOpCreatePreMulSum: {
    // ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
    //                                       ncclScalarResidence_t residence, ncclComm_t comm);  (2.11)
    parameters: [
      "buffer", // ncclRedOp_t *op
      "pointer", // void *scalar (host value or device pointer, per residence)
      "i32", // ncclDataType_t datatype
      "i32", // ncclScalarResidence_t residence
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
    optional: true,
  },
  ncclRedOpDestroy: {
    // ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);  (2.11)
    parameters: [
      "i32", // ncclRedOp_t op
      "pointer", // ncclComm_t comm
    ],
    result: "i32",
    optional: true,
  },

  // ---- Collectives ----
  ncclAllReduce: {
    // ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
    //                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // ncclRedOp_t op
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclBroadcast: {
    // ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
    //                            ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int root
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclBcast: {
    // ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
    //                        ncclComm_t comm, cudaStream_t stream);  (in place; legacy)
    parameters: [
      "pointer", // void *buff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int root
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclReduce: {
    // ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
    //                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // ncclRedOp_t op
      "i32", // int root
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclAllGather: {
    // ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
    //                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t sendcount
      "i32", // ncclDataType_t datatype
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclReduceScatter: {
    // ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
    //                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    //                                cudaStream_t stream);
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t recvcount
      "i32", // ncclDataType_t datatype
      "i32", // ncclRedOp_t op
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclAlltoAll: {
    // ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
    //                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);  (2.28)
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count (per peer)
      "i32", // ncclDataType_t datatype
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },
  ncclGather: {
    // ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
    //                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);  (2.28)
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int root
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },
  ncclScatter: {
    // ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
    //                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);  (2.28)
    parameters: [
      "pointer", // const void *sendbuff
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int root
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },

  // ---- Point to point and one-sided ----
  ncclSend: {
    // ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
    //                       ncclComm_t comm, cudaStream_t stream);  (2.7)
    parameters: [
      "pointer", // const void *sendbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int peer
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclRecv: {
    // ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
    //                       ncclComm_t comm, cudaStream_t stream);  (2.7)
    parameters: [
      "pointer", // void *recvbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int peer
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
  },
  ncclPutSignal: {
    // ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
    //                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
    //                            unsigned int flags, ncclComm_t comm, cudaStream_t stream);  (2.29)
    parameters: [
      "pointer", // const void *localbuff
      "usize", // size_t count
      "i32", // ncclDataType_t datatype
      "i32", // int peer
      "pointer", // ncclWindow_t peerWin
      "usize", // size_t peerWinOffset
      "i32", // int sigIdx
      "i32", // int ctx
      "u32", // unsigned int flags
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },
  ncclSignal: {
    // ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
    //                         cudaStream_t stream);  (2.29)
    parameters: [
      "i32", // int peer
      "i32", // int sigIdx
      "i32", // int ctx
      "u32", // unsigned int flags
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },
  ncclWaitSignal: {
    // ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
    //                             cudaStream_t stream);  (2.29; each desc: int opCnt, peer, sigIdx, ctx)
    parameters: [
      "i32", // int nDesc
      "buffer", // ncclWaitSignalDesc_t *signalDescs (nDesc × 16 bytes)
      "pointer", // ncclComm_t comm
      "pointer", // cudaStream_t stream
    ],
    result: "i32",
    optional: true,
  },

  // ---- Groups ----
  ncclGroupStart: {
    // ncclResult_t ncclGroupStart(void);  (group depth is thread-local: same thread as ncclGroupEnd)
    parameters: [],
    result: "i32",
  },
  ncclGroupEnd: {
    // ncclResult_t ncclGroupEnd(void);
    parameters: [],
    result: "i32",
  },
  ncclGroupSimulateEnd: {
    // ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);  (2.22; size_t size, u32 magic,
    // u32 version, float estimatedTime)
    parameters: [
      "buffer", // ncclSimInfo_t *simInfo
    ],
    result: "i32",
    optional: true,
  },

  // ---- Parameters (2.30.4) ----
  ncclParamBind: {
    // ncclResult_t ncclParamBind(ncclParamHandle_t *out, const char *key);
    parameters: [
      "buffer", // ncclParamHandle_t *out
      "buffer", // const char *key
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetI8: {
    // ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // int8_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetI16: {
    // ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // int16_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetI32: {
    // ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // int32_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetI64: {
    // ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // int64_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetU8: {
    // ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // uint8_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetU16: {
    // ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // uint16_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetU32: {
    // ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // uint32_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetU64: {
    // ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // uint64_t *out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetStr: {
    // ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char **out);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // const char **out
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGet: {
    // ncclResult_t ncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
    parameters: [
      "pointer", // ncclParamHandle_t h
      "buffer", // void *out
      "i32", // int maxLen
      "buffer", // int *len
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetParameter: {
    // ncclResult_t ncclParamGetParameter(const char *key, const char **value, int *valueLen);
    parameters: [
      "buffer", // const char *key
      "buffer", // const char **value
      "buffer", // int *valueLen
    ],
    result: "i32",
    optional: true,
  },
  ncclParamGetAllParameterKeys: {
    // ncclResult_t ncclParamGetAllParameterKeys(const char ***table, int *tableLen);
    parameters: [
      "buffer", // const char ***table
      "buffer", // int *tableLen
    ],
    result: "i32",
    optional: true,
  },
  ncclParamDumpAll: {
    // void ncclParamDumpAll(void);  (to NCCL's log)
    parameters: [],
    result: "void",
    optional: true,
  },
} as const satisfies Deno.ForeignLibraryInterface;

/**
 * The loaded symbols of NCCL (optional ones may be `null`).
 *
 * @example Calling NCCL directly, inside `NcclProcessGroup.run`
 * ```ts
 * import { createNcclGroup, ncclBackendMissing, type NcclSymbols } from "@dcomm/dcomm/nccl";
 * import { MemoryStore } from "@dcomm/dcomm/store";
 * import assert from "node:assert/strict";
 * function versionCode(symbols: NcclSymbols): number {
 *   const version = new Int32Array(1);
 *   symbols.ncclGetVersion(version);
 *   return version[0];
 * }
 * if (ncclBackendMissing() === undefined) {
 *   await using store = new MemoryStore();
 *   await using pg = await createNcclGroup({ rank: 0, size: 1, store });
 *   let code = 0;
 *   await pg.run("version", ({ symbols }) => {
 *     code = versionCode(symbols);
 *   });
 *   const [major, minor, patch] = pg.ncclVersion.split(".").map(Number);
 *   assert.equal(code, major * 10000 + minor * 100 + patch); // 23007 for "2.30.7"
 * }
 * ```
 */
export type NcclSymbols = Deno.DynamicLibrary<typeof NCCL_SYMBOLS>["symbols"];
