/* A stand-in for libibverbs with the same exported control-path functions and the real struct
 * layouts (it includes the real infiniband/verbs.h), for machines without RDMA devices. The
 * uprobes see the same symbols and the same memory they would see in libibverbs. */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_reg_mr

static uint32_t next_qp_num = 0x1230;

struct ibv_context *ibv_open_device(struct ibv_device *device) {
    (void)device;
    return calloc(1, sizeof(struct ibv_context));
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    pd->context = context;
    return pd;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
    (void)access;
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access) {
    (void)iova;
    return ibv_reg_mr(pd, addr, length, (int)access);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector) {
    (void)cq_context; (void)channel; (void)comp_vector;
    struct ibv_cq *cq = calloc(1, sizeof(*cq));
    cq->context = context;
    cq->cqe = cqe;
    return cq;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
    if (attr->qp_type == IBV_QPT_UC)  /* lets the test exercise a failing create */
        return NULL;
    struct ibv_qp *qp = calloc(1, sizeof(*qp));
    qp->pd = pd;
    qp->qp_num = next_qp_num++;
    qp->qp_type = attr->qp_type;
    qp->state = IBV_QPS_RESET;
    return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask) {
    if (attr_mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
    free(qp);
    return 0;
}

/* The provider data path, named as mlx5 names it. Real applications reach these through the
 * inline ibv_post_send / ibv_poll_cq and the context's ops table. Each posted request completes
 * at the next poll; wr_id 99 fails with IBV_WC_RETRY_EXC_ERR, like a peer that stopped acking. */
#define FAKE_CQ_DEPTH 64
static struct ibv_wc fake_cq[FAKE_CQ_DEPTH];
static int fake_cq_len;

int mlx5_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
    for (; wr; wr = wr->next) {
        if (fake_cq_len == FAKE_CQ_DEPTH) {
            *bad_wr = wr;
            return -1;
        }
        struct ibv_wc *wc = &fake_cq[fake_cq_len++];
        memset(wc, 0, sizeof(*wc));
        wc->wr_id = wr->wr_id;
        wc->status = wr->wr_id == 99 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS;
        wc->opcode = wr->opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
        wc->qp_num = qp->qp_num;
    }
    return 0;
}

int mlx5_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc) {
    (void)cq;
    int n = fake_cq_len < num_entries ? fake_cq_len : num_entries;
    memcpy(wc, fake_cq, (size_t)n * sizeof(*wc));
    memmove(fake_cq, fake_cq + n, (size_t)(fake_cq_len - n) * sizeof(*wc));
    fake_cq_len -= n;
    return n;
}
