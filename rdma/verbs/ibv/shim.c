//go:build verbs

#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                      \
	do {                                           \
		if (err) snprintf(err, errlen, __VA_ARGS__); \
		return -1;                             \
	} while (0)

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* pick_gid chooses the port's GID when none is named: an IPv4-mapped RoCE v2
 * GID first (routable, what rxe and ConnectX use over IPv4), then any
 * IPv4-mapped one, then index 0 (InfiniBand, or IPv6-only RoCE). */
static int pick_gid(sl_dev *d, int tbl_len)
{
	int i, any = -1;
	for (i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(d->ctx, d->port, i, &e, 0))
			continue;
		if (memcmp(e.gid.raw, v4mapped, 12))
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
			return i;
		if (any < 0)
			any = i;
	}
	return any >= 0 ? any : 0;
}

int sl_device_names(char *buf, int len)
{
	int n, i, off = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l)
		return -errno;
	buf[0] = 0;
	for (i = 0; i < n && off < len; i++)
		off += snprintf(buf + off, len - off, "%s%s", i ? " " : "", ibv_get_device_name(l[i]));
	ibv_free_device_list(l);
	return n;
}

int sl_open(const char *name, int port, int gid_index, int cqe, sl_dev **out, char *err, int errlen)
{
	int n, i;
	struct ibv_device **l;
	sl_dev *d = calloc(1, sizeof *d);
	if (!d)
		FAIL("out of memory");
	*out = d;
	l = ibv_get_device_list(&n);
	if (!l)
		FAIL("ibv_get_device_list: %s (is the RDMA stack loaded? rdma link show)", strerror(errno));
	for (i = 0; i < n; i++)
		if (!name[0] || !strcmp(ibv_get_device_name(l[i]), name))
			break;
	if (i == n) {
		ibv_free_device_list(l);
		FAIL("RDMA device %s not found (%d devices; ibv_devices lists them)", name[0] ? name : "(any)", n);
	}
	snprintf(d->name, sizeof d->name, "%s", ibv_get_device_name(l[i]));
	d->ctx = ibv_open_device(l[i]);
	ibv_free_device_list(l);
	if (!d->ctx)
		FAIL("ibv_open_device %s: %s", d->name, strerror(errno));
	snprintf(d->driver, sizeof d->driver, "%s", d->ctx->device->dev_name);

	struct ibv_device_attr_ex ax;
	memset(&ax, 0, sizeof ax);
	if (ibv_query_device_ex(d->ctx, NULL, &ax))
		FAIL("ibv_query_device_ex %s: %s", d->name, strerror(errno));
	d->atomic_cap = ax.orig_attr.atomic_cap;
	d->max_qp_rd_atom = ax.orig_attr.max_qp_rd_atom;
	d->max_qp_init_rd_atom = ax.orig_attr.max_qp_init_rd_atom;
	d->max_qp_wr = ax.orig_attr.max_qp_wr;
	d->max_cqe = ax.orig_attr.max_cqe;
	d->max_sge = ax.orig_attr.max_sge;
	d->max_mr_size = ax.orig_attr.max_mr_size;
	d->device_cap_flags_ex = ax.device_cap_flags_ex;
	d->vendor_id = ax.orig_attr.vendor_id;
	d->vendor_part_id = ax.orig_attr.vendor_part_id;
	snprintf(d->fw_ver, sizeof d->fw_ver, "%s", ax.orig_attr.fw_ver);

	d->port = port > 0 ? port : 1;
	struct ibv_port_attr pa;
	if (ibv_query_port(d->ctx, d->port, &pa))
		FAIL("ibv_query_port %s/%d: %s", d->name, d->port, strerror(errno));
	if (pa.state != IBV_PORT_ACTIVE)
		FAIL("%s port %d is not active (state %d)", d->name, d->port, pa.state);
	d->active_mtu = pa.active_mtu;
	d->gid_index = gid_index >= 0 ? gid_index : pick_gid(d, pa.gid_tbl_len);
	union ibv_gid g;
	if (ibv_query_gid(d->ctx, d->port, d->gid_index, &g))
		FAIL("ibv_query_gid %s/%d index %d: %s", d->name, d->port, d->gid_index, strerror(errno));
	memcpy(d->gid, g.raw, 16);

	if (!(d->pd = ibv_alloc_pd(d->ctx)))
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	if (!(d->ch = ibv_create_comp_channel(d->ctx)))
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	/* Non-blocking, so that a spurious wake-up never blocks the poller in
	 * ibv_get_cq_event; sl_poll waits in poll(2) with a timeout instead. */
	int fl = fcntl(d->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(d->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		FAIL("completion channel O_NONBLOCK: %s", strerror(errno));
	if (cqe > d->max_cqe)
		cqe = d->max_cqe;
	if (!(d->cq = ibv_create_cq(d->ctx, cqe, NULL, d->ch, 0)))
		FAIL("ibv_create_cq(%d): %s", cqe, strerror(errno));
	return 0;
}

void sl_close(sl_dev *d)
{
	if (!d)
		return;
	if (d->cq) {
		if (d->armed) {
			/* An armed CQ may have an event queued; ack what is there. */
			struct ibv_cq *c;
			void *x;
			while (ibv_get_cq_event(d->ch, &c, &x) == 0)
				ibv_ack_cq_events(c, 1);
		}
		ibv_destroy_cq(d->cq);
	}
	if (d->ch)
		ibv_destroy_comp_channel(d->ch);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
}

struct ibv_mr *sl_reg_mr(sl_dev *d, void *addr, size_t len, int access, char *err, int errlen)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, addr, len, access);
	if (!mr && err)
		snprintf(err, errlen, "ibv_reg_mr(%zu bytes, access %#x): %s%s", len, access, strerror(errno),
			 errno == ENOMEM || errno == EPERM ? " (raise the locked-memory limit: ulimit -l, LimitMEMLOCK=infinity)" : "");
	return mr;
}

int sl_dereg_mr(struct ibv_mr *mr) { return ibv_dereg_mr(mr); }
uint32_t sl_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
uint32_t sl_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }

struct ibv_qp *sl_qp_create(sl_dev *d, int max_send, int max_recv, int max_inline, uint32_t *qpn, uint32_t *inline_out, char *err, int errlen)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = d->cq;
	a.recv_cq = d->cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = max_send;
	a.cap.max_recv_wr = max_recv > 0 ? max_recv : 1;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	struct ibv_qp *qp = ibv_create_qp(d->pd, &a);
	if (!qp && max_inline > 0) {
		/* A device with less inline room: do without. */
		a.cap.max_inline_data = 0;
		qp = ibv_create_qp(d->pd, &a);
	}
	if (!qp) {
		if (err)
			snprintf(err, errlen, "ibv_create_qp(send %d, recv %d): %s", max_send, max_recv, strerror(errno));
		return NULL;
	}
	*qpn = qp->qp_num;
	*inline_out = a.cap.max_inline_data;
	return qp;
}

int sl_qp_connect(sl_dev *d, struct ibv_qp *qp, uint32_t rqpn, uint32_t rpsn, uint32_t lpsn,
		  const uint8_t *rgid, int access, int timeout, int retry, int rnr_retry, int rd_atomic,
		  char *err, int errlen)
{
	struct ibv_qp_attr a;
	int r;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = d->port;
	a.pkey_index = 0;
	a.qp_access_flags = access;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("modify QP %u to INIT: %s", qp->qp_num, strerror(r));

	if (rd_atomic > d->max_qp_rd_atom)
		rd_atomic = d->max_qp_rd_atom;
	if (rd_atomic < 1)
		rd_atomic = 1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->active_mtu;
	a.dest_qp_num = rqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 12; /* 0.64 ms */
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
	a.ah_attr.grh.sgid_index = d->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = d->port;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		FAIL("modify QP %u to RTR (remote QP %u): %s", qp->qp_num, rqpn, strerror(r));

	if (rd_atomic > d->max_qp_init_rd_atom)
		rd_atomic = d->max_qp_init_rd_atom > 0 ? d->max_qp_init_rd_atom : 1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.sq_psn = lpsn;
	a.max_rd_atomic = rd_atomic;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		FAIL("modify QP %u to RTS: %s", qp->qp_num, strerror(r));
	return 0;
}

int sl_qp_to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

int sl_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -errno;
	return a.qp_state;
}

int sl_qp_destroy(struct ibv_qp *qp) { return ibv_destroy_qp(qp); }

/* sl_post_send posts wrs as one chain: one doorbell for the lot. */
int sl_post_send(struct ibv_qp *qp, const sl_wr *wrs, int n)
{
	struct ibv_send_wr stackw[16], *w = stackw, *bad;
	struct ibv_sge stacks[16], *s = stacks;
	int i, r;
	if (n <= 0)
		return 0;
	if (n > 16) {
		w = malloc(n * sizeof *w);
		s = malloc(n * sizeof *s);
		if (!w || !s) {
			free(w);
			free(s);
			return ENOMEM;
		}
	}
	memset(w, 0, n * sizeof *w);
	for (i = 0; i < n; i++) {
		const sl_wr *x = &wrs[i];
		w[i].wr_id = x->wr_id;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
		w[i].opcode = x->opcode;
		w[i].send_flags = x->flags;
		if (x->llen > 0) {
			s[i].addr = x->laddr;
			s[i].length = x->llen;
			s[i].lkey = x->lkey;
			w[i].sg_list = &s[i];
			w[i].num_sge = 1;
		}
		switch (x->opcode) {
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w[i].wr.atomic.remote_addr = x->raddr;
			w[i].wr.atomic.rkey = x->rkey;
			w[i].wr.atomic.compare_add = x->compare_add;
			w[i].wr.atomic.swap = x->swap;
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w[i].imm_data = x->imm;
			/* fall through */
		case IBV_WR_RDMA_READ:
		case IBV_WR_RDMA_WRITE:
			w[i].wr.rdma.remote_addr = x->raddr;
			w[i].wr.rdma.rkey = x->rkey;
			break;
		case IBV_WR_SEND_WITH_IMM:
			w[i].imm_data = x->imm;
			break;
		}
	}
	r = ibv_post_send(qp, w, &bad);
	if (w != stackw) {
		free(w);
		free(s);
	}
	return r;
}

int sl_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = {.addr = addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr w = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &w, &bad);
}

static void copy_wc(sl_wc *out, const struct ibv_wc *wc, int n)
{
	int i;
	for (i = 0; i < n; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].wc_flags = wc[i].wc_flags;
	}
}

/* sl_poll_now returns what the completion queue holds, without waiting or
 * arming: the busy-poll step. */
int sl_poll_now(sl_dev *d, sl_wc *out, int max)
{
	struct ibv_wc wc[32];
	int n;
	if (max > 32)
		max = 32;
	n = ibv_poll_cq(d->cq, max, wc);
	if (n < 0)
		return -EIO;
	copy_wc(out, wc, n);
	return n;
}

/* sl_poll returns up to max completions, waiting up to timeout_ms for the
 * first: it polls, arms the CQ and polls again (a completion that arrived
 * before arming raises no event), then sleeps on the completion channel. It
 * returns 0 on timeout and -errno on failure. One goroutine polls a CQ. */
int sl_poll(sl_dev *d, sl_wc *out, int max, int timeout_ms)
{
	struct ibv_wc wc[32];
	int n;
	if (max > 32)
		max = 32;
	for (;;) {
		n = ibv_poll_cq(d->cq, max, wc);
		if (n < 0)
			return -EIO;
		if (n > 0) {
			copy_wc(out, wc, n);
			return n;
		}
		if (!d->armed) {
			if (ibv_req_notify_cq(d->cq, 0))
				return -errno;
			d->armed = 1;
			continue;
		}
		struct pollfd p = {.fd = d->ch->fd, .events = POLLIN};
		int r = poll(&p, 1, timeout_ms);
		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR)
				return 0;
			return -errno;
		}
		struct ibv_cq *c;
		void *x;
		while (ibv_get_cq_event(d->ch, &c, &x) == 0) {
			ibv_ack_cq_events(c, 1);
			d->armed = 0;
		}
	}
}

const char *sl_wc_status_str(int status) { return ibv_wc_status_str(status); }
