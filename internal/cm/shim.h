// C helpers for internal/cm. They copy an event out and acknowledge it in one
// crossing, and convert between struct sockaddr and a flat address so that Go
// never handles C unions.
#ifndef RNET_CM_SHIM_H
#define RNET_CM_SHIM_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

struct rnet_addr {
	int family; // AF_INET, AF_INET6, or 0 for none
	uint8_t ip[16];
	uint16_t port; // host order
	uint32_t scope;
};

static inline struct rnet_addr rnet_from_sockaddr(const struct sockaddr *sa)
{
	struct rnet_addr a;
	memset(&a, 0, sizeof(a));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		a.family = AF_INET;
		memcpy(a.ip, &s->sin_addr, 4);
		a.port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		a.family = AF_INET6;
		memcpy(a.ip, &s->sin6_addr, 16);
		a.port = ntohs(s->sin6_port);
		a.scope = s->sin6_scope_id;
	}
	return a;
}

static inline void rnet_to_sockaddr(const struct rnet_addr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, a->ip, 4);
		s->sin_port = htons(a->port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, a->ip, 16);
		s->sin6_port = htons(a->port);
		s->sin6_scope_id = a->scope;
	}
}

static inline int rnet_errno(int ret)
{
	if (ret == 0)
		return 0;
	return errno ? errno : EIO;
}

static inline struct rnet_addr rnet_local_addr(struct rdma_cm_id *id) { return rnet_from_sockaddr(rdma_get_local_addr(id)); }
static inline struct rnet_addr rnet_peer_addr(struct rdma_cm_id *id) { return rnet_from_sockaddr(rdma_get_peer_addr(id)); }

static inline int rnet_bind_addr(struct rdma_cm_id *id, struct rnet_addr a)
{
	struct sockaddr_storage ss;
	rnet_to_sockaddr(&a, &ss);
	errno = 0;
	return rnet_errno(rdma_bind_addr(id, (struct sockaddr *)&ss));
}

/* Whether a wildcard IPv6 bind takes IPv6 requests only (1) or IPv4 ones too
 * (0); set before binding, as IPV6_V6ONLY is. */
static inline int rnet_set_afonly(struct rdma_cm_id *id, int only)
{
	errno = 0;
	return rnet_errno(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &only, sizeof only));
}

/* The local ACK timeout of the id's QP, 4.096 us * 2^timeout; rdma_cm applies
 * it when it moves the QP to RTS. */
static inline int rnet_set_ack_timeout(struct rdma_cm_id *id, uint8_t timeout)
{
	errno = 0;
	return rnet_errno(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout));
}

/* The IP TOS byte (the RoCE traffic class) of the id's connection; set before
 * rdma_resolve_route, which puts it in the path, or before rdma_listen. */
static inline int rnet_set_tos(struct rdma_cm_id *id, uint8_t tos)
{
	errno = 0;
	return rnet_errno(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos));
}

static inline int rnet_resolve_addr(struct rdma_cm_id *id, struct rnet_addr src, struct rnet_addr dst, int timeout_ms)
{
	struct sockaddr_storage s, d;
	rnet_to_sockaddr(&src, &s);
	rnet_to_sockaddr(&dst, &d);
	errno = 0;
	return rnet_errno(rdma_resolve_addr(id, src.family ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d, timeout_ms));
}

static inline int rnet_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, uintptr_t handle)
{
	errno = 0;
	return rnet_errno(rdma_create_id(ch, id, (void *)handle, RDMA_PS_TCP));
}

static inline void rnet_set_handle(struct rdma_cm_id *id, uintptr_t handle) { id->context = (void *)handle; }

// rnet_create_qp makes the id's RC QP; with srq (else NULL) its receives
// come from that shared receive queue and it has no receive queue of its own.
static inline int rnet_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq, struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = scq;
	attr.recv_cq = rcq;
	attr.srq = srq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1; // as rsocket: every send completes, which returns its buffer space
	attr.cap = *cap;
	if (srq)
		attr.cap.max_recv_wr = attr.cap.max_recv_sge = 0;
	errno = 0;
	if (rdma_create_qp(id, pd, &attr))
		return errno ? errno : EIO;
	*cap = attr.cap; // what the device granted
	return 0;
}

// The connection parameters in a flat form (private data by pointer from Go
// memory is not allowed to be kept by C: it is copied here before the call).
struct rnet_conn_param {
	uint8_t private_data[256];
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint32_t qp_num;
};

static inline void rnet_conn_param_to_c(const struct rnet_conn_param *p, struct rdma_conn_param *c)
{
	memset(c, 0, sizeof(*c));
	c->private_data = p->private_data_len ? p->private_data : NULL;
	c->private_data_len = p->private_data_len;
	c->responder_resources = p->responder_resources;
	c->initiator_depth = p->initiator_depth;
	c->flow_control = p->flow_control;
	c->retry_count = p->retry_count;
	c->rnr_retry_count = p->rnr_retry_count;
	c->srq = p->srq;
	c->qp_num = p->qp_num;
}

// rnet_connect connects with signals blocked on the calling thread. On
// iWARP the kernel makes the TCP connection inside rdma_connect and waits
// for it there, and a signal ends that wait: Go's preemption signal, sent
// just as the thread entered the call, or one sent to the whole process
// (SIGCHLD, say). The kernel then drops the half-made connection and
// restarts the call, and the restarted connect meets what is left of the
// first: it fails with EINVAL, EADDRNOTAVAIL or ECONNREFUSED, or, under a
// stream of signals, never returns. A blocked signal is delivered once the
// call is done. The signals of a fault stay unblocked, so that a crash in
// the library still reaches Go's handler. qp, if not NULL, is a QP not
// attached to the id, which the request names.
static inline int rnet_connect(struct rdma_cm_id *id, const struct rnet_conn_param *p, struct ibv_qp *qp)
{
	struct rdma_conn_param c;
	sigset_t block, old;
	int ret;
	rnet_conn_param_to_c(p, &c);
	if (qp) {
		c.qp_num = qp->qp_num;
		c.srq = qp->srq != NULL;
	}
	sigfillset(&block);
	sigdelset(&block, SIGSEGV);
	sigdelset(&block, SIGBUS);
	sigdelset(&block, SIGFPE);
	sigdelset(&block, SIGILL);
	sigdelset(&block, SIGTRAP);
	sigdelset(&block, SIGABRT);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	errno = 0;
	ret = rnet_errno(rdma_connect(id, &c));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

static inline int rnet_accept(struct rdma_cm_id *id, const struct rnet_conn_param *p)
{
	struct rdma_conn_param c;
	rnet_conn_param_to_c(p, &c);
	errno = 0;
	return rnet_errno(rdma_accept(id, &c));
}

static inline int rnet_reject(struct rdma_cm_id *id, const void *data, uint8_t len)
{
	errno = 0;
	return rnet_errno(rdma_reject(id, len ? data : NULL, len));
}

// An event copied out of librdmacm's struct, so that it can be acknowledged
// at once: rdma_destroy_id and rdma_migrate_id wait for unacknowledged events.
struct rnet_cm_event {
	int type;
	int status;
	struct rdma_cm_id *id;
	uintptr_t id_handle;     // id->context: rnet's handle for the id
	uintptr_t listen_handle; // listen_id->context, for CONNECT_REQUEST
	struct rnet_conn_param param;
};

// rnet_get_cm_event reads, copies and acknowledges one event. It returns 0 or
// the errno of the read (EAGAIN when none is pending).
static inline int rnet_get_cm_event(struct rdma_event_channel *ch, struct rnet_cm_event *out)
{
	struct rdma_cm_event *ev;
	const struct rdma_conn_param *c;

	errno = 0;
	if (rdma_get_cm_event(ch, &ev))
		return errno ? errno : EIO;
	memset(out, 0, sizeof(*out));
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->id_handle = (uintptr_t)ev->id->context;
	out->listen_handle = ev->listen_id ? (uintptr_t)ev->listen_id->context : 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
		break; // these carry connection parameters and private data
	default:
		rdma_ack_cm_event(ev);
		return 0;
	}
	c = &ev->param.conn;
	out->param.responder_resources = c->responder_resources;
	out->param.initiator_depth = c->initiator_depth;
	out->param.flow_control = c->flow_control;
	out->param.retry_count = c->retry_count;
	out->param.rnr_retry_count = c->rnr_retry_count;
	out->param.srq = c->srq;
	out->param.qp_num = c->qp_num;
	if (c->private_data && c->private_data_len) {
		out->param.private_data_len = c->private_data_len;
		memcpy(out->param.private_data, c->private_data, c->private_data_len);
	}
	rdma_ack_cm_event(ev);
	return 0;
}

#define RNET_ERRNO_CALL(name, call, ...) \
	static inline int name(__VA_ARGS__) { errno = 0; return rnet_errno(call); }
RNET_ERRNO_CALL(rnet_listen, rdma_listen(id, backlog), struct rdma_cm_id *id, int backlog)
RNET_ERRNO_CALL(rnet_resolve_route, rdma_resolve_route(id, timeout_ms), struct rdma_cm_id *id, int timeout_ms)
RNET_ERRNO_CALL(rnet_disconnect, rdma_disconnect(id), struct rdma_cm_id *id)
RNET_ERRNO_CALL(rnet_migrate_id, rdma_migrate_id(id, ch), struct rdma_cm_id *id, struct rdma_event_channel *ch)
RNET_ERRNO_CALL(rnet_destroy_id, rdma_destroy_id(id), struct rdma_cm_id *id)

// rnet_disconnect_keep_qp sends the disconnect request but leaves the id's
// QP in its state, as a peer whose QP the id does not know would:
// rdma_disconnect moves only id->qp to the error state.
static inline int rnet_disconnect_keep_qp(struct rdma_cm_id *id)
{
	struct ibv_qp *qp = id->qp;
	int ret;

	id->qp = NULL;
	errno = 0;
	ret = rnet_errno(rdma_disconnect(id));
	id->qp = qp;
	return ret;
}

static inline struct ibv_context *rnet_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static inline struct ibv_qp *rnet_id_qp(struct rdma_cm_id *id) { return id->qp; }
static inline int rnet_channel_fd(struct rdma_event_channel *ch) { return ch->fd; }

#endif
