/* RMA and atomics, the initiator's side (the regions are the domain's, dfi_domain.c):
 * the library's one-sided operations (dd_mailbox_rma) on the endpoint's mailbox —
 * it connects to the region on first use with the key, checks bounds against the
 * region's reply (FI_MR_VIRT_ADDR: the region says its base), registers our buffer for
 * the time of the operation (no staging copy) and completes in the mailbox's queue.
 * Here: a record per request (an injected write's copy; for atomics of several words,
 * one library operation per word). Atomics: 64-bit integers, FI_SUM, FI_ATOMIC_READ
 * (adding 0), FI_ATOMIC_WRITE (an 8-byte write), FI_CSWAP. What the target refuses
 * (bounds, rights, key) completes FI_EACCES. Not provided: remote CQ data, remote
 * counters, several iovecs.
 */
#include "dfi.h"

enum { K_WRITE, K_READ, K_ATOMIC, K_FETCH, K_CSWAP };

struct rtx {
    int kind, err, inject, parts; /* parts: library operations not yet complete */
    uint8_t *copy;                /* operands we own: an injected write, atomics' words */
    uint64_t scratch;             /* where a non-fetching atomic's old value lands */
    void *ctx;
};

/* A library completion of one of the endpoint's RMA records. */
void dfi_rma_retire(struct dfi_ep *ep, const struct dd_tag_completion *c) {
    struct rtx *t = (struct rtx *)(uintptr_t)c->context;
    if (c->status != DD_MB_SUCCESS && !t->err)
        t->err = c->status == DD_MB_REFUSED ? FI_EACCES : FI_EIO;
    if (--t->parts > 0)
        return;
    static const uint64_t kind_flags[] = {
        [K_WRITE] = FI_RMA | FI_WRITE, [K_READ] = FI_RMA | FI_READ, [K_ATOMIC] = FI_ATOMIC | FI_WRITE,
        [K_FETCH] = FI_ATOMIC | FI_READ, [K_CSWAP] = FI_ATOMIC | FI_READ,
    };
    uint64_t f = kind_flags[t->kind];
    struct dfi_cntr *cn = ep->cntr[f & FI_READ ? C_READ : C_WRITE];
    if (t->err)
        dfi_fail(ep->txcq, cn, t->ctx, f, t->err, 0, 0, 0, 0);
    else
        dfi_complete(t->inject ? NULL : ep->txcq, cn, t->ctx, f, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL);
    ep->sends--;
    free(t->copy), free(t);
}

/* Starts a one-sided request of `len` bytes (atomics: `len` / 8 words). */
static ssize_t rma(struct fid_ep *fep, int kind, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
                   uint64_t key, void *ctx, int inject, void *result, const void *compare, enum fi_op op) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)fep;
    uint32_t peer;
    if (!ep->mb)
        return -FI_EOPBADSTATE;
    if (dest == FI_ADDR_UNSPEC || dfi_to_peer(ep, dest, &peer))
        return -FI_EINVAL;
    struct rtx *t = calloc(1, sizeof *t);
    int atomic = kind >= K_ATOMIC, own = (inject && kind == K_WRITE) || atomic;
    if (t && own && (t->copy = malloc(len ? len : 1)) && buf)
        memcpy(t->copy, buf, len);
    if (!t || (own && !t->copy)) {
        free(t);
        return -FI_ENOMEM;
    }
    t->kind = kind, t->ctx = ctx, t->inject = inject;
    size_t words = atomic ? len / 8 : 1;
    t->parts = (int)words + 1; /* + 1 until every part is started */
    ep->sends++;
    for (size_t i = 0; i < words; i++) {
        uint64_t operand = 0, cmp = 0;
        if (atomic && buf)
            memcpy(&operand, t->copy + 8 * i, 8);
        if (compare)
            memcpy(&cmp, (const uint8_t *)compare + 8 * i, 8);
        uint32_t o = kind == K_WRITE || (kind == K_ATOMIC && op == FI_ATOMIC_WRITE) ? DD_RMA_WRITE
                     : kind == K_READ                                               ? DD_RMA_READ
                     : kind == K_CSWAP                                              ? DD_RMA_CMP_SWAP
                                                                                    : DD_RMA_FETCH_ADD;
        void *local = kind == K_READ    ? (void *)buf
                      : o == DD_RMA_WRITE ? (own ? (void *)(t->copy + 8 * i) : (void *)buf)
                      : result          ? (void *)((uint8_t *)result + 8 * i)
                                        : (void *)&t->scratch; /* a FI_SUM's old value, unwanted */
        if (o == DD_RMA_FETCH_ADD && op != FI_SUM)
            operand = 0; /* FI_ATOMIC_READ */
        if (dd_mailbox_rma(ep->mb, peer, o, key, addr + 8 * i, local, atomic ? 8 : len, operand, cmp,
                           (uint64_t)(uintptr_t)t) < 0) {
            t->err = FI_EINVAL;
            t->parts -= (int)(words - i);
            break;
        }
    }
    struct dd_tag_completion last = {.context = (uint64_t)(uintptr_t)t, .status = DD_MB_SUCCESS};
    dfi_rma_retire(ep, &last); /* the + 1: completes it if nothing was started */
    dd_device_progress(dfi_dev); /* a doorbell */
    return 0;
}

/* One iovec only; message forms. */
#define IOV0(iov, n) ((n) ? (iov)[0].iov_base : NULL), ((n) ? (iov)[0].iov_len : 0)
static ssize_t rma_msg(struct fid_ep *e, int kind, const struct fi_msg_rma *m, uint64_t f) {
    if (m->iov_count > 1 || m->rma_iov_count != 1 || (f & FI_REMOTE_CQ_DATA))
        return -FI_EINVAL;
    return rma(e, kind, IOV0(m->msg_iov, m->iov_count), m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->context,
               kind == K_WRITE && (f & FI_INJECT) && !(f & FI_COMPLETION), NULL, NULL, 0);
}
static ssize_t rma_read(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t a, uint64_t addr, uint64_t k, void *c) {
    return (void)d, rma(e, K_READ, b, l, a, addr, k, c, 0, NULL, NULL, 0);
}
static ssize_t rma_readv(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, uint64_t addr,
                         uint64_t k, void *c) {
    return (void)d, n > 1 ? -FI_EINVAL : rma(e, K_READ, IOV0(iov, n), a, addr, k, c, 0, NULL, NULL, 0);
}
static ssize_t rma_readmsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t f) {
    return rma_msg(e, K_READ, m, f);
}
static ssize_t rma_write(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t addr, uint64_t k,
                         void *c) {
    return (void)d, rma(e, K_WRITE, b, l, a, addr, k, c, 0, NULL, NULL, 0);
}
static ssize_t rma_writev(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, uint64_t addr,
                          uint64_t k, void *c) {
    return (void)d, n > 1 ? -FI_EINVAL : rma(e, K_WRITE, IOV0(iov, n), a, addr, k, c, 0, NULL, NULL, 0);
}
static ssize_t rma_writemsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t f) {
    return rma_msg(e, K_WRITE, m, f);
}
static ssize_t rma_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t addr, uint64_t k) {
    return rma(e, K_WRITE, b, l, a, addr, k, NULL, 1, NULL, NULL, 0);
}

/* What a deposit fetch-and-add, compare-and-swap or 8-byte write does. */
static int atomic_ok(enum fi_datatype dt, enum fi_op op, int kind) {
    if (dt != FI_UINT64 && dt != FI_INT64)
        return 0;
    return kind == K_ATOMIC ? op == FI_SUM || op == FI_ATOMIC_WRITE
           : kind == K_FETCH ? op == FI_SUM || op == FI_ATOMIC_READ
                             : op == FI_CSWAP;
}

static ssize_t atomic(struct fid_ep *e, int kind, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
                      uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx, int inject, void *result,
                      const void *compare) {
    if (!atomic_ok(dt, op, kind))
        return -FI_EOPNOTSUPP;
    return addr % 8 ? -FI_EINVAL : rma(e, kind, buf, count * 8, dest, addr, key, ctx, inject, result, compare, op);
}

static ssize_t at_write(struct fid_ep *e, const void *b, size_t n, void *d, fi_addr_t a, uint64_t addr, uint64_t k,
                        enum fi_datatype dt, enum fi_op op, void *c) {
    return (void)d, atomic(e, K_ATOMIC, b, n, a, addr, k, dt, op, c, 0, NULL, NULL);
}
static ssize_t at_writev(struct fid_ep *e, const struct fi_ioc *iov, void **d, size_t n, fi_addr_t a, uint64_t addr,
                         uint64_t k, enum fi_datatype dt, enum fi_op op, void *c) {
    (void)d;
    return n != 1 ? -FI_EINVAL : atomic(e, K_ATOMIC, iov[0].addr, iov[0].count, a, addr, k, dt, op, c, 0, NULL, NULL);
}
static ssize_t at_writemsg(struct fid_ep *e, const struct fi_msg_atomic *m, uint64_t f) {
    if (m->iov_count != 1 || m->rma_iov_count != 1)
        return -FI_EINVAL;
    return atomic(e, K_ATOMIC, m->msg_iov[0].addr, m->msg_iov[0].count, m->addr, m->rma_iov[0].addr,
                  m->rma_iov[0].key, m->datatype, m->op, m->context, (f & FI_INJECT) && !(f & FI_COMPLETION), NULL,
                  NULL);
}
static ssize_t at_inject(struct fid_ep *e, const void *b, size_t n, fi_addr_t a, uint64_t addr, uint64_t k,
                         enum fi_datatype dt, enum fi_op op) {
    return atomic(e, K_ATOMIC, b, n, a, addr, k, dt, op, NULL, 1, NULL, NULL);
}
static ssize_t at_readwrite(struct fid_ep *e, const void *b, size_t n, void *d, void *res, void *rd, fi_addr_t a,
                            uint64_t addr, uint64_t k, enum fi_datatype dt, enum fi_op op, void *c) {
    return (void)d, (void)rd, atomic(e, K_FETCH, b, n, a, addr, k, dt, op, c, 0, res, NULL);
}
static ssize_t at_readwritev(struct fid_ep *e, const struct fi_ioc *iov, void **d, size_t n, struct fi_ioc *res,
                             void **rd, size_t rn, fi_addr_t a, uint64_t addr, uint64_t k, enum fi_datatype dt,
                             enum fi_op op, void *c) {
    (void)d, (void)rd;
    if (n != 1 || rn != 1)
        return -FI_EINVAL;
    return atomic(e, K_FETCH, iov[0].addr, res[0].count, a, addr, k, dt, op, c, 0, res[0].addr, NULL);
}
static ssize_t at_readwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m, struct fi_ioc *res, void **rd,
                               size_t rn, uint64_t f) {
    (void)rd, (void)f;
    if (m->rma_iov_count != 1 || rn != 1)
        return -FI_EINVAL;
    return atomic(e, K_FETCH, m->iov_count ? m->msg_iov[0].addr : NULL, res[0].count, m->addr, m->rma_iov[0].addr,
                  m->rma_iov[0].key, m->datatype, m->op, m->context, 0, res[0].addr, NULL);
}
static ssize_t at_compwrite(struct fid_ep *e, const void *b, size_t n, void *d, const void *cmp, void *cd, void *res,
                            void *rd, fi_addr_t a, uint64_t addr, uint64_t k, enum fi_datatype dt, enum fi_op op,
                            void *c) {
    (void)d, (void)cd, (void)rd;
    return atomic(e, K_CSWAP, b, n, a, addr, k, dt, op, c, 0, res, cmp);
}
static ssize_t at_compwritev(struct fid_ep *e, const struct fi_ioc *iov, void **d, size_t n,
                             const struct fi_ioc *cmp, void **cd, size_t cn, struct fi_ioc *res, void **rd, size_t rn,
                             fi_addr_t a, uint64_t addr, uint64_t k, enum fi_datatype dt, enum fi_op op, void *c) {
    (void)d, (void)cd, (void)rd;
    if (n != 1 || cn != 1 || rn != 1 || cmp[0].count != iov[0].count)
        return -FI_EINVAL;
    return atomic(e, K_CSWAP, iov[0].addr, iov[0].count, a, addr, k, dt, op, c, 0, res[0].addr, cmp[0].addr);
}
static ssize_t at_compwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m, const struct fi_ioc *cmp, void **cd,
                               size_t cn, struct fi_ioc *res, void **rd, size_t rn, uint64_t f) {
    (void)cd, (void)rd, (void)f;
    if (m->iov_count != 1 || m->rma_iov_count != 1 || cn != 1 || rn != 1)
        return -FI_EINVAL;
    return atomic(e, K_CSWAP, m->msg_iov[0].addr, m->msg_iov[0].count, m->addr, m->rma_iov[0].addr,
                  m->rma_iov[0].key, m->datatype, m->op, m->context, 0, res[0].addr, cmp[0].addr);
}

static int valid(enum fi_datatype dt, enum fi_op op, size_t *count, int kind) {
    *count = 1024;
    return atomic_ok(dt, op, kind) ? 0 : -FI_EOPNOTSUPP;
}
static int at_writevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *n) {
    return (void)e, valid(dt, op, n, K_ATOMIC);
}
static int at_readwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *n) {
    return (void)e, valid(dt, op, n, K_FETCH);
}
static int at_compwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *n) {
    return (void)e, valid(dt, op, n, K_CSWAP);
}

int dfi_query_atomic(struct fid_domain *d, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr *attr,
                     uint64_t flags) {
    (void)d;
    attr->size = 8;
    return valid(dt, op, &attr->count,
                 (flags & FI_COMPARE_ATOMIC) ? K_CSWAP : (flags & FI_FETCH_ATOMIC) ? K_FETCH : K_ATOMIC);
}

struct fi_ops_rma dfi_rma_ops = {
    .size = sizeof(struct fi_ops_rma), .read = rma_read, .readv = rma_readv, .readmsg = rma_readmsg,
    .write = rma_write, .writev = rma_writev, .writemsg = rma_writemsg, .inject = rma_inject,
    .writedata = (void *)dfi_nosys_ssize, .injectdata = (void *)dfi_nosys_ssize,
};
struct fi_ops_atomic dfi_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic), .write = at_write, .writev = at_writev, .writemsg = at_writemsg,
    .inject = at_inject, .readwrite = at_readwrite, .readwritev = at_readwritev, .readwritemsg = at_readwritemsg,
    .compwrite = at_compwrite, .compwritev = at_compwritev, .compwritemsg = at_compwritemsg,
    .writevalid = at_writevalid, .readwritevalid = at_readwritevalid, .compwritevalid = at_compwritevalid,
};
