/* The libfabric provider "deposit" (libdeposit-fi.so): glue between libfabric's
 * objects and deposit's C ABI, so that libfabric programs and MPI (Open MPI's mtl ofi,
 * or its btl ofi under pml ob1) run over deposit. FI_EP_RDM; messages over the
 * library's mailboxes (dd_mailbox_*), RMA and atomics as the mailboxes' one-sided
 * operations on regions they expose (dd_mailbox_rma, dd_mailbox_expose). One file per libfabric object (as prov/udp):
 *   dfi_init.c    the provider, fi_getinfo's attributes, fabric, event queue
 *   dfi_domain.c  the device (from DEPOSIT_FI_*), domain, progress, memory regions
 *   dfi_av.c      address vectors        dfi_cq.c   completion queues, counters, waits
 *   dfi_ep.c      endpoints: messages    dfi_rma.c  RMA and atomics (the initiator)
 *   dfi_cm.c      FI_EP_MSG: passive endpoints, connections, event queues
 * How each call maps, the environment, what is not provided: docs/design.md §12,
 * "The libfabric provider".
 */
#ifndef DFI_H
#define DFI_H
#include <deposit.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROV_NAME "deposit"
#define PROV_VERSION FI_VERSION(0, 2)
#define API_VERSION FI_VERSION(1, 17)
#define IOV_LIMIT 4     /* more than one: gathered into / scattered from a bounce copy */
#define MAX_MSG UINT32_MAX
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* An endpoint's name (fi_getname, the AV's entries; 20 bytes): the node's address in
 * address order, IPv6 or IPv4-mapped (::ffff:a.b.c.d), as dd_mailbox_addr6 gives it,
 * and the mailbox's service. */
struct dfi_addr {
    uint8_t ip[16];
    uint32_t service;
};

/* What a completion counts into (dfi_ep.cntr[]). */
enum { C_SEND, C_RECV, C_WRITE, C_READ, C_N };

struct dfi_cntr {
    struct fid_cntr fid;
    uint64_t value, err;
};

struct dfi_entry {
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
};

struct dfi_cq {
    struct fid_cq fid;
    size_t size; /* of an entry in its format */
    struct dfi_entry *e; /* [head, tail) waiting to be read; grows, never drops */
    size_t head, tail, cap;
    struct fi_cq_err_entry *x;
    size_t xhead, xtail, xcap;
    int drained; /* the last read returned entries and emptied the queue */
};

struct dfi_av {
    struct fid_av fid;
    struct dfi_addr *table;
    size_t n, cap;
};

struct dfi_op;
struct dfi_eq;
struct cm_msg;

/* FI_EP_MSG: the tag bit of connection management (dfi_cm.c), private data carried,
 * and a connected endpoint's state. */
#define DFI_CM_TAG (1ull << 63)
#define DFI_CM_DATA 56
enum { DFI_IDLE, DFI_CONNECTING, DFI_CONNECTED };

struct dfi_ep {
    struct fid_ep fid;
    struct dfi_ep *next; /* every endpoint, for progress */
    struct fi_info *info;
    struct dfi_cq *txcq, *rxcq;
    struct dfi_cntr *cntr[C_N];
    int tx_selective, rx_selective; /* FI_SELECTIVE_COMPLETION at bind */
    struct dfi_av *av;
    struct dd_mailbox *mb; /* NULL until enabled */
    uint32_t service, eager_max;
    /* Peers: AV index -> mailbox peer number, and back (FI_SOURCE); 12 bytes each. */
    uint32_t *peer;
    fi_addr_t *addr;
    size_t npeer, naddr;
    struct dfi_op *spare, *live; /* free records; posted receives, claims, held */
    size_t sends, nheld;         /* sends and RMA not yet complete; held peeked messages */
    /* FI_EP_MSG: its event queue, state, peer and the CM message it listens for. */
    int msg, state;
    struct dfi_eq *eq;
    uint32_t cm_peer;
    struct cm_msg *cm_rx;
};

/* Every entry point holds the domain's lock (recursive) until it returns, and counts
 * a call: the guard thread (dfi_domain.c) takes a turn of progress only when no call
 * came for 1 ms. */
extern pthread_mutex_t dfi_lock;
extern unsigned dfi_calls;
static inline void dfi_unlock(int *p) { (void)p, pthread_mutex_unlock(&dfi_lock); }
#define LOCK                                                                                       \
    pthread_mutex_lock(&dfi_lock);                                                                 \
    __atomic_store_n(&dfi_calls, dfi_calls + 1, __ATOMIC_RELAXED);                                 \
    __attribute__((cleanup(dfi_unlock))) int dfi_locked_ = 0;                                      \
    (void)dfi_locked_

/* dfi_domain.c */
int dfi_device_get(void);
void dfi_device_put(void);
extern struct dd_device *dfi_dev;
extern uint8_t dfi_ip[16]; /* this node's, as in struct dfi_addr */
extern struct dfi_ep *dfi_eps;
extern int dfi_virt_addr, dfi_next_service;
extern uint64_t dfi_events; /* completions retired so far (has progress found any?) */
void dfi_progress(void);
int dfi_fabric_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **out, void *ctx);
int dfi_slots(void);
void dfi_cleanup(void);

/* dfi_cq.c */
int dfi_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx);
int dfi_cntr_open(struct fid_domain *d, struct fi_cntr_attr *attr, struct fid_cntr **out, void *ctx);
void dfi_complete(struct dfi_cq *cq, struct dfi_cntr *cn, void *ctx, uint64_t flags, size_t len, void *buf,
                  uint64_t data, uint64_t tag, fi_addr_t src);
void dfi_fail(struct dfi_cq *cq, struct dfi_cntr *cn, void *ctx, uint64_t flags, int err, size_t len,
              size_t olen, uint64_t tag, uint64_t data);
int dfi_trywait(struct fid_fabric *fab, struct fid **fids, int count);
const char *dfi_strerror(struct fid_cq *f, int prov_errno, const void *err_data, char *buf, size_t len);

/* dfi_av.c */
int dfi_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx);

/* dfi_ep.c */
int dfi_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx);
void dfi_ep_progress(struct dfi_ep *ep);
const struct dfi_addr *dfi_av_entry(struct dfi_ep *ep, fi_addr_t a);
int dfi_to_peer(struct dfi_ep *ep, fi_addr_t a, uint32_t *peer);
int dfi_ep_enable(struct dfi_ep *ep);
int dfi_ep_getname(fid_t f, void *addr, size_t *len);

/* dfi_cm.c */
int dfi_eq_open(struct fid_fabric *fab, struct fi_eq_attr *attr, struct fid_eq **out, void *ctx);
int dfi_passive_ep(struct fid_fabric *fab, struct fi_info *info, struct fid_pep **out, void *ctx);
int dfi_cm_enable(struct dfi_ep *ep);
void dfi_cm_retire(struct dfi_ep *ep, const struct dd_tag_completion *c);
extern struct fi_ops_cm dfi_msg_cm_ops;

/* dfi_rma.c */
extern struct fi_ops_rma dfi_rma_ops;
extern struct fi_ops_atomic dfi_atomic_ops;
void dfi_rma_retire(struct dfi_ep *ep, const struct dd_tag_completion *c);
int dfi_query_atomic(struct fid_domain *d, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr *attr,
                     uint64_t flags);

/* Unsupported operations of every signature (the callers only look at the result). */
int dfi_nosys();
ssize_t dfi_nosys_ssize();
int dfi_close_free(struct fid *f); /* closes an object that owns nothing but itself */
#define FI_OPS(close_, bind_, control_)                                                            \
    {sizeof(struct fi_ops), close_, (void *)(bind_), (void *)(control_), (void *)dfi_nosys,          \
     (void *)dfi_nosys, (void *)dfi_nosys}
#endif
