// C helpers for the queue pairs that internal/cm makes itself on InfiniBand
// and RoCE, outside the id (id->qp stays NULL), so that it, not librdmacm,
// moves them to RTR and RTS and can limit their path MTU. Each helper is one
// crossing from Go.
#ifndef RNET_CM_OWNQP_H
#define RNET_CM_OWNQP_H

#include "shim.h"

// The steps a helper can fail at, for Go's error messages.
enum {
	RNET_STEP_NONE = 0,
	RNET_STEP_CREATE,      // ibv_create_qp
	RNET_STEP_INIT_ATTR,   // rdma_init_qp_attr(INIT)
	RNET_STEP_INIT,        // ibv_modify_qp(INIT)
	RNET_STEP_QUERY_PORT,  // ibv_query_port
	RNET_STEP_RTR_ATTR,    // rdma_init_qp_attr(RTR)
	RNET_STEP_RTR,         // ibv_modify_qp(RTR)
	RNET_STEP_RTS_ATTR,    // rdma_init_qp_attr(RTS)
	RNET_STEP_RTS,         // ibv_modify_qp(RTS)
	RNET_STEP_ACCEPT,      // rdma_accept
	RNET_STEP_ESTABLISH,   // rdma_establish
	RNET_STEP_ERROR_STATE, // ibv_modify_qp(ERR)
	RNET_STEP_DISCONNECT,  // rdma_disconnect
};

// rnet_id_own_qp says whether the id's connections get a QP of rnet's own:
// on InfiniBand and RoCE (the IB CM) yes; on iWARP the kernel moves the QP
// through its states itself, and librdmacm's attached QP stays.
static inline int rnet_id_own_qp(struct rdma_cm_id *id)
{
	return id->verbs && id->verbs->device->transport_type == IBV_TRANSPORT_IB;
}

// rnet_cm_init_modify asks the connection manager for the attributes of
// state and applies them; librdmacm's own transitions do the same.
static inline int rnet_cm_init_modify(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state, int *step, int attr_step, int modify_step)
{
	struct ibv_qp_attr a;
	int mask, ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask)) {
		*step = attr_step;
		return errno ? errno : EIO;
	}
	if ((ret = ibv_modify_qp(qp, &a, mask)) != 0) {
		*step = modify_step;
		return ret;
	}
	return 0;
}

// rnet_create_own_qp makes an RC QP as rnet_create_qp does, but not attached
// to the id, and moves it to INIT with the connection manager's attributes,
// as rdma_create_qp would.
static inline int rnet_create_own_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq, struct ibv_qp_cap *cap, struct ibv_qp **out, int *step)
{
	struct ibv_qp_init_attr attr;
	struct ibv_qp *qp;
	int ret;

	if (pd->context != id->verbs) {
		*step = RNET_STEP_CREATE;
		return EINVAL; // as rdma_create_qp: the PD must be on the id's device
	}
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = scq;
	attr.recv_cq = rcq;
	attr.srq = srq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	attr.cap = *cap;
	if (srq)
		attr.cap.max_recv_wr = attr.cap.max_recv_sge = 0;
	errno = 0;
	qp = ibv_create_qp(pd, &attr);
	if (!qp) {
		*step = RNET_STEP_CREATE;
		return errno ? errno : EIO;
	}
	ret = rnet_cm_init_modify(id, qp, IBV_QPS_INIT, step, RNET_STEP_INIT_ATTR, RNET_STEP_INIT);
	if (ret) {
		ibv_destroy_qp(qp);
		return ret;
	}
	*cap = attr.cap;
	*out = qp;
	return 0;
}

// rnet_ready_own_qp moves qp to RTR and RTS with the connection manager's
// attributes, as librdmacm does for an attached QP (INIT again first, to pick
// up what the handshake changed), except that the path MTU is at most the
// local port's active MTU and peer_mtu (an enum ibv_mtu; 0: no limit).
// resp_res and init_depth, when not negative, replace the responder
// resources and initiator depth, as rdma_accept's do.
static inline int rnet_ready_own_qp(struct rdma_cm_id *id, struct ibv_qp *qp, int peer_mtu, int resp_res, int init_depth, int *step)
{
	struct ibv_port_attr port;
	struct ibv_qp_attr a;
	int mask, ret;

	ret = rnet_cm_init_modify(id, qp, IBV_QPS_INIT, step, RNET_STEP_INIT_ATTR, RNET_STEP_INIT);
	if (ret)
		return ret;
	memset(&port, 0, sizeof(port));
	if ((ret = ibv_query_port(id->verbs, id->port_num, &port)) != 0) {
		*step = RNET_STEP_QUERY_PORT;
		return ret;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask)) {
		*step = RNET_STEP_RTR_ATTR;
		return errno ? errno : EIO;
	}
	// librdmacm's workaround for the kernel's RoCE-only mask bits on IB.
	if (port.link_layer == IBV_LINK_LAYER_INFINIBAND)
		mask &= ~0xe00000;
	if (a.path_mtu > port.active_mtu)
		a.path_mtu = port.active_mtu;
	if (peer_mtu >= IBV_MTU_256 && peer_mtu <= IBV_MTU_4096 && a.path_mtu > (enum ibv_mtu)peer_mtu)
		a.path_mtu = (enum ibv_mtu)peer_mtu;
	if (resp_res >= 0)
		a.max_dest_rd_atomic = (uint8_t)resp_res;
	if ((ret = ibv_modify_qp(qp, &a, mask)) != 0) {
		*step = RNET_STEP_RTR;
		return ret;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	errno = 0;
	if (rdma_init_qp_attr(id, &a, &mask)) {
		*step = RNET_STEP_RTS_ATTR;
		return errno ? errno : EIO;
	}
	if (init_depth >= 0)
		a.max_rd_atomic = (uint8_t)init_depth;
	if ((ret = ibv_modify_qp(qp, &a, mask)) != 0) {
		*step = RNET_STEP_RTS;
		return ret;
	}
	return 0;
}

static inline void rnet_own_qp_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

// rnet_accept_own readies qp and accepts with it; on failure the QP is left
// in the error state, as librdmacm leaves an attached one.
static inline int rnet_accept_own(struct rdma_cm_id *id, struct ibv_qp *qp, const struct rnet_conn_param *p, int peer_mtu, int *step)
{
	struct rdma_conn_param c;
	int ret;

	ret = rnet_ready_own_qp(id, qp, peer_mtu, p->responder_resources, p->initiator_depth, step);
	if (ret) {
		rnet_own_qp_error(qp);
		return ret;
	}
	rnet_conn_param_to_c(p, &c);
	c.qp_num = qp->qp_num;
	c.srq = qp->srq != NULL;
	errno = 0;
	if (rdma_accept(id, &c)) {
		ret = errno ? errno : EIO;
		*step = RNET_STEP_ACCEPT;
		rnet_own_qp_error(qp);
		return ret;
	}
	return 0;
}

// rnet_establish_own readies qp on the reply (CONNECT_RESPONSE) and sends
// the RTU; on failure the QP is left in the error state.
static inline int rnet_establish_own(struct rdma_cm_id *id, struct ibv_qp *qp, int peer_mtu, int *step)
{
	int ret;

	ret = rnet_ready_own_qp(id, qp, peer_mtu, -1, -1, step);
	if (ret) {
		rnet_own_qp_error(qp);
		return ret;
	}
	errno = 0;
	if (rdma_establish(id)) {
		ret = errno ? errno : EIO;
		*step = RNET_STEP_ESTABLISH;
		rnet_own_qp_error(qp);
		return ret;
	}
	return 0;
}

// rnet_disconnect_own moves qp (if any) to the error state and disconnects,
// as rdma_disconnect does with an attached QP on InfiniBand and RoCE.
static inline int rnet_disconnect_own(struct rdma_cm_id *id, struct ibv_qp *qp, int *step)
{
	struct ibv_qp_attr a;
	int ret;

	if (qp) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_ERR;
		if ((ret = ibv_modify_qp(qp, &a, IBV_QP_STATE)) != 0) {
			*step = RNET_STEP_ERROR_STATE;
			return ret;
		}
	}
	errno = 0;
	if (rdma_disconnect(id)) {
		*step = RNET_STEP_DISCONNECT;
		return errno ? errno : EIO;
	}
	return 0;
}

// rnet_port_mtu is the active MTU (enum ibv_mtu) of the id's port, or 0.
static inline int rnet_port_mtu(struct rdma_cm_id *id, int *mtu)
{
	struct ibv_port_attr port;
	int ret;

	*mtu = 0;
	if (!id->verbs)
		return ENODEV;
	memset(&port, 0, sizeof(port));
	if ((ret = ibv_query_port(id->verbs, id->port_num, &port)) != 0)
		return ret;
	*mtu = port.active_mtu;
	return 0;
}

static inline uint32_t rnet_own_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

#endif
