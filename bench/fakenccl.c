/* A stand-in libnccl for the uprobe event-rate benchmark: the NCCL entry points scaletrace
 * probes, each returning ncclSuccess at once, so a tight loop of calls produces uprobe events
 * as fast as the kernel can take the traps. */
#include <stddef.h>

typedef int ncclResult_t;
#define FN(name, ...) ncclResult_t name(__VA_ARGS__) { return 0; }

FN(ncclAllReduce, const void *s, void *r, size_t n, int t, int op, void *comm, void *stream)
FN(ncclAllGather, const void *s, void *r, size_t n, int t, void *comm, void *stream)
FN(ncclReduceScatter, const void *s, void *r, size_t n, int t, int op, void *comm, void *stream)
FN(ncclBroadcast, const void *s, void *r, size_t n, int t, int root, void *comm, void *stream)
FN(ncclSend, const void *s, size_t n, int t, int peer, void *comm, void *stream)
FN(ncclRecv, void *r, size_t n, int t, int peer, void *comm, void *stream)
FN(ncclGroupStart, void)
FN(ncclGroupEnd, void)
ncclResult_t ncclCommInitRank(void **comm, int nranks, char id[128], int rank) { (void)id; *comm = 0; (void)nranks; (void)rank; return 0; }
