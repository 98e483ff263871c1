/* RMA and atomics, the initiator's side (the regions are the domain's, dfi_domain.c):
 * deposit's own writes, reads, fetch-and-add and compare-and-swap on a connection to
 * the region's listener, opened on first use (blocking: the CM timeout) with the key
 * as private data; the reply gives the region's address and length (FI_MR_VIRT_ADDR:
 * remote addresses are virtual addresses, else offsets). Requests queue in order and
 * move through an endpoint's staging slots (made on first use, with a completion queue
 * of their own): writes are copied into them, reads and fetched values copied out.
 * Atomics: 64-bit integers, FI_SUM, FI_ATOMIC_READ (adding 0), FI_ATOMIC_WRITE (an
 * 8-byte write), FI_CSWAP. What the target refuses (bounds, rights, key) completes
 * FI_EACCES. Not provided: remote CQ data, remote counters, several iovecs.
 */
#include "dfi.h"

#define STAGE 256
enum { K_WRITE, K_READ, K_ATOMIC, K_FETCH, K_CSWAP };

struct rtx {
    struct rtx *next;
    int kind, err, inject, frags; /* frags: slots posted, not yet completed */
    enum fi_op aop;
    fi_addr_t dest;
    uint64_t key, raddr; /* raddr: an offset into the region once connected */
    size_t len, off;
    const uint8_t *buf;
    uint8_t *copy, *result, *compare; /* copy: the operands (atomics, injected writes) */
    struct dd_conn *conn;
    void *ctx;
};

struct rmr { /* a region we reach */
    fi_addr_t dest;
    uint64_t key, base, len;
    struct dd_conn *conn;
};

struct dfi_rma {
    struct dd_endpoint *stage;
    struct dd_cq *cq;
    struct rtx *q, *tail;
    struct rtx *owner[STAGE]; /* what each staging slot holds until it completes */
    size_t at[STAGE];
    uint32_t len[STAGE];
    int nfree;
    struct rmr *rmrs;
    int n, cap;
};

static uint8_t *slot(struct dfi_rma *r, int s) { return (uint8_t *)dd_endpoint_ptr(r->stage) + (size_t)s * RMA_SLOT; }

static struct rmr *rmr_get(struct dfi_ep *ep, fi_addr_t dest, uint64_t key) {
    struct dfi_rma *r = ep->rma;
    for (int i = 0; i < r->n; i++)
        if (r->rmrs[i].dest == dest && r->rmrs[i].key == key)
            return &r->rmrs[i];
    const struct dfi_addr *a = dfi_av_entry(ep, dest);
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        struct rmr *n = realloc(r->rmrs, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        r->rmrs = n, r->cap = cap;
    }
    struct dd_conn_options o = {0};
    o.private_data = &key, o.private_data_len = sizeof key;
    struct dd_conn *c;
    const void *pd;
    uint32_t len;
    if (!a || dd_connect(dfi_dev, a->ip, (uint32_t)key, r->stage, r->cq, &o, &c) < 0)
        return NULL; /* refused: no region with that key there */
    if (dd_conn_private_data(c, &pd, &len) < 0 || len < 16) {
        dd_conn_close(c);
        return NULL;
    }
    struct rmr *m = &r->rmrs[r->n++];
    m->dest = dest, m->key = key, m->conn = c;
    memcpy(&m->base, pd, 8);
    memcpy(&m->len, (const uint8_t *)pd + 8, 8);
    return m;
}

static void rtx_done(struct dfi_ep *ep, struct rtx *t) {
    struct dfi_rma *r = ep->rma;
    struct rtx **pp = &r->q, *prev = NULL;
    while (*pp && *pp != t)
        prev = *pp, pp = &(*pp)->next;
    if (*pp)
        *pp = t->next, r->tail = r->tail == t ? prev : r->tail;
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
    free(t->copy), free(t->compare), free(t);
}

/* Moves as much of a request as staging allows. */
static void push(struct dfi_ep *ep, struct dfi_rma *r, struct rtx *t) {
    if (!t->conn && t->off < t->len) {
        struct rmr *m = rmr_get(ep, t->dest, t->key);
        uint64_t at = m ? t->raddr - (dfi_virt_addr ? m->base : 0) : 0;
        if (!m)
            t->err = FI_EACCES, t->off = t->len;
        else if ((dfi_virt_addr && t->raddr < m->base) || at + t->len > UINT32_MAX)
            t->err = FI_EINVAL, t->off = t->len;
        else
            t->raddr = at, t->conn = m->conn;
    }
    for (int s = 0; t->off < t->len && r->nfree > 0 && s < STAGE; s++) {
        if (r->owner[s])
            continue;
        int atomic = t->kind >= K_ATOMIC;
        size_t n = atomic ? 8 : MIN(t->len - t->off, RMA_SLOT);
        uint64_t operand = 0;
        if (atomic && t->copy)
            memcpy(&operand, t->copy + t->off, 8);
        struct dd_wr w = {.wr_id = (uint64_t)s, .flags = DD_WR_SIGNALED, .local = r->stage};
        w.local_offset = (uint64_t)s * RMA_SLOT, w.length = (uint32_t)n;
        w.remote_offset = (uint32_t)(t->raddr + t->off);
        if (t->kind == K_WRITE || (t->kind == K_ATOMIC && t->aop == FI_ATOMIC_WRITE)) {
            w.opcode = DD_OP_WRITE;
            memcpy(slot(r, s), (t->kind == K_WRITE ? t->buf : t->copy) + t->off, n);
        } else if (t->kind == K_READ) {
            w.opcode = DD_OP_READ;
        } else if (t->kind == K_CSWAP) {
            w.opcode = DD_OP_CMP_SWAP, w.swap = operand;
            memcpy(&w.compare, t->compare + t->off, 8);
        } else { /* FI_SUM, and FI_ATOMIC_READ as adding 0 */
            w.opcode = DD_OP_FETCH_ADD, w.add = t->aop == FI_SUM ? operand : 0;
        }
        int rc = dd_post(t->conn, &w);
        if (rc < 0) {
            if (rc != DD_ERR_AGAIN)
                t->err = FI_EIO, t->off = t->len;
            break;
        }
        r->owner[s] = t, r->at[s] = t->off, r->len[s] = (uint32_t)n, r->nfree--;
        t->frags++, t->off += n;
    }
    if (t->off >= t->len && t->frags == 0)
        rtx_done(ep, t);
}

void dfi_rma_progress(struct dfi_ep *ep) {
    struct dfi_rma *r = ep->rma;
    struct dd_completion wc[64];
    int n;
    while ((n = dd_cq_take(r->cq, wc, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            int s = (int)wc[i].wr_id;
            struct rtx *t = s >= 0 && s < STAGE ? r->owner[s] : NULL;
            if (!t)
                continue;
            r->owner[s] = NULL, r->nfree++;
            if (wc[i].status != DD_WC_SUCCESS) /* the target refused it: bounds, rights */
                t->err = wc[i].remote_reason >= 0 ? FI_EACCES : FI_EIO, t->off = t->len;
            else if (t->result) /* reads, fetching and compare atomics */
                memcpy(t->result + r->at[s], slot(r, s), r->len[s]);
            if (--t->frags == 0 && t->off >= t->len)
                rtx_done(ep, t);
        }
    }
    for (struct rtx *t = r->q, *next; t && r->nfree > 0; t = next)
        next = t->next, push(ep, r, t);
}

void dfi_rma_close(struct dfi_ep *ep) {
    struct dfi_rma *r = ep->rma;
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        dd_conn_close(r->rmrs[i].conn);
    for (struct rtx *t = r->q, *n; t; t = n)
        n = t->next, free(t->copy), free(t->compare), free(t);
    free(r->rmrs);
    dd_cq_destroy(r->cq);
    dd_endpoint_free(r->stage);
    free(r);
}

/* Queues a one-sided request of `len` bytes (atomics: `len` / 8 words). */
static ssize_t rma(struct fid_ep *fep, int kind, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
                   uint64_t key, void *ctx, int inject, void *result, const void *compare, enum fi_op op) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)fep;
    if (!ep->mb)
        return -FI_EOPBADSTATE;
    if (!dfi_av_entry(ep, dest))
        return -FI_EINVAL;
    struct dfi_rma *r = ep->rma;
    if (!r && (r = ep->rma = calloc(1, sizeof *r))) {
        r->nfree = STAGE;
        if (dd_endpoint_alloc(dfi_dev, (uint64_t)STAGE * RMA_SLOT, 0, &r->stage) < 0 ||
            dd_cq_create(dfi_dev, 4 * STAGE, &r->cq) < 0) {
            fprintf(stderr, "deposit-fi: RMA staging: %s\n", dd_last_error());
            if (r->stage)
                dd_endpoint_free(r->stage);
            free(r), r = ep->rma = NULL;
        }
    }
    struct rtx *t = r ? calloc(1, sizeof *t) : NULL;
    if (!t)
        return -FI_ENOMEM;
    t->kind = kind, t->buf = buf, t->len = len, t->dest = dest, t->ctx = ctx, t->inject = inject;
    t->raddr = addr, t->key = key, t->result = kind == K_READ ? (uint8_t *)buf : result, t->aop = op;
    /* Operands are ours from now on (an inject's buffer is the caller's again at once). */
    int own = (inject && kind == K_WRITE) || kind >= K_ATOMIC;
    if (own && (t->copy = malloc(len ? len : 1)) && buf)
        memcpy(t->copy, buf, len);
    if (kind == K_WRITE && own)
        t->buf = t->copy;
    if (compare && (t->compare = malloc(len)))
        memcpy(t->compare, compare, len);
    if ((own && !t->copy) || (compare && !t->compare)) {
        free(t->copy), free(t->compare), free(t);
        return -FI_ENOMEM;
    }
    *(r->tail ? &r->tail->next : &r->q) = t;
    r->tail = t;
    push(ep, r, t);
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
    *count = RMA_SLOT / 8;
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
