/*
 * TEST DOUBLE of libibverbs: a software RDMA "device" inside one process, for the tests of the binding and
 * of the RDMA transport on machines without RDMA hardware (tests/transport/rdma_loopback_test.ts). It is
 * loaded in place of libibverbs.so.1 (DCOMM_IBVERBS_PATH) and exports the same functions the binding binds;
 * the data path goes through each context's function table, as with a real provider.
 *
 * What it emulates, as InfiniBand reliable-connected queue pairs behave:
 * - devices "loop0".."loop7" (one port each, LID = index + 1, GID fe80::<index + 1>), an extended context
 *   with the full query_port;
 * - memory regions with lkey/rkey and access rights; protection domains;
 * - completion queues with completion channels (a pipe per channel; req_notify_cq arms one event);
 * - RC queue pairs: ibv_modify_qp accepts only the IB spec's required (and allowed optional) attribute
 *   masks of RESET->INIT->RTR->RTS and any->ERR, checks the port, MTU and address vector (the LID or the
 *   GID must name a device), and a connection works only if both ends named each other's QP number and
 *   agreed on the packet sequence numbers;
 * - RDMA WRITE (with or without immediate) and SEND: data is copied at post time into the peer's memory
 *   after the rkey, range and access checks; an immediate or a SEND consumes a posted receive at the peer
 *   (and waits, as an RNR retry would, while none is posted); completions carry the fields real ones do;
 * - errors: a wrong rkey gives REM_ACCESS_ERR, an unreachable or dead peer RETRY_EXC_ERR, and a queue pair
 *   in error flushes every outstanding request with WR_FLUSH_ERR.
 * Knobs for the tests: how many devices exist (0 gives the non-NULL empty list), a NULL list with a chosen
 * errno, killing a device (its process "dies": peers see RETRY_EXC_ERR), and counters.
 *
 * Not emulated: timing (everything completes at once), real networking, atomics, RDMA read, UD/UC, SRQ.
 *
 * Built by the tests with gcc -shared -fPIC -Wl,-Bsymbolic.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MAX_DEVICES 8
#define MAX_SGE 4
#define MAX_QPS 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCKED(body) do { pthread_mutex_lock(&lock); body; pthread_mutex_unlock(&lock); } while (0)

static struct ibv_device devices[MAX_DEVICES];
static int device_count = MAX_DEVICES;
static int device_list_errno; /* non-zero: ibv_get_device_list returns NULL with this errno */
static int dead[MAX_DEVICES];
static int extended_contexts = 1;
static int dmabuf_errno = EOPNOTSUPP;
static uint32_t next_key = 0x1000;
static uint32_t next_qpn = 0x100;
static long writes_posted, bytes_written, modify_calls;

struct lctx {
	int index; /* device index */
	struct verbs_context v; /* must end the struct: ibv_context is verbs_context's last member */
};

static struct lctx *lctx_of(struct ibv_context *c)
{
	return (struct lctx *)((char *)c - offsetof(struct verbs_context, context) - offsetof(struct lctx, v));
}

struct lmr {
	struct ibv_mr mr;
	int access;
	struct lmr *next;
};
static struct lmr *mrs;

struct lchannel {
	struct ibv_comp_channel ch;
	int write_fd;
};

struct lcq {
	struct ibv_cq cq;
	struct ibv_wc *ring;
	int capacity, head, count, armed, overrun;
};

struct lsge {
	uint64_t addr;
	uint32_t length, lkey;
};

struct lrecv {
	uint64_t wr_id;
	int num_sge;
	struct lsge sge[MAX_SGE];
};

/* A send request waiting for a receive at the peer (the RNR case), kept in order. */
struct lpending {
	uint64_t wr_id;
	int opcode, signaled, num_sge;
	uint32_t imm; /* network order, as given */
	uint64_t remote_addr;
	uint32_t rkey;
	struct lsge sge[MAX_SGE];
	struct lpending *next;
};

struct lqp {
	struct ibv_qp qp;
	int dev;
	int access, port, mtu;
	uint32_t dest_qpn, rq_psn, sq_psn;
	int max_send_wr, max_recv_wr, outstanding_sends;
	struct lrecv *recvs;
	int recv_head, recv_count;
	struct lpending *backlog, *backlog_tail; /* requests of this QP waiting for receives at the peer */
};
static struct lqp *qps[MAX_QPS];

static struct lqp *find_qp(uint32_t qpn)
{
	for (int i = 0; i < MAX_QPS; i++)
		if (qps[i] && qps[i]->qp.qp_num == qpn)
			return qps[i];
	return NULL;
}

static struct lmr *find_mr(struct ibv_pd *pd, uint32_t key, int remote)
{
	for (struct lmr *m = mrs; m; m = m->next)
		if (m->mr.pd == pd && (remote ? m->mr.rkey : m->mr.lkey) == key)
			return m;
	return NULL;
}

static int in_mr(struct lmr *m, uint64_t addr, uint64_t length)
{
	uint64_t base = (uintptr_t)m->mr.addr;
	return addr >= base && addr + length <= base + m->mr.length;
}

/* ---- knobs and counters for the tests ---- */

void loopback_set_device_count(int n) { LOCKED(device_count = n); }
void loopback_fail_device_list(int err) { LOCKED(device_list_errno = err); }
void loopback_set_extended(int on) { LOCKED(extended_contexts = on); }
void loopback_set_dmabuf_errno(int err) { LOCKED(dmabuf_errno = err); }
static void wake_senders_to(uint32_t qpn);
void loopback_kill_device(int index)
{
	LOCKED({
		dead[index] = 1;
		for (int i = 0; i < MAX_QPS; i++)
			if (qps[i] && qps[i]->dev == index)
				wake_senders_to(qps[i]->qp.qp_num);
	});
}
long loopback_writes_posted(void) { return writes_posted; }
long loopback_bytes_written(void) { return bytes_written; }
long loopback_modify_calls(void) { return modify_calls; }
int loopback_live_qps(void)
{
	int n = 0;
	LOCKED(for (int i = 0; i < MAX_QPS; i++) n += qps[i] != NULL);
	return n;
}
int loopback_live_mrs(void)
{
	int n = 0;
	LOCKED(for (struct lmr *m = mrs; m; m = m->next) n++);
	return n;
}
void loopback_reset(void)
{
	LOCKED({
		device_count = MAX_DEVICES;
		device_list_errno = 0;
		extended_contexts = 1;
		dmabuf_errno = EOPNOTSUPP;
		memset(dead, 0, sizeof(dead));
	});
}

/* ---- devices ---- */

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list = NULL;
	int err = 0;
	LOCKED({
		if (device_list_errno) {
			err = device_list_errno;
		} else {
			list = calloc(device_count + 1, sizeof(*list));
			for (int i = 0; i < device_count; i++) {
				struct ibv_device *d = &devices[i];
				memset(d, 0, sizeof(*d));
				d->node_type = IBV_NODE_CA;
				d->transport_type = IBV_TRANSPORT_IB;
				snprintf(d->name, sizeof(d->name), "loop%d", i);
				snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
				snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/loop%d", i);
				list[i] = d;
			}
			if (num)
				*num = device_count;
		}
	});
	if (err) {
		if (num)
			*num = 0;
		errno = err;
	}
	return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
__be64 ibv_get_device_guid(struct ibv_device *d)
{
	return htobe64(0x0002c90300a1b200ull + (uint64_t)(d - devices));
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fake_req_notify_cq(struct ibv_cq *cq, int solicited);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	int index = (int)(d - devices);
	if (index < 0 || index >= MAX_DEVICES) {
		errno = ENODEV;
		return NULL;
	}
	struct lctx *l = calloc(1, sizeof(*l));
	l->index = index;
	struct ibv_context *c = &l->v.context;
	c->device = d;
	c->cmd_fd = -1;
	c->async_fd = -1;
	c->num_comp_vectors = 1;
	c->ops.poll_cq = fake_poll_cq;
	c->ops.req_notify_cq = fake_req_notify_cq;
	c->ops.post_send = fake_post_send;
	c->ops.post_recv = fake_post_recv;
	LOCKED({
		if (extended_contexts) {
			c->abi_compat = __VERBS_ABI_IS_EXTENDED;
			l->v.sz = sizeof(l->v);
			l->v.query_port = fake_query_port;
		}
	});
	return c;
}

int ibv_close_device(struct ibv_context *c)
{
	free(lctx_of(c));
	return 0;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "loopback-1.0");
	a->node_guid = ibv_get_device_guid(c->device);
	a->max_mr_size = 1ull << 40;
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4242;
	a->max_qp = MAX_QPS;
	a->max_qp_wr = 16384;
	a->max_sge = MAX_SGE;
	a->max_cq = 1024;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 16;
	a->max_pd = 1024;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->phys_port_cnt = 1;
	return 0;
}

static int fill_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
	if (port != 1)
		return EINVAL;
	memset(a, 0, len);
	a->state = dead[lctx_of(c)->index] ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = 4;
	a->max_msg_sz = 1u << 31;
	a->pkey_tbl_len = 1;
	a->lid = lctx_of(c)->index + 1;
	a->sm_lid = 1;
	a->active_width = 2;
	a->active_speed = 64;
	a->phys_state = 5;
	a->link_layer = IBV_LINK_LAYER_INFINIBAND;
	if (len >= offsetof(struct ibv_port_attr, port_cap_flags2) + 2)
		a->port_cap_flags2 = 0x10;
	return 0;
}

/* The exported compatibility symbol: 48 bytes (through flags). */
/* (Parenthesised: verbs.h defines ibv_query_port and ibv_reg_mr as macros too.) */
int (ibv_query_port)(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return fill_port(c, port, (struct ibv_port_attr *)a, offsetof(struct ibv_port_attr, port_cap_flags2));
}

static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
	if (len < offsetof(struct ibv_port_attr, port_cap_flags2) + 2)
		return EINVAL;
	return fill_port(c, port, a, len);
}

static void gid_of(int index, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[0] = 0xfe;
	gid->raw[1] = 0x80;
	gid->raw[15] = (uint8_t)(index + 1);
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	if (port != 1 || index < 0 || index >= 4) {
		errno = EINVAL;
		return -1;
	}
	if (index == 0)
		gid_of(lctx_of(c)->index, gid);
	else
		memset(gid, 0, sizeof(*gid));
	return 0;
}

/* ---- protection domains and memory ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = c;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int busy = 0;
	LOCKED({
		for (struct lmr *m = mrs; m; m = m->next) busy |= m->mr.pd == pd;
		for (int i = 0; i < MAX_QPS; i++) busy |= qps[i] && qps[i]->qp.pd == pd;
	});
	if (busy)
		return EBUSY;
	free(pd);
	return 0;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	if (!pd || length == 0 || !addr) {
		errno = EINVAL;
		return NULL;
	}
	/* verbs: remote write or atomic needs local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	struct lmr *m = calloc(1, sizeof(*m));
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->access = access;
	LOCKED({
		m->mr.lkey = next_key++;
		m->mr.rkey = next_key++;
		m->mr.handle = m->mr.lkey;
		m->next = mrs;
		mrs = m;
	});
	return &m->mr;
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	errno = dmabuf_errno;
	return NULL;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	int found = 0;
	LOCKED({
		for (struct lmr **p = &mrs; *p; p = &(*p)->next) {
			if (&(*p)->mr == mr) {
				struct lmr *m = *p;
				*p = m->next;
				free(m);
				found = 1;
				break;
			}
		}
	});
	return found ? 0 : EINVAL;
}

/* ---- completion channels and queues ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return NULL;
	struct lchannel *l = calloc(1, sizeof(*l));
	l->ch.context = c;
	l->ch.fd = fds[0];
	l->write_fd = fds[1];
	return &l->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	if (ch->refcnt)
		return EBUSY;
	struct lchannel *l = (struct lchannel *)ch;
	close(l->ch.fd);
	close(l->write_fd);
	free(l);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch,
			     int comp_vector)
{
	(void)comp_vector;
	if (cqe < 1 || cqe > (1 << 20)) {
		errno = EINVAL;
		return NULL;
	}
	struct lcq *q = calloc(1, sizeof(*q));
	q->cq.context = c;
	q->cq.channel = ch;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	q->capacity = cqe;
	q->ring = calloc(cqe, sizeof(*q->ring));
	if (ch)
		LOCKED(ch->refcnt++);
	return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct lcq *q = (struct lcq *)cq;
	int busy = 0;
	LOCKED({
		for (int i = 0; i < MAX_QPS; i++)
			busy |= qps[i] && (qps[i]->qp.send_cq == cq || qps[i]->qp.recv_cq == cq);
		if (!busy && cq->channel)
			cq->channel->refcnt--;
	});
	if (busy)
		return EBUSY;
	free(q->ring);
	free(q);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	struct ibv_cq *got;
	if (read(ch->fd, &got, sizeof(got)) != sizeof(got))
		return -1;
	*cq = got;
	*cq_context = got->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) { (void)cq; (void)nevents; }

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS: return "success";
	case IBV_WC_LOC_LEN_ERR: return "local length error";
	case IBV_WC_LOC_PROT_ERR: return "local protection error";
	case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
	case IBV_WC_REM_ACCESS_ERR: return "remote access error";
	case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
	default: return "unknown";
	}
}

/* Called with the lock held. */
static void push_wc(struct ibv_cq *cq, uint64_t wr_id, int status, int opcode, uint32_t byte_len, uint32_t imm,
		    int with_imm, uint32_t qp_num, uint32_t src_qp)
{
	struct lcq *q = (struct lcq *)cq;
	if (q->count == q->capacity) {
		q->overrun = 1;
		return;
	}
	struct ibv_wc *wc = &q->ring[(q->head + q->count++) % q->capacity];
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = wr_id;
	wc->status = status;
	wc->opcode = opcode;
	wc->byte_len = byte_len;
	wc->imm_data = imm;
	wc->wc_flags = with_imm ? IBV_WC_WITH_IMM : 0;
	wc->qp_num = qp_num;
	wc->src_qp = src_qp;
	if (status != IBV_WC_SUCCESS)
		wc->vendor_err = 0x81;
	if (q->armed && cq->channel) {
		q->armed = 0;
		struct lchannel *l = (struct lchannel *)cq->channel;
		if (write(l->write_fd, &cq, sizeof(cq)) != sizeof(cq))
			q->overrun = 1;
	}
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct lcq *q = (struct lcq *)cq;
	int got = 0;
	pthread_mutex_lock(&lock);
	if (q->overrun) {
		pthread_mutex_unlock(&lock);
		return -1;
	}
	for (; got < n && q->count > 0; got++) {
		wc[got] = q->ring[q->head];
		q->head = (q->head + 1) % q->capacity;
		q->count--;
	}
	pthread_mutex_unlock(&lock);
	return got;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited)
{
	(void)solicited;
	LOCKED(((struct lcq *)cq)->armed = 1);
	return 0;
}

/* ---- queue pairs ---- */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->srq || a->cap.max_send_wr < 1 ||
	    a->cap.max_recv_wr < 1 || a->cap.max_send_wr > 16384 || a->cap.max_recv_wr > 16384 ||
	    a->cap.max_send_sge > MAX_SGE || a->cap.max_recv_sge > MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	struct lqp *q = calloc(1, sizeof(*q));
	q->qp.context = pd->context;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	q->dev = lctx_of(pd->context)->index;
	q->max_send_wr = a->cap.max_send_wr;
	q->max_recv_wr = a->cap.max_recv_wr;
	q->recvs = calloc(q->max_recv_wr, sizeof(*q->recvs));
	a->cap.max_inline_data = 0;
	int slot = -1;
	LOCKED({
		q->qp.qp_num = next_qpn++;
		for (int i = 0; i < MAX_QPS && slot < 0; i++)
			if (!qps[i])
				slot = i;
		if (slot >= 0)
			qps[slot] = q;
	});
	if (slot < 0) {
		free(q->recvs);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	return &q->qp;
}

/* Completes every outstanding request of a QP in error with WR_FLUSH_ERR. Lock held. */
static void flush(struct lqp *q)
{
	for (; q->recv_count > 0; q->recv_count--) {
		struct lrecv *r = &q->recvs[q->recv_head];
		q->recv_head = (q->recv_head + 1) % q->max_recv_wr;
		push_wc(q->qp.recv_cq, r->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0, q->qp.qp_num, 0);
	}
	while (q->backlog) {
		struct lpending *p = q->backlog;
		q->backlog = p->next;
		push_wc(q->qp.send_cq, p->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0, 0, q->qp.qp_num, 0);
		q->outstanding_sends--;
		free(p);
	}
	q->backlog_tail = NULL;
}

static void to_error(struct lqp *q)
{
	q->qp.state = IBV_QPS_ERR;
	flush(q);
}

/* The IB spec's required and optional attributes of each RC transition. */
static int mask_ok(int from, int to, int mask)
{
	int required = 0, optional = 0;
	if (to == IBV_QPS_ERR || to == IBV_QPS_RESET)
		return mask == IBV_QP_STATE;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		required = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		required = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		required = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			   IBV_QP_MAX_QP_RD_ATOMIC;
		optional = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
			   IBV_QP_PATH_MIG_STATE;
	} else {
		return 0;
	}
	return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

/* Whether an address vector names a live device's port: by LID, or by GID when global. */
static int av_ok(struct ibv_ah_attr *ah)
{
	if (ah->port_num != 1)
		return 0;
	if (ah->is_global) {
		for (int i = 0; i < device_count; i++) {
			union ibv_gid g;
			gid_of(i, &g);
			if (!memcmp(&g, &ah->grh.dgid, sizeof(g)))
				return ah->grh.sgid_index < 4 && ah->grh.hop_limit > 0;
		}
		return 0;
	}
	return ah->dlid >= 1 && ah->dlid <= device_count;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct lqp *q = (struct lqp *)qp;
	int rc = 0;
	pthread_mutex_lock(&lock);
	modify_calls++;
	int from = qp->state, to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from;
	if (!mask_ok(from, to, mask)) {
		rc = EINVAL;
	} else if (to == IBV_QPS_INIT) {
		if (a->port_num != 1 || a->pkey_index != 0)
			rc = EINVAL;
		q->access = a->qp_access_flags;
		q->port = a->port_num;
	} else if (to == IBV_QPS_RTR) {
		if (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096 || !av_ok(&a->ah_attr) ||
		    a->dest_qp_num == 0 || a->rq_psn > 0xffffff)
			rc = EINVAL;
		q->mtu = a->path_mtu;
		q->dest_qpn = a->dest_qp_num;
		q->rq_psn = a->rq_psn;
	} else if (to == IBV_QPS_RTS) {
		if (a->sq_psn > 0xffffff || a->retry_cnt > 7 || a->rnr_retry > 7 || a->timeout > 31)
			rc = EINVAL;
		q->sq_psn = a->sq_psn;
	}
	if (rc == 0) {
		if (to == IBV_QPS_ERR)
			to_error(q);
		else
			qp->state = to;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	memset(a, 0, sizeof(*a));
	memset(init, 0, sizeof(*init));
	LOCKED(a->qp_state = qp->state);
	return 0;
}

static void wake_senders_to(uint32_t qpn);

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct lqp *q = (struct lqp *)qp;
	LOCKED({
		for (int i = 0; i < MAX_QPS; i++)
			if (qps[i] == q)
				qps[i] = NULL;
		while (q->backlog) {
			struct lpending *p = q->backlog;
			q->backlog = p->next;
			free(p);
		}
		wake_senders_to(qp->qp_num);
	});
	free(q->recvs);
	free(q);
	return 0;
}

/* The peer QP a send on q reaches, or NULL if the packets would be lost (retry exceeded). Lock held. */
static struct lqp *peer_of(struct lqp *q)
{
	struct lqp *p = find_qp(q->dest_qpn);
	if (!p || dead[p->dev] || dead[q->dev])
		return NULL;
	/* Both ends must name each other and agree on the PSNs, or the responder drops every packet. */
	if (p->dest_qpn != q->qp.qp_num || p->rq_psn != q->sq_psn)
		return NULL;
	if (p->qp.state != IBV_QPS_RTR && p->qp.state != IBV_QPS_RTS)
		return NULL;
	return p;
}

static uint64_t gather_length(struct lsge *sge, int n)
{
	uint64_t total = 0;
	for (int i = 0; i < n; i++)
		total += sge[i].length;
	return total;
}

/* Copies the request's local bytes to dst. */
static void gather(struct lsge *sge, int n, char *dst)
{
	for (int i = 0; i < n; i++) {
		memcpy(dst, (void *)(uintptr_t)sge[i].addr, sge[i].length);
		dst += sge[i].length;
	}
}

/*
 * Tries to deliver one send request of q; returns 0 when it completed (successfully or not) and 1 when it
 * must wait for a receive at the peer. Lock held.
 */
static int deliver(struct lqp *q, struct lpending *w)
{
	int wc_op = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
	struct lqp *p = peer_of(q);
	if (!p) {
		push_wc(q->qp.send_cq, w->wr_id, IBV_WC_RETRY_EXC_ERR, wc_op, 0, 0, 0, q->qp.qp_num, 0);
		q->outstanding_sends--;
		to_error(q);
		return 0;
	}
	uint64_t length = gather_length(w->sge, w->num_sge);
	int needs_recv = w->opcode != IBV_WR_RDMA_WRITE;
	if (needs_recv && p->recv_count == 0)
		return 1;
	if (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		if (length > 0) {
			struct lmr *m = find_mr(p->qp.pd, w->rkey, 1);
			if (!m || !(m->access & IBV_ACCESS_REMOTE_WRITE) || !(p->access & IBV_ACCESS_REMOTE_WRITE) ||
			    !in_mr(m, w->remote_addr, length)) {
				push_wc(q->qp.send_cq, w->wr_id, IBV_WC_REM_ACCESS_ERR, wc_op, 0, 0, 0, q->qp.qp_num, 0);
				q->outstanding_sends--;
				to_error(q);
				to_error(p);
				return 0;
			}
			gather(w->sge, w->num_sge, (char *)(uintptr_t)w->remote_addr);
			writes_posted++;
			bytes_written += (long)length;
		}
	}
	if (needs_recv) {
		struct lrecv *r = &p->recvs[p->recv_head];
		p->recv_head = (p->recv_head + 1) % p->max_recv_wr;
		p->recv_count--;
		int recv_op = IBV_WC_RECV;
		if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			recv_op = IBV_WC_RECV_RDMA_WITH_IMM;
		} else {
			uint64_t room = gather_length(r->sge, r->num_sge);
			if (length > room) {
				push_wc(p->qp.recv_cq, r->wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, 0, 0, p->qp.qp_num, 0);
				to_error(p);
				push_wc(q->qp.send_cq, w->wr_id, IBV_WC_REM_OP_ERR, wc_op, 0, 0, 0, q->qp.qp_num, 0);
				q->outstanding_sends--;
				to_error(q);
				return 0;
			}
			char *bytes = malloc(length ? length : 1);
			gather(w->sge, w->num_sge, bytes);
			char *at = bytes;
			for (int i = 0; i < r->num_sge && at < bytes + length; i++) {
				uint64_t n = r->sge[i].length < (uint64_t)(bytes + length - at) ? r->sge[i].length
												 : (uint64_t)(bytes + length - at);
				memcpy((void *)(uintptr_t)r->sge[i].addr, at, n);
				at += n;
			}
			free(bytes);
		}
		int with_imm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || w->opcode == IBV_WR_SEND_WITH_IMM;
		push_wc(p->qp.recv_cq, r->wr_id, IBV_WC_SUCCESS, recv_op, (uint32_t)length, with_imm ? w->imm : 0,
			with_imm, p->qp.qp_num, q->qp.qp_num);
	}
	if (w->signaled)
		push_wc(q->qp.send_cq, w->wr_id, IBV_WC_SUCCESS, wc_op, 0, 0, 0, q->qp.qp_num, 0);
	q->outstanding_sends--;
	return 0;
}

/* Delivers the waiting requests of q, in order, as far as the peer's receives allow. Lock held. */
static void drain_backlog(struct lqp *q)
{
	while (q->backlog && q->qp.state == IBV_QPS_RTS) {
		struct lpending *w = q->backlog;
		q->backlog = w->next;
		if (!q->backlog)
			q->backlog_tail = NULL;
		if (deliver(q, w)) {
			/* Still no receive at the peer: back to the head. */
			w->next = q->backlog;
			q->backlog = w;
			if (!q->backlog_tail)
				q->backlog_tail = w;
			return;
		}
		free(w);
	}
}

/* Senders waiting (RNR) on a QP that just went away or died now fail, as their retries would. Lock held. */
static void wake_senders_to(uint32_t qpn)
{
	for (int i = 0; i < MAX_QPS; i++)
		if (qps[i] && qps[i]->dest_qpn == qpn && qps[i]->backlog)
			drain_backlog(qps[i]);
}

static int copy_sges(struct lsge *out, struct ibv_sge *in, int n)
{
	if (n < 0 || n > MAX_SGE)
		return EINVAL;
	for (int i = 0; i < n; i++) {
		out[i].addr = in[i].addr;
		out[i].length = in[i].length;
		out[i].lkey = in[i].lkey;
	}
	return 0;
}

/* Whether every local element lies in a region of the QP's domain under its lkey. Lock held. */
static int local_ok(struct lqp *q, struct lsge *sge, int n)
{
	for (int i = 0; i < n; i++) {
		struct lmr *m = find_mr(q->qp.pd, sge[i].lkey, 0);
		if (!m || !in_mr(m, sge[i].addr, sge[i].length))
			return 0;
	}
	return 1;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct lqp *q = (struct lqp *)qp;
	int rc = 0;
	pthread_mutex_lock(&lock);
	for (; wr; wr = wr->next) {
		if (dead[q->dev]) {
			rc = EIO;
		} else if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
			rc = EINVAL;
		} else if (q->outstanding_sends >= q->max_send_wr) {
			rc = ENOMEM;
		} else if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
			   wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) {
			rc = EINVAL;
		}
		struct lpending *w = rc ? NULL : calloc(1, sizeof(*w));
		if (w && copy_sges(w->sge, wr->sg_list, wr->num_sge) != 0) {
			free(w);
			w = NULL;
			rc = EINVAL;
		}
		if (rc) {
			*bad = wr;
			break;
		}
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
		w->num_sge = wr->num_sge;
		w->imm = wr->imm_data;
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		q->outstanding_sends++;
		if (qp->state == IBV_QPS_ERR) {
			push_wc(qp->send_cq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0, 0, qp->qp_num, 0);
			q->outstanding_sends--;
			free(w);
			continue;
		}
		if (!local_ok(q, w->sge, w->num_sge)) {
			push_wc(qp->send_cq, w->wr_id, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND, 0, 0, 0, qp->qp_num, 0);
			q->outstanding_sends--;
			free(w);
			to_error(q);
			continue;
		}
		if (q->backlog) {
			q->backlog_tail->next = w;
			q->backlog_tail = w;
			continue;
		}
		if (deliver(q, w)) {
			q->backlog = q->backlog_tail = w;
		} else {
			free(w);
		}
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct lqp *q = (struct lqp *)qp;
	int rc = 0;
	pthread_mutex_lock(&lock);
	for (; wr; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET) {
			rc = EINVAL;
		} else if (q->recv_count >= q->max_recv_wr) {
			rc = ENOMEM;
		}
		struct lrecv r = { .wr_id = wr->wr_id, .num_sge = wr->num_sge };
		if (!rc && copy_sges(r.sge, wr->sg_list, wr->num_sge) != 0)
			rc = EINVAL;
		if (rc) {
			*bad = wr;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			push_wc(qp->recv_cq, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0, qp->qp_num, 0);
			continue;
		}
		q->recvs[(q->recv_head + q->recv_count++) % q->max_recv_wr] = r;
	}
	/* A sender waiting for a receive here (RNR) goes on. */
	struct lqp *sender = find_qp(q->dest_qpn);
	if (sender && sender->dest_qpn == qp->qp_num && sender->backlog)
		drain_backlog(sender);
	pthread_mutex_unlock(&lock);
	return rc;
}
