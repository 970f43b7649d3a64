/* The C side of package ibv: thin, allocation-free wrappers over
 * libibverbs that take and return plain values, so that Go never touches a
 * libibverbs struct layout. Compiled only with the verbs build tag. */
#ifndef SHIFTLOCK_IBV_SHIM_H
#define SHIFTLOCK_IBV_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs.h>

typedef struct sl_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int armed;
	uint8_t port;
	int gid_index;
	uint8_t gid[16];
	int active_mtu; /* enum ibv_mtu */
	/* capabilities */
	int atomic_cap;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
	int max_qp_wr;
	int max_cqe;
	int max_sge;
	uint64_t max_mr_size;
	uint64_t device_cap_flags_ex;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	char fw_ver[64];
	char name[64];
	char driver[64];
} sl_dev;

/* One work request, flat. opcode is an IBV_WR_* value, flags IBV_SEND_*. */
typedef struct sl_wr {
	uint64_t wr_id;
	uint64_t laddr;
	uint64_t raddr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t llen;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t opcode;
	uint32_t flags;
	uint32_t imm;
} sl_wr;

/* One completion, flat. */
typedef struct sl_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t vendor_err;
	uint32_t wc_flags;
} sl_wc;

int sl_open(const char *name, int port, int gid_index, int cqe, sl_dev **out, char *err, int errlen);
void sl_close(sl_dev *d);
int sl_device_names(char *buf, int len);

struct ibv_mr *sl_reg_mr(sl_dev *d, void *addr, size_t len, int access, char *err, int errlen);
int sl_dereg_mr(struct ibv_mr *mr);
uint32_t sl_mr_lkey(struct ibv_mr *mr);
uint32_t sl_mr_rkey(struct ibv_mr *mr);

struct ibv_qp *sl_qp_create(sl_dev *d, int max_send, int max_recv, int max_inline, uint32_t *qpn, uint32_t *inline_out, char *err, int errlen);
int sl_qp_connect(sl_dev *d, struct ibv_qp *qp, uint32_t rqpn, uint32_t rpsn, uint32_t lpsn,
	const uint8_t *rgid, int access, int timeout, int retry, int rnr_retry, int rd_atomic,
	char *err, int errlen);
int sl_qp_to_error(struct ibv_qp *qp);
int sl_qp_state(struct ibv_qp *qp);
int sl_qp_destroy(struct ibv_qp *qp);

int sl_post_send(struct ibv_qp *qp, const sl_wr *wrs, int n);
int sl_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey);
int sl_poll(sl_dev *d, sl_wc *out, int max, int timeout_ms);
int sl_poll_now(sl_dev *d, sl_wc *out, int max);
const char *sl_wc_status_str(int status);

#endif
