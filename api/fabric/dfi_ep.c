/* Endpoints (FI_EP_RDM): FI_MSG and FI_TAGGED over one deposit mailbox each — its
 * ring, eager and rendezvous protocols, credits, matching, probes, claims and cancels
 * are the library's (dd_mailbox_*). Here: AV indices to mailbox peer numbers and back
 * (FI_SOURCE); a record per send and receive as its mailbox context (the application's
 * context, the receive's buffer, a bounce copy for several iovecs); libfabric's probe
 * flags onto peek, claim, recv_claimed and discard, and a held copy of a message for a
 * peek with a buffer (the mailbox's peek gives no bytes). docs/design.md §12 says what
 * each call does; not provided: FI_MULTI_RECV, cancelling a send. FI_EP_MSG endpoints are
 * these with one peer (dfi_cm.c connects them).
 */
#include "dfi.h"
#include <stddef.h>

enum { O_SEND, O_POSTED, O_CLAIMED, O_HELD, O_HELD_CLAIMED };

struct dfi_op {
    struct dfi_op *next, *prev; /* the free list, or the endpoint's live list */
    int state, silent, tagged;
    void *ctx, *buf;  /* the application's context; the receive's (first) buffer */
    uint8_t *bounce;  /* several iovecs: the gathered or landing copy; held: the message */
    struct dd_msg_info info; /* claimed and held messages */
    size_t count;
    struct iovec iov[IOV_LIMIT];
};

static struct dfi_op *op_get(struct dfi_ep *ep, void *ctx) {
    struct dfi_op *o = ep->spare;
    if (o)
        ep->spare = o->next;
    else if (!(o = malloc(sizeof *o)))
        return NULL;
    memset(o, 0, offsetof(struct dfi_op, iov));
    o->ctx = ctx;
    return o;
}

static void op_put(struct dfi_ep *ep, struct dfi_op *o) {
    free(o->bounce);
    o->bounce = NULL, o->next = ep->spare, ep->spare = o;
}

static void live_add(struct dfi_ep *ep, struct dfi_op *o) {
    o->prev = NULL, o->next = ep->live;
    if (ep->live)
        ep->live->prev = o;
    ep->live = o;
}

static void live_drop(struct dfi_ep *ep, struct dfi_op *o) {
    *(o->prev ? &o->prev->next : &ep->live) = o->next;
    if (o->next)
        o->next->prev = o->prev;
    if (o->state >= O_HELD)
        ep->nheld--;
}

/* ---- peers ------------------------------------------------------------------------ */

/* Numbers the AV's new entries as mailbox peers (no connection yet), both ways. */
static void sync_peers(struct dfi_ep *ep) {
    size_t n = ep->av ? ep->av->n : 0;
    uint32_t *p = n > ep->npeer && ep->mb ? realloc(ep->peer, n * sizeof *p) : NULL;
    if (!p)
        return;
    for (ep->peer = p; ep->npeer < n; ep->npeer++) {
        const struct dfi_addr *a = &ep->av->table[ep->npeer];
        uint32_t q;
        if (dd_mailbox_peer6(ep->mb, a->ip, a->service, &q) < 0)
            break;
        if (q >= ep->naddr) {
            size_t cap = 2 * q + 64;
            fi_addr_t *t = realloc(ep->addr, cap * sizeof *t);
            if (!t)
                break;
            for (ep->addr = t; ep->naddr < cap; ep->naddr++)
                t[ep->naddr] = FI_ADDR_NOTAVAIL;
        }
        p[ep->npeer] = q;
        if (ep->addr[q] == FI_ADDR_NOTAVAIL)
            ep->addr[q] = ep->npeer;
    }
}

int dfi_to_peer(struct dfi_ep *ep, fi_addr_t a, uint32_t *p) {
    if (a == FI_ADDR_UNSPEC)
        return *p = DD_MB_ANY_SOURCE, 0;
    if (a >= ep->npeer)
        sync_peers(ep);
    return a < ep->npeer ? (*p = ep->peer[a], 0) : -FI_EINVAL;
}

static fi_addr_t addr_of(struct dfi_ep *ep, uint32_t p) {
    if (p >= ep->naddr || ep->addr[p] == FI_ADDR_NOTAVAIL)
        sync_peers(ep);
    return p < ep->naddr ? ep->addr[p] : FI_ADDR_NOTAVAIL;
}

const struct dfi_addr *dfi_av_entry(struct dfi_ep *ep, fi_addr_t a) {
    return ep->av && a < ep->av->n ? &ep->av->table[a] : NULL;
}

/* ---- completions ------------------------------------------------------------------ */

static uint64_t rx_flags(int tagged, uint32_t mb_flags) {
    return (tagged ? FI_TAGGED : FI_MSG) | FI_RECV | (mb_flags & DD_MB_DATA ? FI_REMOTE_CQ_DATA : 0);
}

static int fi_err(int32_t status) {
    switch (status) {
    case DD_MB_TRUNCATED: return FI_ETRUNC;
    case DD_MB_CANCELLED: return FI_ECANCELED;
    case DD_MB_UNREACHABLE: return FI_EHOSTUNREACH;
    case DD_MB_REFUSED: return FI_EACCES;
    default: return FI_EIO;
    }
}

/* A mailbox completion: the record's receive or send. */
static void retire(struct dfi_ep *ep, const struct dd_tag_completion *c) {
    if (c->op >= DD_MB_OP_WRITE) {
        dfi_rma_retire(ep, c);
        return;
    }
    struct dfi_op *o = (struct dfi_op *)(uintptr_t)c->context;
    if (!o || (void *)o == (void *)ep->cm_rx) { /* connection management's */
        if (o)
            dfi_cm_retire(ep, c);
        return;
    }
    int recv = c->op == DD_MB_OP_RECV;
    if (o->state == O_HELD)
        return; /* a held message's own receive: the copy is whole, the record stays */
    if (recv)
        live_drop(ep, o);
    else
        ep->sends--;
    if (recv && o->bounce) /* several iovecs: scatter */
        for (size_t i = 0, at = 0, k; i < o->count && at < c->len; i++, at += k)
            memcpy(o->iov[i].iov_base, o->bounce + at, k = MIN(o->iov[i].iov_len, c->len - at));
    uint64_t flags = recv ? rx_flags(!!(c->flags & DD_MB_TAGGED), c->flags)
                          : (c->flags & DD_MB_TAGGED ? FI_TAGGED : FI_MSG) | FI_SEND;
    struct dfi_cq *cq = recv ? ep->rxcq : ep->txcq;
    struct dfi_cntr *cn = ep->cntr[recv ? C_RECV : C_SEND];
    if (c->status == DD_MB_SUCCESS) {
        dfi_complete(o->silent ? NULL : cq, cn, o->ctx, flags, recv ? c->len : 0, recv ? o->buf : NULL, c->data,
                     c->tag, recv ? addr_of(ep, c->src) : FI_ADDR_NOTAVAIL);
    } else {
        if (c->status == DD_MB_UNREACHABLE || c->status == DD_MB_TRANSPORT)
            fprintf(stderr, "deposit-fi: a %s failed: %s\n", recv ? "receive" : "send",
                    c->status == DD_MB_TRANSPORT ? dd_wc_status_str(c->wc_status) : "unreachable");
        dfi_fail(cq, cn, o->ctx, flags, fi_err(c->status), c->len, c->olen > c->len ? c->olen - c->len : 0, c->tag,
                 c->data);
    }
    op_put(ep, o);
}

void dfi_ep_progress(struct dfi_ep *ep) {
    struct dd_tag_completion c[64];
    int n = 64;
    while (ep->mb && n == 64) {
        n = dd_mailbox_poll(ep->mb, c, 64);
        for (int i = 0; i < n; i++)
            retire(ep, &c[i]);
    }
}

/* ---- sends and receives ---------------------------------------------------------- */

/* The one buffer a message goes from or into: the iovec's own, or for several a
 * bounce copy (gathered now for a send). Its length into *len. */
static void *one_buffer(struct dfi_op *o, const struct iovec *iov, size_t count, size_t *len, int gather) {
    *len = 0;
    for (size_t i = 0; i < count; i++)
        *len += iov[i].iov_len;
    o->buf = count ? iov[0].iov_base : NULL;
    if (count <= 1 || !(o->bounce = malloc(*len ? *len : 1)))
        return o->buf;
    memcpy(o->iov, iov, count * sizeof *iov);
    o->count = count;
    for (size_t i = 0, at = 0; gather && i < count; at += iov[i++].iov_len)
        memcpy(o->bounce + at, iov[i].iov_base, iov[i].iov_len);
    return o->bounce;
}

static ssize_t tx(struct fid_ep *fep, int tagged, const struct iovec *iov, size_t count, fi_addr_t dest,
                  uint64_t tag, uint64_t data, int has_data, void *ctx, uint64_t flags) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)fep;
    uint32_t peer;
    size_t len;
    if (!ep->mb)
        return -FI_EOPBADSTATE;
    if (ep->msg && ep->state != DFI_CONNECTED)
        return -FI_ENOTCONN;
    if (ep->msg)
        peer = ep->cm_peer; /* its one peer, whatever `dest` says */
    if (count > IOV_LIMIT || (ep->msg && tagged && (tag & DFI_CM_TAG)) ||
        (!ep->msg && (dest == FI_ADDR_UNSPEC || dfi_to_peer(ep, dest, &peer))))
        return -FI_EINVAL;
    struct dfi_op *o = op_get(ep, ctx);
    const void *buf = o ? one_buffer(o, iov, count, &len, 1) : NULL;
    if (!o || (count > 1 && !o->bounce)) {
        if (o)
            op_put(ep, o);
        return -FI_ENOMEM;
    }
    o->silent = !(flags & FI_COMPLETION) && ((flags & FI_INJECT) || ep->tx_selective);
    uint32_t f = (tagged ? DD_MB_TAGGED : 0) | (has_data ? DD_MB_DATA : 0) |
                 ((flags & FI_INJECT) && count <= 1 ? DD_MB_INJECT : 0);
    int rc = dd_mailbox_send(ep->mb, peer, tag, data, buf, len, (uint64_t)(uintptr_t)o, f);
    if (rc < 0) {
        op_put(ep, o);
        if (rc == DD_ERR_AGAIN)
            return -FI_EAGAIN;
        fprintf(stderr, "deposit-fi: send: %s\n", dd_last_error());
        return -FI_EIO;
    }
    ep->sends++;
    dd_device_progress(dfi_dev); /* a doorbell: what was posted leaves now */
    return 0;
}

/* The unclaimed held message a receive with these arguments takes first (the live
 * list is newest first: its last match). */
static struct dfi_op *held(struct dfi_ep *ep, int tagged, uint32_t src, uint64_t tag, uint64_t ignore) {
    struct dfi_op *found = NULL;
    for (struct dfi_op *o = ep->nheld ? ep->live : NULL; o; o = o->next)
        if (o->state == O_HELD && o->tagged == tagged && (src == DD_MB_ANY_SOURCE || src == o->info.src) &&
            (!tagged || !((o->info.tag ^ tag) & ~ignore)))
            found = o;
    return found;
}

/* Completes a receive from a message the endpoint has (a held one: its bytes into
 * the iovec; else none, a completion of 0 bytes) and forgets the message. */
static void take(struct dfi_ep *ep, struct dfi_op *h, const struct iovec *iov, size_t count, void *ctx, int silent) {
    size_t n = 0, len = h->info.len;
    for (size_t i = 0, k; i < count && h->bounce && n < len; i++, n += k)
        memcpy(iov[i].iov_base, h->bounce + n, k = MIN(iov[i].iov_len, len - n));
    uint64_t flags = rx_flags(h->tagged, h->info.flags);
    if (h->bounce && n < len)
        dfi_fail(ep->rxcq, ep->cntr[C_RECV], ctx, flags, FI_ETRUNC, n, len - n, h->info.tag, h->info.data);
    else
        dfi_complete(silent ? NULL : ep->rxcq, ep->cntr[C_RECV], ctx, flags, n, count ? iov[0].iov_base : NULL,
                     h->info.data, h->info.tag, addr_of(ep, h->info.src));
    live_drop(ep, h);
    op_put(ep, h);
}

/* FI_PEEK, with FI_CLAIM or FI_DISCARD. */
static ssize_t probe(struct dfi_ep *ep, int tagged, const struct iovec *iov, size_t count, uint32_t src,
                     uint64_t tag, uint64_t ignore, void *ctx, uint64_t flags) {
    uint32_t tf = tagged ? DD_MB_TAGGED : 0;
    struct dfi_op *h = held(ep, tagged, src, tag, ignore);
    struct dd_msg_info info;
    if (!h) {
        int rc = dd_mailbox_peek(ep->mb, src, tag, ignore, tf, &info);
        if (rc <= 0) {
            dfi_fail(ep->rxcq, NULL, ctx, (tagged ? FI_TAGGED : FI_MSG) | FI_RECV, FI_ENOMSG, 0, 0, tag, 0);
            return rc < 0 ? -FI_EIO : 0;
        }
        int hold = count && iov[0].iov_base && !(flags & FI_DISCARD) && info.len <= ep->eager_max;
        if (hold || (flags & (FI_CLAIM | FI_DISCARD))) {
            if (!(h = op_get(ep, ctx)) || (hold && !(h->bounce = malloc(info.len ? info.len : 1))) ||
                dd_mailbox_claim(ep->mb, src, tag, ignore, tf, (uint64_t)(uintptr_t)h, &h->info) != 1) {
                if (h)
                    op_put(ep, h);
                return -FI_ENOMEM;
            }
            h->tagged = tagged, h->state = O_CLAIMED;
            live_add(ep, h);
            if (hold) {
                h->state = O_HELD, ep->nheld++;
                dd_mailbox_recv_claimed(ep->mb, (uint64_t)(uintptr_t)h, h->bounce, h->info.len);
                dfi_ep_progress(ep); /* retires the copy's own receive (eager: done already) */
            }
        }
    }
    if (h)
        info = h->info;
    void *buf = NULL;
    if (h && h->bounce && count && iov[0].iov_base && !(flags & FI_DISCARD)) {
        memcpy(iov[0].iov_base, h->bounce, MIN(iov[0].iov_len, info.len));
        buf = iov[0].iov_base;
    }
    dfi_complete(ep->rxcq, NULL, ctx, rx_flags(tagged, info.flags), info.len, buf, info.data, info.tag,
                 addr_of(ep, info.src));
    if (h && (flags & FI_DISCARD)) {
        if (h->state == O_CLAIMED)
            dd_mailbox_discard(ep->mb, (uint64_t)(uintptr_t)h, NULL);
        live_drop(ep, h);
        op_put(ep, h);
    } else if (h && (flags & FI_CLAIM)) {
        h->ctx = ctx, h->state = h->state == O_HELD ? O_HELD_CLAIMED : O_CLAIMED;
    }
    return 0;
}

/* FI_CLAIM (without FI_PEEK): the message claimed with this context, received or
 * (FI_DISCARD) dropped. */
static ssize_t claimed(struct dfi_ep *ep, const struct iovec *iov, size_t count, void *ctx, uint64_t flags) {
    struct dfi_op *o = ep->live;
    while (o && !((o->state == O_CLAIMED || o->state == O_HELD_CLAIMED) && o->ctx == ctx))
        o = o->next;
    if (!o)
        return -FI_EINVAL; /* nothing claimed with that context */
    if ((flags & FI_DISCARD) || o->state == O_HELD_CLAIMED) {
        if (o->state == O_CLAIMED)
            dd_mailbox_discard(ep->mb, (uint64_t)(uintptr_t)o, NULL);
        if (flags & FI_DISCARD)
            free(o->bounce), o->bounce = NULL, count = 0;
        take(ep, o, iov, count, ctx, 0);
        return 0;
    }
    size_t len;
    void *buf = one_buffer(o, iov, count, &len, 0);
    if (count > 1 && !o->bounce)
        return -FI_ENOMEM;
    o->state = O_POSTED;
    return dd_mailbox_recv_claimed(ep->mb, (uint64_t)(uintptr_t)o, buf, len) < 0 ? -FI_EIO : 0;
}

static ssize_t rx(struct fid_ep *fep, int tagged, const struct iovec *iov, size_t count, fi_addr_t from,
                  uint64_t tag, uint64_t ignore, void *ctx, uint64_t flags) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)fep;
    uint32_t src = DD_MB_ANY_SOURCE;
    size_t len;
    if (!ep->mb)
        return -FI_EOPBADSTATE;
    if (!(ep->info->caps & FI_DIRECTED_RECV) || ep->msg)
        from = FI_ADDR_UNSPEC;
    if (ep->msg) /* its application's tags never match connection management's */
        tag &= ~DFI_CM_TAG, ignore &= ~DFI_CM_TAG;
    if (count > IOV_LIMIT || (!(flags & FI_CLAIM) || (flags & FI_PEEK) ? dfi_to_peer(ep, from, &src) : 0))
        return -FI_EINVAL;
    if (flags & FI_PEEK)
        return probe(ep, tagged, iov, count, src, tag, ignore, ctx, flags);
    if (flags & FI_CLAIM)
        return claimed(ep, iov, count, ctx, flags);
    int silent = ep->rx_selective && !(flags & FI_COMPLETION);
    struct dfi_op *o = held(ep, tagged, src, tag, ignore);
    if (o) {
        take(ep, o, iov, count, ctx, silent);
        return 0;
    }
    o = op_get(ep, ctx);
    void *buf = o ? one_buffer(o, iov, count, &len, 0) : NULL;
    if (!o || (count > 1 && !o->bounce)) {
        if (o)
            op_put(ep, o);
        return -FI_ENOMEM;
    }
    o->silent = silent, o->state = O_POSTED;
    if (dd_mailbox_recv(ep->mb, src, tag, ignore, buf, len, (uint64_t)(uintptr_t)o, tagged ? DD_MB_TAGGED : 0) < 0) {
        op_put(ep, o);
        return -FI_EIO;
    }
    live_add(ep, o);
    return 0;
}

/* ---- the libfabric calls ------------------------------------------------------------ */

#define IOV(b, l) &(struct iovec){(void *)(b), (l)}, 1
#define ALL FI_COMPLETION

static ssize_t msg_send(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, void *c) {
    return (void)d, tx(e, 0, IOV(b, l), a, 0, 0, 0, c, ALL);
}
static ssize_t msg_senddata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t data, fi_addr_t a, void *c) {
    return (void)d, tx(e, 0, IOV(b, l), a, 0, data, 1, c, ALL);
}
static ssize_t msg_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a) {
    return tx(e, 0, IOV(b, l), a, 0, 0, 0, NULL, FI_INJECT);
}
static ssize_t msg_injectdata(struct fid_ep *e, const void *b, size_t l, uint64_t data, fi_addr_t a) {
    return tx(e, 0, IOV(b, l), a, 0, data, 1, NULL, FI_INJECT);
}
static ssize_t msg_sendv(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, void *c) {
    return (void)d, tx(e, 0, iov, n, a, 0, 0, 0, c, ALL);
}
static ssize_t msg_sendmsg(struct fid_ep *e, const struct fi_msg *m, uint64_t f) {
    return tx(e, 0, m->msg_iov, m->iov_count, m->addr, 0, m->data, !!(f & FI_REMOTE_CQ_DATA), m->context, f);
}
static ssize_t msg_recv(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t a, void *c) {
    return (void)d, rx(e, 0, IOV(b, l), a, 0, 0, c, ALL);
}
static ssize_t msg_recvv(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, void *c) {
    return (void)d, rx(e, 0, iov, n, a, 0, 0, c, ALL);
}
static ssize_t msg_recvmsg(struct fid_ep *e, const struct fi_msg *m, uint64_t f) {
    return rx(e, 0, m->msg_iov, m->iov_count, m->addr, 0, 0, m->context, f);
}
static ssize_t tag_send(struct fid_ep *e, const void *b, size_t l, void *d, fi_addr_t a, uint64_t t, void *c) {
    return (void)d, tx(e, 1, IOV(b, l), a, t, 0, 0, c, ALL);
}
static ssize_t tag_senddata(struct fid_ep *e, const void *b, size_t l, void *d, uint64_t data, fi_addr_t a,
                            uint64_t t, void *c) {
    return (void)d, tx(e, 1, IOV(b, l), a, t, data, 1, c, ALL);
}
static ssize_t tag_inject(struct fid_ep *e, const void *b, size_t l, fi_addr_t a, uint64_t t) {
    return tx(e, 1, IOV(b, l), a, t, 0, 0, NULL, FI_INJECT);
}
static ssize_t tag_injectdata(struct fid_ep *e, const void *b, size_t l, uint64_t data, fi_addr_t a, uint64_t t) {
    return tx(e, 1, IOV(b, l), a, t, data, 1, NULL, FI_INJECT);
}
static ssize_t tag_sendv(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, uint64_t t,
                         void *c) {
    return (void)d, tx(e, 1, iov, n, a, t, 0, 0, c, ALL);
}
static ssize_t tag_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f) {
    return tx(e, 1, m->msg_iov, m->iov_count, m->addr, m->tag, m->data, !!(f & FI_REMOTE_CQ_DATA), m->context, f);
}
static ssize_t tag_recv(struct fid_ep *e, void *b, size_t l, void *d, fi_addr_t a, uint64_t t, uint64_t i, void *c) {
    return (void)d, rx(e, 1, IOV(b, l), a, t, i, c, ALL);
}
static ssize_t tag_recvv(struct fid_ep *e, const struct iovec *iov, void **d, size_t n, fi_addr_t a, uint64_t t,
                         uint64_t i, void *c) {
    return (void)d, rx(e, 1, iov, n, a, t, i, c, ALL);
}
static ssize_t tag_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t f) {
    return rx(e, 1, m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore, m->context, f);
}

static struct fi_ops_msg msg_ops = {
    .size = sizeof(struct fi_ops_msg), .recv = msg_recv, .recvv = msg_recvv, .recvmsg = msg_recvmsg,
    .send = msg_send, .sendv = msg_sendv, .sendmsg = msg_sendmsg, .inject = msg_inject,
    .senddata = msg_senddata, .injectdata = msg_injectdata,
};
static struct fi_ops_tagged tag_ops = {
    .size = sizeof(struct fi_ops_tagged), .recv = tag_recv, .recvv = tag_recvv, .recvmsg = tag_recvmsg,
    .send = tag_send, .sendv = tag_sendv, .sendmsg = tag_sendmsg, .inject = tag_inject,
    .senddata = tag_senddata, .injectdata = tag_injectdata,
};

/* ---- the endpoint object ------------------------------------------------------------ */

int dfi_ep_enable(struct dfi_ep *ep) {
    LOCK;
    if (ep->mb)
        return 0;
    const char *s = getenv("DEPOSIT_FI_SERVICE"), *slot = getenv("DEPOSIT_FI_SLOT");
    ep->service = (s ? (uint32_t)atoi(s) : 18700) + (uint32_t)dfi_next_service++;
    struct dd_mailbox_config c;
    dd_mailbox_config_init(&c, ep->service);
    c.slots = (uint32_t)dfi_slots();
    c.slot = slot ? (uint32_t)atoi(slot) : 0;
    c.authorized_keys_path = getenv("DEPOSIT_FI_AUTHORIZED_KEYS");
    if (dd_mailbox_open(dfi_dev, &c, &ep->mb) < 0) {
        fprintf(stderr, "deposit-fi: endpoint: %s\n", dd_last_error());
        ep->mb = NULL;
        return -FI_ENOMEM;
    }
    ep->eager_max = dd_mailbox_eager_max(ep->mb);
    return ep->msg ? dfi_cm_enable(ep) : 0;
}

static int ep_close(struct fid *f) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f, **pp = &dfi_eps;
    /* What the mailbox still owes its peers (a FIN, a credit read, acknowledgements
     * of its last sends): 2 s at most. */
    if (ep->mb)
        dd_mailbox_flush(ep->mb, 2000);
    while (*pp != ep)
        pp = &(*pp)->next;
    *pp = ep->next;
    struct dd_mailbox_stats s;
    if (ep->mb && getenv("DEPOSIT_FI_STATS") && dd_mailbox_stats(ep->mb, &s) == DD_OK)
        fprintf(stderr, "deposit-fi: mailbox %u: %llu slots, %llu eager, %llu rendezvous, %llu credit reads "
                "(%llu stalls), %llu refused\n", ep->service, (unsigned long long)s.slots,
                (unsigned long long)s.eager_rx, (unsigned long long)s.rndv_rx, (unsigned long long)s.credit_reads,
                (unsigned long long)s.credit_stalls,
                (unsigned long long)(s.bad_header + s.bad_source + s.bad_sequence + s.bad_hello));
    dd_mailbox_close(ep->mb);
    for (int l = 0; l < 2; l++)
        for (struct dfi_op *o = l ? ep->spare : ep->live, *n; o; o = n)
            n = o->next, free(o->bounce), free(o);
    free(ep->peer), free(ep->addr), free(ep->cm_rx);
    fi_freeinfo(ep->info);
    free(ep);
    return 0;
}

static int ep_bind(struct fid *f, struct fid *b, uint64_t flags) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    switch (b->fclass) {
    case FI_CLASS_CQ:
        if (flags & FI_TRANSMIT)
            ep->txcq = (struct dfi_cq *)b, ep->tx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
        if (flags & FI_RECV)
            ep->rxcq = (struct dfi_cq *)b, ep->rx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
        return 0;
    case FI_CLASS_CNTR: {
        static const uint64_t which[C_N] = {FI_SEND, FI_RECV, FI_WRITE, FI_READ};
        for (int i = 0; i < C_N; i++)
            if (flags & which[i])
                ep->cntr[i] = (struct dfi_cntr *)b;
        return flags & (FI_REMOTE_READ | FI_REMOTE_WRITE) ? -FI_ENOSYS : 0;
    }
    case FI_CLASS_AV:
        ep->av = (struct dfi_av *)b;
        return 0;
    case FI_CLASS_EQ:
        ep->eq = (struct dfi_eq *)b;
        return 0;
    default:
        return -FI_ENOSYS;
    }
}

static int ep_control(struct fid *f, int command, void *arg) {
    (void)arg;
    return command == FI_ENABLE ? dfi_ep_enable((struct dfi_ep *)f) : -FI_ENOSYS;
}

int dfi_ep_getname(fid_t f, void *addr, size_t *len) {
    struct dfi_ep *ep = (struct dfi_ep *)f;
    size_t have = *len;
    *len = sizeof(struct dfi_addr);
    if (have < sizeof(struct dfi_addr))
        return -FI_ETOOSMALL;
    int rc = dfi_ep_enable(ep);
    struct dfi_addr a = {{0}, ep->service};
    memcpy(a.ip, dfi_ip, sizeof a.ip);
    memcpy(addr, &a, sizeof a);
    return rc;
}

static ssize_t ep_cancel(fid_t f, void *ctx) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    for (struct dfi_op *o = ep->live; o; o = o->next)
        if (o->state == O_POSTED && o->ctx == ctx && dd_mailbox_cancel(ep->mb, (uint64_t)(uintptr_t)o) == 1)
            return 0; /* its FI_ECANCELED completion follows */
    return -FI_ENOENT;
}

static int ep_getopt(fid_t f, int level, int name, void *val, size_t *len) {
    (void)f;
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV || *len < sizeof(size_t))
        return -FI_ENOPROTOOPT;
    *(size_t *)val = 0;
    return 0;
}
static int ep_setopt(fid_t f, int level, int name, const void *val, size_t len) {
    (void)f, (void)level, (void)name, (void)val, (void)len;
    return -FI_ENOPROTOOPT;
}

static struct fi_ops ep_fi_ops = FI_OPS(ep_close, ep_bind, ep_control);
static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep), .cancel = ep_cancel, .getopt = ep_getopt, .setopt = ep_setopt,
    .tx_ctx = (void *)dfi_nosys, .rx_ctx = (void *)dfi_nosys, .rx_size_left = (void *)dfi_nosys_ssize,
    .tx_size_left = (void *)dfi_nosys_ssize,
};
static struct fi_ops_cm cm_ops = {
    .size = sizeof(struct fi_ops_cm), .setname = (void *)dfi_nosys, .getname = dfi_ep_getname,
    .getpeer = (void *)dfi_nosys, .connect = (void *)dfi_nosys, .listen = (void *)dfi_nosys,
    .accept = (void *)dfi_nosys, .reject = (void *)dfi_nosys, .shutdown = (void *)dfi_nosys,
    .join = (void *)dfi_nosys,
};

int dfi_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx) {
    (void)d;
    int msg = info->ep_attr && info->ep_attr->type == FI_EP_MSG;
    if (info->ep_attr && !msg && info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_UNSPEC)
        return -FI_ENOSYS;
    struct dfi_ep *ep = calloc(1, sizeof *ep);
    if (!ep || !(ep->info = fi_dupinfo(info))) {
        free(ep);
        return -FI_ENOMEM;
    }
    ep->fid.fid.fclass = FI_CLASS_EP, ep->fid.fid.context = ctx, ep->fid.fid.ops = &ep_fi_ops;
    ep->fid.ops = &ep_ops, ep->fid.cm = msg ? &dfi_msg_cm_ops : &cm_ops, ep->fid.msg = &msg_ops;
    ep->fid.tagged = &tag_ops, ep->msg = msg;
    ep->fid.rma = &dfi_rma_ops, ep->fid.atomic = &dfi_atomic_ops;
    LOCK;
    ep->next = dfi_eps, dfi_eps = ep;
    *out = &ep->fid;
    return 0;
}
