// C helpers for internal/verbs. They exist because the fast-path verbs
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are static
// inline and ibv_query_port is a macro, and so that a whole batch of work
// requests or completions crosses from Go to C once.
#ifndef RNET_VERBS_SHIM_H
#define RNET_VERBS_SHIM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <poll.h>
#include <infiniband/verbs.h>

// Mirrors of internal/wr's Go types (checked at compile time in post_linux.go
// and at run time by TestLayoutMatchesC).
struct rnet_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct rnet_send_wr {
	uint64_t id;
	uint32_t op;
	uint32_t imm; // host order
	uint8_t inline_;
	uint8_t signaled;
	intptr_t num_sge; // Go int
	struct rnet_sge sge[2];
	uint64_t remote_addr;
	uint32_t rkey;
};

struct rnet_recv_wr {
	uint64_t id;
	intptr_t num_sge;
	struct rnet_sge sge;
};

struct rnet_wc {
	uint64_t id;
	uint32_t status;
	uint32_t opcode;
	uint32_t imm; // host order
	uint32_t byte_len;
	uint32_t vendor_err;
	uint32_t qp_num;
};

// Offsets and sizes for the layout checks (post_linux.go, TestLayoutMatchesC).
enum {
	RNET_SIZEOF_SEND_WR = sizeof(struct rnet_send_wr),
	RNET_OFF_SEND_ID = offsetof(struct rnet_send_wr, id),
	RNET_OFF_SEND_OP = offsetof(struct rnet_send_wr, op),
	RNET_OFF_SEND_IMM = offsetof(struct rnet_send_wr, imm),
	RNET_OFF_SEND_INLINE = offsetof(struct rnet_send_wr, inline_),
	RNET_OFF_SEND_SIGNALED = offsetof(struct rnet_send_wr, signaled),
	RNET_OFF_SEND_SGE = offsetof(struct rnet_send_wr, sge),
	RNET_OFF_SEND_NUM_SGE = offsetof(struct rnet_send_wr, num_sge),
	RNET_OFF_SEND_REMOTE_ADDR = offsetof(struct rnet_send_wr, remote_addr),
	RNET_OFF_SEND_RKEY = offsetof(struct rnet_send_wr, rkey),
	RNET_SIZEOF_SGE = sizeof(struct rnet_sge),
	RNET_OFF_SGE_ADDR = offsetof(struct rnet_sge, addr),
	RNET_OFF_SGE_LENGTH = offsetof(struct rnet_sge, length),
	RNET_OFF_SGE_LKEY = offsetof(struct rnet_sge, lkey),
	RNET_SIZEOF_RECV_WR = sizeof(struct rnet_recv_wr),
	RNET_OFF_RECV_ID = offsetof(struct rnet_recv_wr, id),
	RNET_OFF_RECV_SGE = offsetof(struct rnet_recv_wr, sge),
	RNET_OFF_RECV_NUM_SGE = offsetof(struct rnet_recv_wr, num_sge),
	RNET_SIZEOF_WC = sizeof(struct rnet_wc),
	RNET_OFF_WC_ID = offsetof(struct rnet_wc, id),
	RNET_OFF_WC_STATUS = offsetof(struct rnet_wc, status),
	RNET_OFF_WC_OPCODE = offsetof(struct rnet_wc, opcode),
	RNET_OFF_WC_IMM = offsetof(struct rnet_wc, imm),
	RNET_OFF_WC_BYTE_LEN = offsetof(struct rnet_wc, byte_len),
	RNET_OFF_WC_VENDOR_ERR = offsetof(struct rnet_wc, vendor_err),
	RNET_OFF_WC_QP_NUM = offsetof(struct rnet_wc, qp_num),
};

// The most work requests one crossing builds on the C stack.
#define RNET_MAX_BATCH 32

// rnet_post_send posts n (<= RNET_MAX_BATCH) send WRs as one chain. It returns
// 0, or (errno << 8 | index of the first WR not posted). A single return value
// keeps Go from passing (and heap-allocating) an out parameter.
static inline int rnet_post_send(struct ibv_qp *qp, const struct rnet_send_wr *in, int n)
{
	struct ibv_send_wr wr[RNET_MAX_BATCH];
	struct ibv_sge sge[RNET_MAX_BATCH][2];
	struct ibv_send_wr *bad_wr = NULL;
	int i, j, ret;

	if (n <= 0)
		return 0;
	if (n > RNET_MAX_BATCH)
		return EINVAL << 8;
	for (i = 0; i < n; i++) {
		const struct rnet_send_wr *w = &in[i];
		memset(&wr[i], 0, sizeof(wr[i]));
		if (w->num_sge < 0 || w->num_sge > 2 || w->op > IBV_WR_SEND_WITH_IMM) {
			return EINVAL << 8; // index 0: nothing of the batch was posted
		}
		for (j = 0; j < w->num_sge; j++) {
			sge[i][j].addr = w->sge[j].addr;
			sge[i][j].length = w->sge[j].length;
			sge[i][j].lkey = w->sge[j].lkey;
		}
		wr[i].wr_id = w->id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = w->num_sge ? sge[i] : NULL;
		wr[i].num_sge = (int)w->num_sge;
		wr[i].opcode = (enum ibv_wr_opcode)w->op;
		if (w->inline_)
			wr[i].send_flags |= IBV_SEND_INLINE;
		if (w->signaled)
			wr[i].send_flags |= IBV_SEND_SIGNALED;
		if (w->op == IBV_WR_RDMA_WRITE_WITH_IMM || w->op == IBV_WR_SEND_WITH_IMM)
			wr[i].imm_data = htonl(w->imm);
		if (w->op == IBV_WR_RDMA_WRITE || w->op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			wr[i].wr.rdma.remote_addr = w->remote_addr;
			wr[i].wr.rdma.rkey = w->rkey;
		}
	}
	ret = ibv_post_send(qp, wr, &bad_wr);
	if (ret) {
		// Some providers return -1 or a negative errno.
		if (ret < 0)
			ret = ret == -1 ? (errno ? errno : EINVAL) : -ret;
		return ret << 8 | (bad_wr ? (int)(bad_wr - wr) : 0);
	}
	return 0;
}

// rnet_build_recv fills wr and sge from n (<= RNET_MAX_BATCH) receive WRs
// (0 or 1 SGE each) as one chain. It returns 0, or EINVAL << 8 when a WR is
// malformed (index 0: nothing of the batch is posted).
static inline int rnet_build_recv(struct ibv_recv_wr *wr, struct ibv_sge *sge, const struct rnet_recv_wr *in, int n)
{
	int i;

	if (n > RNET_MAX_BATCH)
		return EINVAL << 8;
	for (i = 0; i < n; i++) {
		const struct rnet_recv_wr *w = &in[i];
		if (w->num_sge < 0 || w->num_sge > 1)
			return EINVAL << 8;
		sge[i].addr = w->sge.addr;
		sge[i].length = w->sge.length;
		sge[i].lkey = w->sge.lkey;
		wr[i].wr_id = w->id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = w->num_sge ? &sge[i] : NULL;
		wr[i].num_sge = (int)w->num_sge;
	}
	return 0;
}

// rnet_post_result turns ibv_post_recv's or ibv_post_srq_recv's return value
// into rnet_post_send's form.
static inline int rnet_post_result(int ret, const struct ibv_recv_wr *wr, const struct ibv_recv_wr *bad_wr)
{
	if (!ret)
		return 0;
	if (ret < 0)
		ret = ret == -1 ? (errno ? errno : EINVAL) : -ret;
	return ret << 8 | (bad_wr ? (int)(bad_wr - wr) : 0);
}

// rnet_post_recv is rnet_post_send for receive WRs (0 or 1 SGE each).
static inline int rnet_post_recv(struct ibv_qp *qp, const struct rnet_recv_wr *in, int n)
{
	struct ibv_recv_wr wr[RNET_MAX_BATCH];
	struct ibv_sge sge[RNET_MAX_BATCH];
	struct ibv_recv_wr *bad_wr = NULL;
	int r;

	if (n <= 0)
		return 0;
	if ((r = rnet_build_recv(wr, sge, in, n)) != 0)
		return r;
	return rnet_post_result(ibv_post_recv(qp, wr, &bad_wr), wr, bad_wr);
}

// rnet_post_srq_recv is rnet_post_recv for a shared receive queue, taken as
// a handle like the other hot-path functions (see below).
static inline int rnet_post_srq_recv(uintptr_t srq, const struct rnet_recv_wr *in, int n)
{
	struct ibv_recv_wr wr[RNET_MAX_BATCH];
	struct ibv_sge sge[RNET_MAX_BATCH];
	struct ibv_recv_wr *bad_wr = NULL;
	int r;

	if (n <= 0)
		return 0;
	if ((r = rnet_build_recv(wr, sge, in, n)) != 0)
		return r;
	errno = 0;
	return rnet_post_result(ibv_post_srq_recv((struct ibv_srq *)srq, wr, &bad_wr), wr, bad_wr);
}

// rnet_poll_cq polls up to n completions into out and returns how many it
// got, or a negative value if the first poll failed.
static inline int rnet_poll_cq(struct ibv_cq *cq, struct rnet_wc *out, int n)
{
	struct ibv_wc wc[RNET_MAX_BATCH];
	int total = 0;

	while (total < n) {
		int want = n - total, got, i;
		if (want > RNET_MAX_BATCH)
			want = RNET_MAX_BATCH;
		got = ibv_poll_cq(cq, want, wc);
		if (got < 0)
			return total ? total : got;
		for (i = 0; i < got; i++) {
			struct rnet_wc *o = &out[total + i];
			o->id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
			o->byte_len = wc[i].byte_len;
			o->vendor_err = wc[i].vendor_err;
			o->qp_num = wc[i].qp_num;
		}
		total += got;
		if (got < want)
			break;
	}
	return total;
}

// The functions on a connection's hot path (rnet_step, rnet_poll,
// rnet_req_notify_cq, rnet_get_cq_event) take their verbs objects as integer
// handles. cgo checks every argument whose C type holds pointers for Go
// pointers, and a struct ibv_qp * or struct ibv_cq * does; those checks were
// 4.4% of a polling client's CPU samples in the Soft-RoCE guest, more than
// the rest of the Go side of the crossing. The handles are C allocations.

// rnet_step is a connection's step in one crossing. With
// RNET_STEP_TAKE_EVENT it first takes one event off the CQ's completion channel
// (ch, which has no CQ but cq and scq) and acknowledges it: a caller the channel
// woke needs the event gone, and reading it here saves a crossing of its
// own. EAGAIN there is no failure: the wakeup was a kick, or a spurious
// one. With RNET_STEP_ARM it arms the CQ (a caller about to wait on the channel
// arms before it polls, so that a completion after the poll still wakes
// it), with RNET_STEP_ARM_SEND the send CQ scq (cq when scq is 0). Then it
// posts the receive WRs (to srq_handle's SRQ when it is not 0),
// then the send WRs, then polls up to
// n_wc completions, scq's first (our own sends bound them, a peer cannot
// flood it), and polls again while both are empty, up to tries
// polls in all: a busy-polling caller pays one crossing for that many. It
// returns the number of completions, or
// -(stage << RNET_STAGE_SHIFT | errno << 8 | index) when a stage of
// enum rnet_step_stage failed; nothing after a failed stage is done.
enum { RNET_STEP_ARM = 1, RNET_STEP_TAKE_EVENT = 2, RNET_STEP_ARM_SEND = 4 };

// The stages of rnet_step, as its failure return names them (see
// stepError in post_linux.go, which declares its Go names from these).
enum rnet_step_stage {
	RNET_STAGE_POST_RECV = 1,
	RNET_STAGE_POST_SEND = 2,
	RNET_STAGE_POLL_CQ = 3,
	RNET_STAGE_REQ_NOTIFY_CQ = 4,
	RNET_STAGE_GET_CQ_EVENT = 5,
	RNET_STAGE_POST_SRQ_RECV = 6,
};

// RNET_STAGE_SHIFT places the stage above the errno and index of a failure.
#define RNET_STAGE_SHIFT 40

// rnet_step_failed is rnet_step's return when stage failed with code
// (errno << 8 | index).
static inline long long rnet_step_failed(enum rnet_step_stage stage, long long code)
{
	return -(((long long)stage << RNET_STAGE_SHIFT) | code);
}

// rnet_arm arms cq, as rnet_step's failure code when it fails.
static inline long long rnet_arm(struct ibv_cq *cq)
{
	int r = ibv_req_notify_cq(cq, 0);
	if (r == 0)
		return 0;
	// Providers return an errno, some a negative one or -1.
	if (r < 0)
		r = r == -1 ? (errno ? errno : EIO) : -r;
	return rnet_step_failed(RNET_STAGE_REQ_NOTIFY_CQ, (long long)r << 8);
}

// rnet_poll_pair polls scq (if not NULL) for up to half of n, then cq for
// the rest of out, then scq again for whatever room is left if its half
// came back full: while both hold completions each gets at least half the
// batch, so neither a flood of the peer's messages nor a burst of our
// sends starves the other, and a poll of two empty CQs costs two looks.
static inline int rnet_poll_pair(struct ibv_cq *cq, struct ibv_cq *scq, struct rnet_wc *out, int n)
{
	int half = (n + 1) / 2, s, r, t;

	if (!scq)
		return rnet_poll_cq(cq, out, n);
	if ((s = rnet_poll_cq(scq, out, half)) < 0)
		return s;
	if (s == n)
		return s;
	// A failed poll fails the whole CQ (and with it every queue pair on
	// it): report it, rather than a short count that would read as "empty".
	if ((r = rnet_poll_cq(cq, out + s, n - s)) < 0)
		return r;
	if (s < half || s + r == n)
		return s + r;
	if ((t = rnet_poll_cq(scq, out + s + r, n - s - r)) < 0)
		return t;
	return s + r + t;
}

static inline long long rnet_step(uintptr_t qp_handle, uintptr_t srq_handle, uintptr_t cq_handle, uintptr_t scq_handle, uintptr_t ch_handle,
	int flags,
	const struct rnet_recv_wr *recvs, int n_recv,
	const struct rnet_send_wr *sends, int n_send,
	struct rnet_wc *out, int n_wc, int tries)
{
	struct ibv_qp *qp = (struct ibv_qp *)qp_handle;
	struct ibv_cq *cq = (struct ibv_cq *)cq_handle;
	struct ibv_cq *scq = (struct ibv_cq *)scq_handle;
	long long failed;
	int r;

	if (flags & RNET_STEP_TAKE_EVENT) {
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		errno = 0;
		if (ibv_get_cq_event((struct ibv_comp_channel *)ch_handle, &ev_cq, &ev_ctx) == 0)
			ibv_ack_cq_events(ev_cq, 1);
		else if (errno != EAGAIN)
			return rnet_step_failed(RNET_STAGE_GET_CQ_EVENT, (long long)(errno ? errno : EIO) << 8);
	}
	if ((flags & RNET_STEP_ARM) && (failed = rnet_arm(cq)) != 0)
		return failed;
	if ((flags & RNET_STEP_ARM_SEND) && (failed = rnet_arm(scq ? scq : cq)) != 0)
		return failed;
	if (n_recv > 0 && srq_handle != 0 && (r = rnet_post_srq_recv(srq_handle, recvs, n_recv)) != 0)
		return rnet_step_failed(RNET_STAGE_POST_SRQ_RECV, r);
	if (n_recv > 0 && srq_handle == 0 && (r = rnet_post_recv(qp, recvs, n_recv)) != 0)
		return rnet_step_failed(RNET_STAGE_POST_RECV, r);
	if (n_send > 0 && (r = rnet_post_send(qp, sends, n_send)) != 0)
		return rnet_step_failed(RNET_STAGE_POST_SEND, r);
	if (n_wc <= 0)
		return 0;
	r = rnet_poll_pair(cq, scq, out, n_wc);
	while (r == 0 && --tries > 0)
		r = rnet_poll_pair(cq, scq, out, n_wc);
	if (r < 0)
		return rnet_step_failed(RNET_STAGE_POLL_CQ, (long long)-r << 8);
	return r;
}

// rnet_poll is rnet_poll_cq for a CQ handle.
static inline int rnet_poll(uintptr_t cq, struct rnet_wc *out, int n)
{
	return rnet_poll_cq((struct ibv_cq *)cq, out, n);
}

static inline int rnet_req_notify_cq(uintptr_t cq, int solicited_only)
{
	return ibv_req_notify_cq((struct ibv_cq *)cq, solicited_only);
}

// rnet_ack_cq_events is ibv_ack_cq_events for a CQ handle.
static inline void rnet_ack_cq_events(uintptr_t cq, unsigned int n)
{
	ibv_ack_cq_events((struct ibv_cq *)cq, n);
}

// rnet_get_cq_event reads one event from a (non-blocking) completion channel
// and stores its CQ's handle. It returns 0, or the errno of the read (EAGAIN
// when there is none).
static inline int rnet_get_cq_event(uintptr_t ch, uintptr_t *cq_handle)
{
	struct ibv_cq *cq;
	void *ctx;
	errno = 0;
	if (ibv_get_cq_event((struct ibv_comp_channel *)ch, &cq, &ctx))
		return errno ? errno : EIO;
	*cq_handle = (uintptr_t)cq;
	return 0;
}

static inline int rnet_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

static inline ssize_t rnet_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t n)
{
	return ibv_query_gid_table(ctx, e, n, 0);
}

static inline int rnet_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e)
{
	return ibv_query_gid_ex(ctx, port, index, e, 0);
}

static inline const char *rnet_device_name(struct ibv_context *ctx)
{
	return ctx->device->name;
}

static inline int rnet_qp_num(struct ibv_qp *qp) { return (int)qp->qp_num; }


// rnet_create_srq creates an SRQ in pd; attr holds the sizes asked for and,
// on return, those granted (ibv_create_srq writes them back).
static inline struct ibv_srq *rnet_create_srq(struct ibv_pd *pd, struct ibv_srq_attr *attr)
{
	struct ibv_srq_init_attr init;
	struct ibv_srq *srq;

	memset(&init, 0, sizeof(init));
	init.attr = *attr;
	errno = 0;
	srq = ibv_create_srq(pd, &init);
	if (srq)
		*attr = init.attr;
	return srq;
}

// rnet_set_srq_limit arms the SRQ's limit: when fewer than limit receives
// are left, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once and disarms.
static inline int rnet_set_srq_limit(struct ibv_srq *srq, uint32_t limit)
{
	struct ibv_srq_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.srq_limit = limit;
	errno = 0;
	return ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
}

// An asynchronous event copied out, so that it is acknowledged at once (the
// object it names cannot be destroyed until then).
struct rnet_async_event {
	int err; // 0, ETIMEDOUT, or the errno of the wait or the read
	uint32_t type;
	uint32_t qp_num;
	uintptr_t srq;
	int port;
};

// rnet_next_async_event waits up to timeout_ms for one of the device's
// asynchronous events, then reads, copies and acknowledges it.
static inline struct rnet_async_event rnet_next_async_event(struct ibv_context *ctx, int timeout_ms)
{
	struct rnet_async_event out;
	struct pollfd p;
	struct ibv_async_event ev;
	int r;

	memset(&out, 0, sizeof(out));
	p.fd = ctx->async_fd;
	p.events = POLLIN;
	p.revents = 0;
	errno = 0;
	r = poll(&p, 1, timeout_ms);
	if (r <= 0) {
		out.err = r == 0 ? ETIMEDOUT : (errno ? errno : EIO);
		return out;
	}
	errno = 0;
	if (ibv_get_async_event(ctx, &ev)) {
		out.err = errno ? errno : EIO;
		return out;
	}
	out.type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out.qp_num = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out.srq = (uintptr_t)ev.element.srq;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out.port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return out;
}

#endif
