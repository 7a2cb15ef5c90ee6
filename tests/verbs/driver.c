/* Drives the verbs control path the way an RDMA application connects an RC queue pair:
 * open, PD, MR, CQ, QP, INIT -> RTR (with the peer's QPN and GID) -> RTS, destroy. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mlx5_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int mlx5_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);

/* `driver N`: N queue pairs, each with one posted request and its completion, all alive until
 * the end (more QPs than the kernel's per-QP table holds). */
static int many_qps(int n) {
    struct ibv_device dev;
    memset(&dev, 0, sizeof(dev));
    strcpy(dev.name, "mlx5_7");
    struct ibv_context *ctx = ibv_open_device(&dev);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    static char buf[4096];
    ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC};
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 1000};
    for (int i = 0; i < n; i++) {
        struct ibv_qp *qp = ibv_create_qp(pd, &init);
        struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
        struct ibv_send_wr *bad_wr = NULL;
        mlx5_post_send(qp, &wr, &bad_wr);
        struct ibv_wc wc[1];
        mlx5_poll_cq(cq, 1, wc);
    }
    printf("done\n");
    fflush(stdout);
    getchar();
    return 0;
}

int main(int argc, char **argv) {
    struct ibv_device dev;
    memset(&dev, 0, sizeof(dev));
    strcpy(dev.name, "mlx5_7");
    printf("ready\n");
    fflush(stdout);
    getchar();
    if (argc > 1)
        return many_qps(atoi(argv[1]));

    struct ibv_context *ctx = ibv_open_device(&dev);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    static char buf[1 << 20];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);

    struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC};
    struct ibv_qp *qp = ibv_create_qp(pd, &init);
    struct ibv_qp_init_attr bad = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC};
    struct ibv_qp *failed = ibv_create_qp(pd, &bad);

    struct ibv_qp_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    ibv_modify_qp(qp, &attr, IBV_QP_STATE);

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.dest_qp_num = 0x5678;
    attr.ah_attr.is_global = 1;
    /* RoCE v2 GID of 10.0.0.2: ::ffff:10.0.0.2 */
    attr.ah_attr.grh.dgid.raw[10] = 0xff;
    attr.ah_attr.grh.dgid.raw[11] = 0xff;
    inet_pton(AF_INET, "10.0.0.2", &attr.ah_attr.grh.dgid.raw[12]);
    ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN);

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    ibv_modify_qp(qp, &attr, IBV_QP_STATE);

    /* Data path: three chained requests in one post, then one poll a millisecond later. */
    struct ibv_sge sges[4] = {
        {.addr = (uintptr_t)buf, .length = 2048}, {.addr = (uintptr_t)buf + 2048, .length = 2048},
        {.addr = (uintptr_t)buf, .length = 8192}, {.addr = (uintptr_t)buf, .length = 100},
    };
    struct ibv_send_wr wrs[3];
    memset(wrs, 0, sizeof(wrs));
    wrs[0] = (struct ibv_send_wr){.wr_id = 1, .next = &wrs[1], .sg_list = &sges[0], .num_sge = 2, .opcode = IBV_WR_SEND};
    wrs[1] = (struct ibv_send_wr){.wr_id = 2, .next = &wrs[2], .sg_list = &sges[2], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
    wrs[2] = (struct ibv_send_wr){.wr_id = 99, .next = NULL, .sg_list = &sges[3], .num_sge = 1, .opcode = IBV_WR_SEND};
    struct ibv_send_wr *bad_wr = NULL;
    mlx5_post_send(qp, &wrs[0], &bad_wr);
    usleep(1000);
    struct ibv_wc wc[8];
    int polled = mlx5_poll_cq(cq, 8, wc);

    /* A second QP stays alive until the end of the capture. */
    struct ibv_qp *alive = ibv_create_qp(pd, &init);
    printf("%u %u %d %d %p\n", qp->qp_num, alive->qp_num, failed == NULL, polled, (void *)mr);
    ibv_destroy_qp(qp);
    fflush(stdout);
    getchar();
    return 0;
}
