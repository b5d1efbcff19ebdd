/*
 * TEST DOUBLE of an RDMA provider's data path, for tests/ffi/ibverbs/ops_test.ts. Not a driver: it owns
 * no hardware and moves no data.
 *
 * It builds a fake extended context (struct verbs_context) whose struct ibv_context function table holds
 * the four data-path functions that verbs.h dispatches inline (poll_cq, req_notify_cq, post_send,
 * post_recv) plus the extended query_port, and a fake CQ and QP that point at it. Each function records
 * what it received in flat uint64 arrays that the test reads back, or (poll_cq) hands back completions the
 * test queued. Everything is filled and read through the field names of the installed verbs.h, so the
 * test proves the TypeScript layout against the header, not against numbers copied from it.
 *
 * Built by the test with gcc -shared -fPIC.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

#define MAX_RECORDS 8
/* One recorded send or receive request: see the R_* indexes. */
#define RECORD_WORDS 20
enum {
	R_WR_ID, R_OPCODE, R_SEND_FLAGS, R_NUM_SGE, R_IMM_HOST, R_REMOTE_ADDR, R_RKEY,
	R_SGE0_ADDR, R_SGE0_LENGTH, R_SGE0_LKEY, R_SGE1_ADDR, R_SGE1_LENGTH, R_SGE1_LKEY,
	R_SGE0_FIRST_BYTES, R_QP_NUM, R_NEXT_IS_NULL, R_IMM_RAW,
};

static struct verbs_context vctx;
static struct ibv_cq cq;
static struct ibv_qp qp;

static uint64_t sends[MAX_RECORDS * RECORD_WORDS];
static uint64_t recvs[MAX_RECORDS * RECORD_WORDS];
static int send_count, recv_count;
/* What post_send/post_recv return, and at which request they stop (bad_wr). */
static int post_result, post_bad_index;

static struct ibv_wc queued[16];
static int queued_count;
static int poll_calls, poll_last_num_entries, poll_result_override;
static uint64_t poll_last_cq;

static int notify_calls, notify_last_solicited;
static uint64_t notify_last_cq;

static uint64_t query_port_len;
static int query_port_num;

static void record_sges(uint64_t *r, struct ibv_sge *sg, int n)
{
	if (n > 0) {
		r[R_SGE0_ADDR] = sg[0].addr;
		r[R_SGE0_LENGTH] = sg[0].length;
		r[R_SGE0_LKEY] = sg[0].lkey;
		/* Proves the address is real memory: the first bytes there. */
		if (sg[0].addr && sg[0].length >= 8)
			memcpy(&r[R_SGE0_FIRST_BYTES], (void *)(uintptr_t)sg[0].addr, 8);
	}
	if (n > 1) {
		r[R_SGE1_ADDR] = sg[1].addr;
		r[R_SGE1_LENGTH] = sg[1].length;
		r[R_SGE1_LKEY] = sg[1].lkey;
	}
}

static int fake_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int index = 0;
	for (; wr; wr = wr->next, index++) {
		if (post_result && index == post_bad_index) {
			*bad = wr;
			return post_result;
		}
		if (send_count == MAX_RECORDS)
			return ENOMEM;
		uint64_t *r = &sends[send_count++ * RECORD_WORDS];
		r[R_WR_ID] = wr->wr_id;
		r[R_OPCODE] = wr->opcode;
		r[R_SEND_FLAGS] = wr->send_flags;
		r[R_NUM_SGE] = wr->num_sge;
		r[R_IMM_HOST] = ntohl(wr->imm_data);
		r[R_IMM_RAW] = wr->imm_data;
		r[R_REMOTE_ADDR] = wr->wr.rdma.remote_addr;
		r[R_RKEY] = wr->wr.rdma.rkey;
		r[R_QP_NUM] = q->qp_num;
		r[R_NEXT_IS_NULL] = wr->next == NULL;
		record_sges(r, wr->sg_list, wr->num_sge);
	}
	return 0;
}

static int fake_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int index = 0;
	for (; wr; wr = wr->next, index++) {
		if (post_result && index == post_bad_index) {
			*bad = wr;
			return post_result;
		}
		if (recv_count == MAX_RECORDS)
			return ENOMEM;
		uint64_t *r = &recvs[recv_count++ * RECORD_WORDS];
		r[R_WR_ID] = wr->wr_id;
		r[R_NUM_SGE] = wr->num_sge;
		r[R_QP_NUM] = q->qp_num;
		r[R_NEXT_IS_NULL] = wr->next == NULL;
		record_sges(r, wr->sg_list, wr->num_sge);
	}
	return 0;
}

static int fake_poll_cq(struct ibv_cq *c, int num_entries, struct ibv_wc *wc)
{
	poll_calls++;
	poll_last_num_entries = num_entries;
	poll_last_cq = (uintptr_t)c;
	if (poll_result_override)
		return poll_result_override;
	int n = 0;
	for (; n < num_entries && n < queued_count; n++)
		wc[n] = queued[n];
	memmove(queued, queued + n, (queued_count - n) * sizeof(queued[0]));
	queued_count -= n;
	return n;
}

static int fake_req_notify_cq(struct ibv_cq *c, int solicited_only)
{
	notify_calls++;
	notify_last_solicited = solicited_only;
	notify_last_cq = (uintptr_t)c;
	return 0;
}

static int fake_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr,
			   size_t len)
{
	query_port_num = port_num;
	query_port_len = len;
	if (port_num != 1)
		return EINVAL;
	memset(attr, 0, len);
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_2048;
	attr->gid_tbl_len = 128;
	attr->port_cap_flags = 0x2651e848;
	attr->max_msg_sz = 0x40000000;
	attr->pkey_tbl_len = 64;
	attr->lid = 0x1a2b;
	attr->sm_lid = 0x0102;
	attr->lmc = 3;
	attr->active_width = 2;
	attr->active_speed = 32;
	attr->phys_state = 5;
	attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
	attr->flags = 1;
	attr->port_cap_flags2 = 0x0213;
	return 0;
}

/* The fake context: extended (abi_compat all ones, sz, query_port) or a plain one. sz_override != 0
 * pretends an older, smaller verbs_context. */
struct ibv_context *fake_context(int extended, uint64_t sz_override)
{
	memset(&vctx, 0, sizeof(vctx));
	struct ibv_context *ctx = &vctx.context;
	ctx->ops.poll_cq = fake_poll_cq;
	ctx->ops.req_notify_cq = fake_req_notify_cq;
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->num_comp_vectors = 4;
	if (extended) {
		ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
		vctx.sz = sz_override ? sz_override : sizeof(vctx);
		vctx.query_port = fake_query_port;
	}
	memset(&cq, 0, sizeof(cq));
	cq.context = ctx;
	cq.cqe = 255;
	memset(&qp, 0, sizeof(qp));
	qp.context = ctx;
	qp.qp_num = 0x123456;
	qp.qp_type = IBV_QPT_RC;
	send_count = recv_count = queued_count = 0;
	post_result = post_bad_index = 0;
	poll_calls = notify_calls = 0;
	poll_result_override = 0;
	return ctx;
}

struct ibv_cq *fake_cq(void) { return &cq; }
struct ibv_qp *fake_qp(void) { return &qp; }

uint64_t *fake_sends(void) { return sends; }
uint64_t *fake_recvs(void) { return recvs; }
int fake_send_count(void) { return send_count; }
int fake_recv_count(void) { return recv_count; }
void fake_fail_posts(int rc, int bad_index) { post_result = rc; post_bad_index = bad_index; }

void fake_queue_wc(uint64_t wr_id, int status, int opcode, uint32_t byte_len, uint32_t imm_host,
		   uint32_t qp_num, int wc_flags, uint32_t vendor_err)
{
	struct ibv_wc *wc = &queued[queued_count++];
	memset(wc, 0xee, sizeof(*wc)); /* junk in the fields nobody sets */
	wc->wr_id = wr_id;
	wc->status = status;
	wc->opcode = opcode;
	wc->byte_len = byte_len;
	wc->imm_data = htonl(imm_host);
	wc->qp_num = qp_num;
	wc->wc_flags = wc_flags;
	wc->vendor_err = vendor_err;
}

void fake_poll_returns(int rc) { poll_result_override = rc; }
int fake_poll_calls(void) { return poll_calls; }
int fake_poll_last_num_entries(void) { return poll_last_num_entries; }
uint64_t fake_poll_last_cq(void) { return poll_last_cq; }
int fake_notify_calls(void) { return notify_calls; }
int fake_notify_last_solicited(void) { return notify_last_solicited; }
uint64_t fake_notify_last_cq(void) { return notify_last_cq; }
uint64_t fake_query_port_len(void) { return query_port_len; }
int fake_query_port_num(void) { return query_port_num; }
