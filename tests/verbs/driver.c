/* Drives the verbs control path the way an RDMA application connects an RC queue pair:
 * open, PD, MR, CQ, QP, INIT -> RTR (with the peer's QPN and GID) -> RTS, destroy. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    struct ibv_device dev;
    memset(&dev, 0, sizeof(dev));
    strcpy(dev.name, "mlx5_7");
    printf("ready\n");
    fflush(stdout);
    getchar();

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

    /* A second QP stays alive until the end of the capture. */
    struct ibv_qp *alive = ibv_create_qp(pd, &init);
    printf("%u %u %d %p\n", qp->qp_num, alive->qp_num, failed == NULL, (void *)mr);
    ibv_destroy_qp(qp);
    fflush(stdout);
    getchar();
    return 0;
}
