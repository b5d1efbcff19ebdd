/**
 * Every C struct and constant of libibverbs that the binding touches, described once: a layout table
 * per struct (field → byte offset and size, keyed by the C member designator, so `"wr.rdma.rkey"` is
 * `offsetof(struct ibv_send_wr, wr.rdma.rkey)`) and one object per enum. The binding reads and writes
 * these structs through the `Struct` views of `../_struct.ts` over these tables (the shape every binding's
 * tables share, `../_layout.ts`); nothing else in the binding spells an offset.
 *
 * The values are those of rdma-core 44 on x86-64 (`/usr/include/infiniband/verbs.h`), and
 * `tests/ffi/ibverbs/layout_test.ts` proves them: it compiles a C program against the installed header
 * that prints `offsetof`/`sizeof` of every field and the value of every constant listed here, and compares.
 *
 * @module
 */

import { type StructLayout, structLayout } from "../_layout.ts";

// The shared types, for importers of these tables.
export type { Field, StructLayout } from "../_layout.ts";

/** `union ibv_gid`: a 128-bit port address (IPv6 format; network byte order). */
export const IBV_GID: StructLayout<"raw" | "global.subnet_prefix" | "global.interface_id"> = structLayout(
  "union ibv_gid",
  16,
  { raw: [0, 16], "global.subnet_prefix": [0, 8], "global.interface_id": [8, 8] },
);

/** `struct ibv_device`: what `ibv_get_device_list` lists (the public part). */
export const IBV_DEVICE: StructLayout<
  "node_type" | "transport_type" | "name" | "dev_name" | "dev_path" | "ibdev_path"
> = structLayout("struct ibv_device", 664, {
  node_type: [16, 4],
  transport_type: [20, 4],
  name: [24, 64],
  dev_name: [88, 64],
  dev_path: [152, 256],
  ibdev_path: [408, 256],
});

/** `struct ibv_context`: an open device, with the provider's table of data-path functions. */
export const IBV_CONTEXT: StructLayout<
  | "device"
  | "ops.poll_cq"
  | "ops.req_notify_cq"
  | "ops.post_send"
  | "ops.post_recv"
  | "cmd_fd"
  | "async_fd"
  | "num_comp_vectors"
  | "abi_compat"
> = structLayout("struct ibv_context", 328, {
  device: [0, 8],
  "ops.poll_cq": [96, 8],
  "ops.req_notify_cq": [104, 8],
  "ops.post_send": [208, 8],
  "ops.post_recv": [216, 8],
  cmd_fd: [264, 4],
  async_fd: [268, 4],
  num_comp_vectors: [272, 4],
  abi_compat: [320, 8],
});

/**
 * `struct verbs_context`: the extended context that embeds `struct ibv_context` as its LAST member, so
 * its other fields lie at negative offsets from an `ibv_context *` (`query_port` at `-(context)`, `sz` at
 * `sz - context`). New operations are prepended in newer rdma-core, which keeps those distances.
 */
export const VERBS_CONTEXT: StructLayout<"query_port" | "sz" | "context"> = structLayout(
  "struct verbs_context",
  648,
  { query_port: [0, 8], sz: [312, 8], context: [320, 328] },
);

/** `struct ibv_comp_channel`: a completion event channel (a file descriptor). */
export const IBV_COMP_CHANNEL: StructLayout<"context" | "fd" | "refcnt"> = structLayout(
  "struct ibv_comp_channel",
  16,
  { context: [0, 8], fd: [8, 4], refcnt: [12, 4] },
);

/** `struct ibv_device_attr`: what `ibv_query_device` fills. */
export const IBV_DEVICE_ATTR: StructLayout<
  | "fw_ver"
  | "node_guid"
  | "sys_image_guid"
  | "max_mr_size"
  | "page_size_cap"
  | "vendor_id"
  | "vendor_part_id"
  | "hw_ver"
  | "max_qp"
  | "max_qp_wr"
  | "device_cap_flags"
  | "max_sge"
  | "max_cq"
  | "max_cqe"
  | "max_mr"
  | "max_pd"
  | "max_qp_rd_atom"
  | "max_qp_init_rd_atom"
  | "phys_port_cnt"
> = structLayout("struct ibv_device_attr", 232, {
  fw_ver: [0, 64],
  node_guid: [64, 8],
  sys_image_guid: [72, 8],
  max_mr_size: [80, 8],
  page_size_cap: [88, 8],
  vendor_id: [96, 4],
  vendor_part_id: [100, 4],
  hw_ver: [104, 4],
  max_qp: [108, 4],
  max_qp_wr: [112, 4],
  device_cap_flags: [116, 4],
  max_sge: [120, 4],
  max_cq: [128, 4],
  max_cqe: [132, 4],
  max_mr: [136, 4],
  max_pd: [140, 4],
  max_qp_rd_atom: [144, 4],
  max_qp_init_rd_atom: [156, 4],
  phys_port_cnt: [227, 1],
});

/**
 * `struct ibv_port_attr`. The exported `ibv_query_port` fills only the first 48 bytes (through `flags`,
 * the layout of `struct _compat_ibv_port_attr`); the extended context's `query_port` fills it all.
 * rdma-core 49 and newer append `active_speed_ex` (56 bytes); the binding passes its own size, which
 * every version accepts.
 */
export const IBV_PORT_ATTR: StructLayout<
  | "state"
  | "max_mtu"
  | "active_mtu"
  | "gid_tbl_len"
  | "port_cap_flags"
  | "max_msg_sz"
  | "pkey_tbl_len"
  | "lid"
  | "sm_lid"
  | "lmc"
  | "active_width"
  | "active_speed"
  | "phys_state"
  | "link_layer"
  | "flags"
  | "port_cap_flags2"
> = structLayout("struct ibv_port_attr", 52, {
  state: [0, 4],
  max_mtu: [4, 4],
  active_mtu: [8, 4],
  gid_tbl_len: [12, 4],
  port_cap_flags: [16, 4],
  max_msg_sz: [20, 4],
  pkey_tbl_len: [32, 2],
  lid: [34, 2],
  sm_lid: [36, 2],
  lmc: [38, 1],
  active_width: [43, 1],
  active_speed: [44, 1],
  phys_state: [45, 1],
  link_layer: [46, 1],
  flags: [47, 1],
  port_cap_flags2: [48, 2],
});

/** Bytes of `struct ibv_port_attr` that the exported (compatibility) `ibv_query_port` fills. */
export const IBV_PORT_ATTR_COMPAT_BYTES = 48;

/** `struct ibv_pd`: a protection domain. */
export const IBV_PD: StructLayout<"context" | "handle"> = structLayout("struct ibv_pd", 16, {
  context: [0, 8],
  handle: [8, 4],
});

/** `struct ibv_mr`: a registered memory region and its keys. */
export const IBV_MR: StructLayout<"context" | "pd" | "addr" | "length" | "handle" | "lkey" | "rkey"> =
  structLayout(
    "struct ibv_mr",
    48,
    {
      context: [0, 8],
      pd: [8, 8],
      addr: [16, 8],
      length: [24, 8],
      handle: [32, 4],
      lkey: [36, 4],
      rkey: [40, 4],
    },
  );

/** `struct ibv_cq`: a completion queue. */
export const IBV_CQ: StructLayout<"context" | "channel" | "cq_context" | "handle" | "cqe"> = structLayout(
  "struct ibv_cq",
  128,
  { context: [0, 8], channel: [8, 8], cq_context: [16, 8], handle: [24, 4], cqe: [28, 4] },
);

/** `struct ibv_qp`: a queue pair. */
export const IBV_QP: StructLayout<
  "context" | "qp_context" | "pd" | "send_cq" | "recv_cq" | "srq" | "handle" | "qp_num" | "state" | "qp_type"
> = structLayout("struct ibv_qp", 160, {
  context: [0, 8],
  qp_context: [8, 8],
  pd: [16, 8],
  send_cq: [24, 8],
  recv_cq: [32, 8],
  srq: [40, 8],
  handle: [48, 4],
  qp_num: [52, 4],
  state: [56, 4],
  qp_type: [60, 4],
});

/** `struct ibv_qp_init_attr`: what `ibv_create_qp` takes (and fills back with the capacities granted). */
export const IBV_QP_INIT_ATTR: StructLayout<
  | "qp_context"
  | "send_cq"
  | "recv_cq"
  | "srq"
  | "cap.max_send_wr"
  | "cap.max_recv_wr"
  | "cap.max_send_sge"
  | "cap.max_recv_sge"
  | "cap.max_inline_data"
  | "qp_type"
  | "sq_sig_all"
> = structLayout("struct ibv_qp_init_attr", 64, {
  qp_context: [0, 8],
  send_cq: [8, 8],
  recv_cq: [16, 8],
  srq: [24, 8],
  "cap.max_send_wr": [32, 4],
  "cap.max_recv_wr": [36, 4],
  "cap.max_send_sge": [40, 4],
  "cap.max_recv_sge": [44, 4],
  "cap.max_inline_data": [48, 4],
  qp_type: [52, 4],
  sq_sig_all: [56, 4],
});

/** `struct ibv_qp_attr`: what `ibv_modify_qp` takes, the fields chosen by an attribute mask. */
export const IBV_QP_ATTR: StructLayout<
  | "qp_state"
  | "cur_qp_state"
  | "path_mtu"
  | "qkey"
  | "rq_psn"
  | "sq_psn"
  | "dest_qp_num"
  | "qp_access_flags"
  | "cap.max_send_wr"
  | "cap.max_recv_wr"
  | "ah_attr.grh.dgid"
  | "ah_attr.grh.flow_label"
  | "ah_attr.grh.sgid_index"
  | "ah_attr.grh.hop_limit"
  | "ah_attr.grh.traffic_class"
  | "ah_attr.dlid"
  | "ah_attr.sl"
  | "ah_attr.src_path_bits"
  | "ah_attr.static_rate"
  | "ah_attr.is_global"
  | "ah_attr.port_num"
  | "pkey_index"
  | "max_rd_atomic"
  | "max_dest_rd_atomic"
  | "min_rnr_timer"
  | "port_num"
  | "timeout"
  | "retry_cnt"
  | "rnr_retry"
> = structLayout("struct ibv_qp_attr", 144, {
  qp_state: [0, 4],
  cur_qp_state: [4, 4],
  path_mtu: [8, 4],
  qkey: [16, 4],
  rq_psn: [20, 4],
  sq_psn: [24, 4],
  dest_qp_num: [28, 4],
  qp_access_flags: [32, 4],
  "cap.max_send_wr": [36, 4],
  "cap.max_recv_wr": [40, 4],
  "ah_attr.grh.dgid": [56, 16],
  "ah_attr.grh.flow_label": [72, 4],
  "ah_attr.grh.sgid_index": [76, 1],
  "ah_attr.grh.hop_limit": [77, 1],
  "ah_attr.grh.traffic_class": [78, 1],
  "ah_attr.dlid": [80, 2],
  "ah_attr.sl": [82, 1],
  "ah_attr.src_path_bits": [83, 1],
  "ah_attr.static_rate": [84, 1],
  "ah_attr.is_global": [85, 1],
  "ah_attr.port_num": [86, 1],
  pkey_index: [120, 2],
  max_rd_atomic: [126, 1],
  max_dest_rd_atomic: [127, 1],
  min_rnr_timer: [128, 1],
  port_num: [129, 1],
  timeout: [130, 1],
  retry_cnt: [131, 1],
  rnr_retry: [132, 1],
});

/** `struct ibv_sge`: one scatter/gather element. */
export const IBV_SGE: StructLayout<"addr" | "length" | "lkey"> = structLayout("struct ibv_sge", 16, {
  addr: [0, 8],
  length: [8, 4],
  lkey: [12, 4],
});

/** `struct ibv_send_wr`: one send work request (`imm_data` is in network byte order). */
export const IBV_SEND_WR: StructLayout<
  | "wr_id"
  | "next"
  | "sg_list"
  | "num_sge"
  | "opcode"
  | "send_flags"
  | "imm_data"
  | "wr.rdma.remote_addr"
  | "wr.rdma.rkey"
> = structLayout("struct ibv_send_wr", 128, {
  wr_id: [0, 8],
  next: [8, 8],
  sg_list: [16, 8],
  num_sge: [24, 4],
  opcode: [28, 4],
  send_flags: [32, 4],
  imm_data: [36, 4],
  "wr.rdma.remote_addr": [40, 8],
  "wr.rdma.rkey": [48, 4],
});

/** `struct ibv_recv_wr`: one receive work request. */
export const IBV_RECV_WR: StructLayout<"wr_id" | "next" | "sg_list" | "num_sge"> = structLayout(
  "struct ibv_recv_wr",
  32,
  { wr_id: [0, 8], next: [8, 8], sg_list: [16, 8], num_sge: [24, 4] },
);

/** `struct ibv_wc`: one work completion (`imm_data` is in network byte order). */
export const IBV_WC: StructLayout<
  | "wr_id"
  | "status"
  | "opcode"
  | "vendor_err"
  | "byte_len"
  | "imm_data"
  | "qp_num"
  | "src_qp"
  | "wc_flags"
  | "pkey_index"
  | "slid"
  | "sl"
  | "dlid_path_bits"
> = structLayout("struct ibv_wc", 48, {
  wr_id: [0, 8],
  status: [8, 4],
  opcode: [12, 4],
  vendor_err: [16, 4],
  byte_len: [20, 4],
  imm_data: [24, 4],
  qp_num: [28, 4],
  src_qp: [32, 4],
  wc_flags: [36, 4],
  pkey_index: [40, 2],
  slid: [42, 2],
  sl: [44, 1],
  dlid_path_bits: [45, 1],
});

/** Every layout above, for the layout test. */
export const LAYOUTS: readonly StructLayout[] = [
  IBV_GID,
  IBV_DEVICE,
  IBV_CONTEXT,
  VERBS_CONTEXT,
  IBV_COMP_CHANNEL,
  IBV_DEVICE_ATTR,
  IBV_PORT_ATTR,
  IBV_PD,
  IBV_MR,
  IBV_CQ,
  IBV_QP,
  IBV_QP_INIT_ATTR,
  IBV_QP_ATTR,
  IBV_SGE,
  IBV_SEND_WR,
  IBV_RECV_WR,
  IBV_WC,
];

/** `enum ibv_access_flags` (C names `IBV_ACCESS_<key>`). */
export const IBV_ACCESS = {
  LOCAL_WRITE: 1,
  REMOTE_WRITE: 2,
  REMOTE_READ: 4,
  REMOTE_ATOMIC: 8,
  RELAXED_ORDERING: 1 << 20,
} as const;

/** `enum ibv_qp_type` (C names `IBV_QPT_<key>`). */
export const IBV_QPT = { RC: 2, UC: 3, UD: 4 } as const;

/** `enum ibv_qp_state` (C names `IBV_QPS_<key>`). */
export const IBV_QPS = { RESET: 0, INIT: 1, RTR: 2, RTS: 3, SQD: 4, SQE: 5, ERR: 6 } as const;

/** `enum ibv_qp_attr_mask` (C names `IBV_QP_<key>`). */
export const IBV_QP_ATTR_MASK = {
  STATE: 1,
  CUR_STATE: 2,
  EN_SQD_ASYNC_NOTIFY: 4,
  ACCESS_FLAGS: 8,
  PKEY_INDEX: 16,
  PORT: 32,
  QKEY: 64,
  AV: 128,
  PATH_MTU: 256,
  TIMEOUT: 512,
  RETRY_CNT: 1024,
  RNR_RETRY: 2048,
  RQ_PSN: 4096,
  MAX_QP_RD_ATOMIC: 8192,
  ALT_PATH: 16384,
  MIN_RNR_TIMER: 32768,
  SQ_PSN: 65536,
  MAX_DEST_RD_ATOMIC: 131072,
  PATH_MIG_STATE: 262144,
  CAP: 524288,
  DEST_QPN: 1 << 20,
} as const;

/** `enum ibv_wr_opcode` (C names `IBV_WR_<key>`). */
export const IBV_WR = {
  RDMA_WRITE: 0,
  RDMA_WRITE_WITH_IMM: 1,
  SEND: 2,
  SEND_WITH_IMM: 3,
  RDMA_READ: 4,
} as const;

/** `enum ibv_send_flags` (C names `IBV_SEND_<key>`). */
export const IBV_SEND = { FENCE: 1, SIGNALED: 2, SOLICITED: 4, INLINE: 8 } as const;

/** `enum ibv_wc_status` (C names `IBV_WC_<key>`). */
export const IBV_WC_STATUS = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_QP_OP_ERR: 2,
  LOC_EEC_OP_ERR: 3,
  LOC_PROT_ERR: 4,
  WR_FLUSH_ERR: 5,
  MW_BIND_ERR: 6,
  BAD_RESP_ERR: 7,
  LOC_ACCESS_ERR: 8,
  REM_INV_REQ_ERR: 9,
  REM_ACCESS_ERR: 10,
  REM_OP_ERR: 11,
  RETRY_EXC_ERR: 12,
  RNR_RETRY_EXC_ERR: 13,
  LOC_RDD_VIOL_ERR: 14,
  REM_INV_RD_REQ_ERR: 15,
  REM_ABORT_ERR: 16,
  INV_EECN_ERR: 17,
  INV_EEC_STATE_ERR: 18,
  FATAL_ERR: 19,
  RESP_TIMEOUT_ERR: 20,
  GENERAL_ERR: 21,
} as const;

/** `enum ibv_wc_opcode` (C names `IBV_WC_<key>`). */
export const IBV_WC_OPCODE = {
  SEND: 0,
  RDMA_WRITE: 1,
  RDMA_READ: 2,
  RECV: 128,
  RECV_RDMA_WITH_IMM: 129,
} as const;

/** `enum ibv_wc_flags` (C names `IBV_WC_<key>`). */
export const IBV_WC_FLAGS = { GRH: 1, WITH_IMM: 2 } as const;

/** `enum ibv_mtu` (C names `IBV_<key>`). */
export const IBV_MTU = { MTU_256: 1, MTU_512: 2, MTU_1024: 3, MTU_2048: 4, MTU_4096: 5 } as const;

/** `enum ibv_port_state` (C names `IBV_PORT_<key>`). */
export const IBV_PORT_STATE = {
  NOP: 0,
  DOWN: 1,
  INIT: 2,
  ARMED: 3,
  ACTIVE: 4,
  ACTIVE_DEFER: 5,
} as const;

/** Link layers (C names `IBV_LINK_LAYER_<key>`). */
export const IBV_LINK_LAYER = { UNSPECIFIED: 0, INFINIBAND: 1, ETHERNET: 2 } as const;

/** `enum ibv_node_type` (C names `IBV_NODE_<key>`). */
export const IBV_NODE = {
  UNKNOWN: -1,
  CA: 1,
  SWITCH: 2,
  ROUTER: 3,
  RNIC: 4,
  USNIC: 5,
  USNIC_UDP: 6,
} as const;

/** `enum ibv_transport_type` (C names `IBV_TRANSPORT_<key>`). */
export const IBV_TRANSPORT = {
  UNKNOWN: -1,
  IB: 0,
  IWARP: 1,
  USNIC: 2,
  USNIC_UDP: 3,
  UNSPECIFIED: 4,
} as const;

/** One group of C constants: the C name of each is `prefix + key`. */
export interface ConstantGroup {
  /** The C prefix, e.g. `"IBV_ACCESS_"`. */
  readonly prefix: string;
  /** Key → value. */
  readonly values: Readonly<Record<string, number>>;
}

/** Every constant group above, for the layout test. */
export const CONSTANT_GROUPS: readonly ConstantGroup[] = [
  { prefix: "IBV_ACCESS_", values: IBV_ACCESS },
  { prefix: "IBV_QPT_", values: IBV_QPT },
  { prefix: "IBV_QPS_", values: IBV_QPS },
  { prefix: "IBV_QP_", values: IBV_QP_ATTR_MASK },
  { prefix: "IBV_WR_", values: IBV_WR },
  { prefix: "IBV_SEND_", values: IBV_SEND },
  { prefix: "IBV_WC_", values: IBV_WC_STATUS },
  { prefix: "IBV_WC_", values: IBV_WC_OPCODE },
  { prefix: "IBV_WC_", values: IBV_WC_FLAGS },
  { prefix: "IBV_", values: IBV_MTU },
  { prefix: "IBV_PORT_", values: IBV_PORT_STATE },
  { prefix: "IBV_LINK_LAYER_", values: IBV_LINK_LAYER },
  { prefix: "IBV_NODE_", values: IBV_NODE },
  { prefix: "IBV_TRANSPORT_", values: IBV_TRANSPORT },
];
