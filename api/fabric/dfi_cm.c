/* FI_EP_MSG: passive endpoints, connection management and event queues.
 *
 * A connected endpoint is an endpoint with one peer. Its connection is set up with
 * messages between mailboxes, tagged with the top tag bit (MSG endpoints offer 63 tag
 * bits to the application): fi_connect sends a request (our endpoint's address and the
 * private data) to the passive endpoint's mailbox, which raises FI_CONNREQ with a
 * connection-request handle; fi_accept on an endpoint made from it answers from that
 * endpoint's own mailbox (its address, the private data) and raises FI_CONNECTED;
 * the answer raises FI_CONNECTED at the client, fi_reject an FI_ECONNREFUSED error
 * there, fi_shutdown FI_SHUTDOWN at the peer. The mailboxes' own connections carry them
 * (authenticated, sealed when secure), and after FI_CONNECTED the endpoint sends only to
 * its peer. An event queue holds its events until read; reading drives progress.
 */
#include "dfi.h"
#include <time.h>

enum { CM_REQ = 1, CM_ACCEPT, CM_REJECT, CM_SHUTDOWN };

struct cm_msg {
    uint32_t kind, len; /* len: bytes of private data */
    struct dfi_addr from;
    uint8_t data[DFI_CM_DATA];
};

/* ---- event queues ------------------------------------------------------------------ */

struct eqe {
    uint32_t event;
    int err;
    size_t len; /* of the private data */
    struct fi_eq_cm_entry e;
    uint8_t data[DFI_CM_DATA];
};

struct dfi_eq {
    struct fid_eq fid;
    struct eqe *q;
    size_t head, tail, cap;
};

static void eq_push(struct dfi_eq *eq, uint32_t event, int err, struct fid *fid, struct fi_info *info,
                    const struct cm_msg *m) {
    if (!eq)
        return;
    if (eq->tail == eq->cap) {
        size_t cap = eq->cap ? 2 * eq->cap : 16;
        struct eqe *n = realloc(eq->q, cap * sizeof *n);
        if (!n)
            return;
        eq->q = n, eq->cap = cap;
    }
    struct eqe *x = &eq->q[eq->tail++];
    memset(x, 0, sizeof *x);
    x->event = event, x->err = err, x->e.fid = fid, x->e.info = info;
    if (m && (x->len = MIN(m->len, DFI_CM_DATA)))
        memcpy(x->data, m->data, x->len);
}

static void cm_progress(void);

static ssize_t eq_read(struct fid_eq *f, uint32_t *event, void *buf, size_t len, uint64_t flags) {
    LOCK;
    struct dfi_eq *eq = (struct dfi_eq *)f;
    if (eq->head == eq->tail)
        cm_progress();
    if (eq->head == eq->tail)
        return -FI_EAGAIN;
    struct eqe *x = &eq->q[eq->head];
    if (x->err)
        return -FI_EAVAIL;
    size_t n = sizeof x->e + x->len;
    if (len < n)
        return -FI_ETOOSMALL;
    *event = x->event;
    memcpy(buf, &x->e, sizeof x->e);
    memcpy((uint8_t *)buf + sizeof x->e, x->data, x->len);
    if (!(flags & FI_PEEK) && ++eq->head == eq->tail)
        eq->head = eq->tail = 0;
    return (ssize_t)n;
}

static ssize_t eq_readerr(struct fid_eq *f, struct fi_eq_err_entry *buf, uint64_t flags) {
    LOCK;
    struct dfi_eq *eq = (struct dfi_eq *)f;
    if (eq->head == eq->tail || !eq->q[eq->head].err)
        return -FI_EAGAIN;
    struct eqe *x = &eq->q[eq->head];
    memset(buf, 0, sizeof *buf);
    buf->fid = x->e.fid, buf->context = x->e.fid ? x->e.fid->context : NULL;
    buf->err = x->err, buf->prov_errno = x->err;
    if (!(flags & FI_PEEK) && ++eq->head == eq->tail)
        eq->head = eq->tail = 0;
    return sizeof *buf;
}

static ssize_t eq_sread(struct fid_eq *f, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t rc = eq_read(f, event, buf, len, flags);
        if (rc != -FI_EAGAIN)
            return rc;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (timeout >= 0 && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= timeout)
            return -FI_EAGAIN;
        nanosleep(&(struct timespec){0, 20 * 1000}, NULL);
    }
}

static int eq_close(struct fid *f) {
    free(((struct dfi_eq *)f)->q);
    free(f);
    return 0;
}

static struct fi_ops eq_fi_ops = FI_OPS(eq_close, dfi_nosys, dfi_nosys);
static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq), .read = eq_read, .readerr = eq_readerr, .write = (void *)dfi_nosys_ssize,
    .sread = eq_sread, .strerror = (void *)dfi_strerror,
};

int dfi_eq_open(struct fid_fabric *fab, struct fi_eq_attr *attr, struct fid_eq **out, void *ctx) {
    (void)fab, (void)attr;
    struct dfi_eq *eq = calloc(1, sizeof *eq);
    if (!eq)
        return -FI_ENOMEM;
    eq->fid.fid.fclass = FI_CLASS_EQ, eq->fid.fid.context = ctx, eq->fid.fid.ops = &eq_fi_ops;
    eq->fid.ops = &eq_ops;
    *out = &eq->fid;
    return 0;
}

/* ---- messages ---------------------------------------------------------------------- */

/* Sends a CM message of `kind` from mailbox `mb` to `to` (copied at once). */
static int cm_send(struct dd_mailbox *mb, const struct dfi_addr *to, uint32_t kind, uint32_t service,
                   const void *data, size_t len) {
    struct cm_msg m = {kind, (uint32_t)MIN(len, DFI_CM_DATA), {{0}, service}, {0}};
    memcpy(m.from.ip, dfi_ip, sizeof m.from.ip);
    if (data)
        memcpy(m.data, data, m.len);
    uint32_t peer;
    if (len > DFI_CM_DATA || dd_mailbox_peer6(mb, to->ip, to->service, &peer) < 0)
        return -FI_EINVAL;
    int rc = dd_mailbox_send(mb, peer, DFI_CM_TAG, 0, &m, sizeof m, 0, DD_MB_TAGGED | DD_MB_INJECT);
    dd_device_progress(dfi_dev);
    return rc < 0 ? -FI_EIO : 0;
}

/* Posts the receive of the next CM message into `m` with context `ctx`. */
static int cm_listen(struct dd_mailbox *mb, struct cm_msg *m, void *ctx) {
    return dd_mailbox_recv(mb, DD_MB_ANY_SOURCE, DFI_CM_TAG, 0, m, sizeof *m, (uint64_t)(uintptr_t)ctx,
                           DD_MB_TAGGED) < 0
               ? -FI_EIO
               : 0;
}

/* ---- passive endpoints ------------------------------------------------------------- */

struct dfi_connreq {
    struct fid fid;
    struct dfi_addr from;
};

struct dfi_pep {
    struct fid_pep fid;
    struct dfi_pep *next;
    struct fi_info *info;
    struct dfi_eq *eq;
    struct dd_mailbox *mb; /* NULL until it listens */
    uint32_t service;
    struct cm_msg rx;
};

static struct dfi_pep *peps;

static int connreq_close(struct fid *f) {
    free(f);
    return 0;
}
static struct fi_ops connreq_ops = FI_OPS(connreq_close, dfi_nosys, dfi_nosys);

/* A connect request reached the passive endpoint: FI_CONNREQ. */
static void pep_request(struct dfi_pep *p) {
    struct fi_info *info = fi_dupinfo(p->info);
    struct dfi_connreq *h = calloc(1, sizeof *h);
    struct dfi_addr *dest = malloc(sizeof *dest);
    if (!info || !h || !dest) {
        fi_freeinfo(info), free(h), free(dest);
        return;
    }
    h->fid.fclass = FI_CLASS_CONNREQ, h->fid.ops = &connreq_ops, h->from = p->rx.from;
    *dest = p->rx.from;
    free(info->dest_addr);
    info->dest_addr = dest, info->dest_addrlen = sizeof *dest, info->handle = &h->fid;
    eq_push(p->eq, FI_CONNREQ, 0, &p->fid.fid, info, &p->rx);
}

static int pep_open(struct dfi_pep *p) {
    if (p->mb)
        return 0;
    struct dd_mailbox_config c;
    const char *s = getenv("DEPOSIT_FI_SERVICE");
    p->service = (s ? (uint32_t)atoi(s) : 18700) + (uint32_t)dfi_next_service++;
    dd_mailbox_config_init(&c, p->service);
    c.slots = 64, c.stage = 16;
    if (dd_mailbox_open(dfi_dev, &c, &p->mb) < 0) {
        fprintf(stderr, "deposit-fi: passive endpoint: %s\n", dd_last_error());
        p->mb = NULL;
        return -FI_EADDRINUSE;
    }
    return cm_listen(p->mb, &p->rx, p);
}

static int pep_listen(struct fid_pep *f) {
    LOCK;
    return pep_open((struct dfi_pep *)f);
}

static int pep_getname(fid_t f, void *addr, size_t *len) {
    LOCK;
    struct dfi_pep *p = (struct dfi_pep *)f;
    size_t have = *len;
    *len = sizeof(struct dfi_addr);
    if (have < sizeof(struct dfi_addr))
        return -FI_ETOOSMALL;
    int rc = pep_open(p);
    struct dfi_addr a = {{0}, p->service};
    memcpy(a.ip, dfi_ip, sizeof a.ip);
    memcpy(addr, &a, sizeof a);
    return rc;
}

static int pep_reject(struct fid_pep *f, fid_t handle, const void *param, size_t len) {
    LOCK;
    struct dfi_pep *p = (struct dfi_pep *)f;
    struct dfi_connreq *h = (struct dfi_connreq *)handle;
    if (!p->mb || !h || h->fid.fclass != FI_CLASS_CONNREQ)
        return -FI_EINVAL;
    int rc = cm_send(p->mb, &h->from, CM_REJECT, p->service, param, len);
    free(h);
    return rc;
}

static int pep_bind(struct fid *f, struct fid *b, uint64_t flags) {
    (void)flags;
    if (b->fclass != FI_CLASS_EQ)
        return -FI_EINVAL;
    ((struct dfi_pep *)f)->eq = (struct dfi_eq *)b;
    return 0;
}

static int pep_close(struct fid *f) {
    LOCK;
    struct dfi_pep *p = (struct dfi_pep *)f, **pp = &peps;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
    dd_mailbox_close(p->mb);
    fi_freeinfo(p->info);
    free(p);
    dfi_device_put();
    return 0;
}

static struct fi_ops pep_fi_ops = FI_OPS(pep_close, pep_bind, dfi_nosys);
static struct fi_ops_ep pep_ep_ops = {.size = sizeof(struct fi_ops_ep), .cancel = (void *)dfi_nosys_ssize,
                                      .getopt = (void *)dfi_nosys, .setopt = (void *)dfi_nosys};
static struct fi_ops_cm pep_cm_ops = {
    .size = sizeof(struct fi_ops_cm), .setname = (void *)dfi_nosys, .getname = pep_getname,
    .getpeer = (void *)dfi_nosys, .connect = (void *)dfi_nosys, .listen = pep_listen,
    .accept = (void *)dfi_nosys, .reject = pep_reject, .shutdown = (void *)dfi_nosys, .join = (void *)dfi_nosys,
};

int dfi_passive_ep(struct fid_fabric *fab, struct fi_info *info, struct fid_pep **out, void *ctx) {
    (void)fab;
    LOCK;
    struct dfi_pep *p = calloc(1, sizeof *p);
    if (!p || !(p->info = fi_dupinfo(info))) {
        free(p);
        return -FI_ENOMEM;
    }
    int rc = dfi_device_get(); /* a passive endpoint comes before any domain */
    if (rc) {
        fi_freeinfo(p->info), free(p);
        return rc;
    }
    p->fid.fid.fclass = FI_CLASS_PEP, p->fid.fid.context = ctx, p->fid.fid.ops = &pep_fi_ops;
    p->fid.ops = &pep_ep_ops, p->fid.cm = &pep_cm_ops;
    p->next = peps, peps = p;
    *out = &p->fid;
    return 0;
}

/* Takes the passive endpoints' requests. */
static void cm_progress(void) {
    dfi_progress();
    struct dd_tag_completion c;
    for (struct dfi_pep *p = peps; p; p = p->next)
        while (p->mb && dd_mailbox_poll(p->mb, &c, 1) == 1)
            if (c.op == DD_MB_OP_RECV) {
                if (c.status == DD_MB_SUCCESS && c.len == sizeof p->rx && p->rx.kind == CM_REQ)
                    pep_request(p);
                cm_listen(p->mb, &p->rx, p);
            }
}

/* ---- connected endpoints ----------------------------------------------------------- */

/* A CM message reached endpoint `ep` (its receive of one completed). */
void dfi_cm_retire(struct dfi_ep *ep, const struct dd_tag_completion *c) {
    struct cm_msg *m = ep->cm_rx;
    if (c->status != DD_MB_SUCCESS || c->len != sizeof *m)
        return; /* cancelled at close, or not ours */
    if (m->kind == CM_ACCEPT && ep->state == DFI_CONNECTING &&
        dd_mailbox_peer6(ep->mb, m->from.ip, m->from.service, &ep->cm_peer) == 0) {
        ep->state = DFI_CONNECTED;
        eq_push(ep->eq, FI_CONNECTED, 0, &ep->fid.fid, NULL, m);
    } else if (m->kind == CM_REJECT && ep->state == DFI_CONNECTING) {
        ep->state = DFI_IDLE;
        eq_push(ep->eq, 0, FI_ECONNREFUSED, &ep->fid.fid, NULL, m);
    } else if (m->kind == CM_SHUTDOWN && ep->state == DFI_CONNECTED) {
        ep->state = DFI_IDLE;
        eq_push(ep->eq, FI_SHUTDOWN, 0, &ep->fid.fid, NULL, NULL);
    }
    cm_listen(ep->mb, m, ep->cm_rx);
}

/* An enabled MSG endpoint listens for its CM messages. */
int dfi_cm_enable(struct dfi_ep *ep) {
    if (!(ep->cm_rx = calloc(1, sizeof(struct cm_msg))))
        return -FI_ENOMEM;
    return cm_listen(ep->mb, ep->cm_rx, ep->cm_rx);
}

static int ep_connect(struct fid_ep *f, const void *addr, const void *param, size_t len) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    int rc = dfi_ep_enable(ep);
    if (rc || !addr)
        return rc ? rc : -FI_EINVAL;
    if (ep->state != DFI_IDLE)
        return -FI_EISCONN;
    if ((rc = cm_send(ep->mb, addr, CM_REQ, ep->service, param, len)) == 0)
        ep->state = DFI_CONNECTING;
    return rc;
}

static int ep_accept(struct fid_ep *f, const void *param, size_t len) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    struct dfi_connreq *h = (struct dfi_connreq *)ep->info->handle;
    int rc = dfi_ep_enable(ep);
    if (rc || !h || h->fid.fclass != FI_CLASS_CONNREQ || ep->state != DFI_IDLE)
        return rc ? rc : -FI_EINVAL;
    if ((rc = cm_send(ep->mb, &h->from, CM_ACCEPT, ep->service, param, len)) ||
        (rc = dd_mailbox_peer6(ep->mb, h->from.ip, h->from.service, &ep->cm_peer) < 0 ? -FI_EIO : 0))
        return rc;
    ep->state = DFI_CONNECTED;
    free(h); /* the request is answered */
    ep->info->handle = NULL;
    eq_push(ep->eq, FI_CONNECTED, 0, &ep->fid.fid, NULL, NULL);
    return 0;
}

static int ep_shutdown(struct fid_ep *f, uint64_t flags) {
    (void)flags;
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    if (ep->state != DFI_CONNECTED)
        return -FI_ENOTCONN;
    struct dfi_addr to;
    uint32_t service;
    if (dd_mailbox_peer_addr6(ep->mb, ep->cm_peer, to.ip, &service) < 0)
        return -FI_EIO;
    to.service = service;
    ep->state = DFI_IDLE;
    int rc = cm_send(ep->mb, &to, CM_SHUTDOWN, ep->service, NULL, 0);
    dd_mailbox_flush(ep->mb, 100); /* so that it leaves before a close */
    return rc;
}

static int ep_getpeer(struct fid_ep *f, void *addr, size_t *len) {
    LOCK;
    struct dfi_ep *ep = (struct dfi_ep *)f;
    size_t have = *len;
    *len = sizeof(struct dfi_addr);
    if (ep->state != DFI_CONNECTED)
        return -FI_ENOTCONN;
    if (have < sizeof(struct dfi_addr))
        return -FI_ETOOSMALL;
    struct dfi_addr *a = addr;
    return dd_mailbox_peer_addr6(ep->mb, ep->cm_peer, a->ip, &a->service) < 0 ? -FI_EIO : 0;
}

struct fi_ops_cm dfi_msg_cm_ops = {
    .size = sizeof(struct fi_ops_cm), .setname = (void *)dfi_nosys, .getname = dfi_ep_getname,
    .getpeer = ep_getpeer, .connect = ep_connect, .listen = (void *)dfi_nosys, .accept = ep_accept,
    .reject = (void *)dfi_nosys, .shutdown = ep_shutdown, .join = (void *)dfi_nosys,
};
