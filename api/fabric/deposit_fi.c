/* The libfabric provider "deposit" (libdeposit-fi.so): FI_EP_RDM endpoints with FI_MSG
 * and FI_TAGGED over deposit's C ABI, so that libfabric applications and MPI (Open
 * MPI's mtl ofi, or its btl ofi under pml ob1) run over deposit.
 *
 * How it maps:
 *  - A domain is one deposit device per process. Its port is DEPOSIT_FI_DEV, its
 *    address DEPOSIT_FI_IP; "%r" in either is replaced by the process's rank
 *    (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK; 0 without one), and without
 *    DEPOSIT_FI_IP the address is 10.77.0.(rank + 1). So mpirun needs no wrapper.
 *    DEPOSIT_FI_STATS: the device's counters and refusals on stderr when it closes.
 *    Identity (docs/design.md §10): DEPOSIT_FI_IDENTITY, the node's identity key file
 *    (made with mode 0600 if missing; "%r" as above; unset: a fresh key per process);
 *    DEPOSIT_FI_KNOWN_PEERS, a known-peers file ("<ip> <key>" lines): connects to a
 *    listed peer are pinned to its key; DEPOSIT_FI_AUTHORIZED_KEYS, a file of the keys
 *    whose nodes may connect to this process's endpoints (others are refused).
 *  - An endpoint is a deposit endpoint holding a receive ring of RING_SLOTS slots of
 *    SLOT bytes, and a listener. Its name (fi_getname) is its node's IPv4 address and
 *    its service number. Peers connect to it on first use; accepted connections are
 *    isolated: a peer can only invoke the endpoint's one instruction, "write the
 *    message at ring pointer r0, advance r0 by r1 and wrap it with mask r2", whose
 *    pointer the listener hands out in its private data. All peers append to the one
 *    ring; the worker serialises them, so the messages of the ring are exactly as many
 *    as the arrivals counted on the accepted connections, in slot order.
 *  - A message is fragmented into slots (a 48-byte header, then data). A sender holds
 *    CREDITS slots of each peer's ring; the receiver gives them back with a header-only
 *    credit message as it consumes them (the ring has room for two of those per peer
 *    beyond the credits). Fragments are staged in the sender's endpoint (the deposit's
 *    source must not change until acknowledged) and the send completes when the last
 *    fragment is acknowledged (FI_TRANSMIT_COMPLETE).
 *  - Receives match posted buffers in order (FI_MSG: any; FI_TAGGED: tag and ignore
 *    mask; both optionally by source), else the message waits in an unexpected list
 *    (whole, or still gathering its fragments) for the first receive that matches it.
 *    A receive cancelled (fi_cancel) before a message matched it completes with
 *    FI_ECANCELED; once matched it cannot be (-FI_ENOENT).
 *  - Probes (fi_trecvmsg flags, what MPI_Iprobe, MPI_Improbe and MPI_Mrecv use): FI_PEEK
 *    looks for the unexpected message a receive would take and completes with its
 *    length, tag, CQ data and source (whole, even while fragments are still coming;
 *    its data too if the peek gives a buffer and it is whole), or with an FI_ENOMSG
 *    error completion; with FI_CLAIM the message is then the peek's, invisible to other
 *    receives and peeks, until the FI_CLAIM receive with the same context takes it
 *    (copied as it completes, like any unexpected message); FI_DISCARD with FI_PEEK or
 *    FI_CLAIM drops the message instead (the peek's completion, or one of 0 bytes).
 *  - Progress is manual: reading a completion queue (or sending) drives the device,
 *    accepts connections, consumes the ring and retires completions.
 *  - RMA and atomics (FI_RMA, FI_ATOMIC): a memory region with remote access is the
 *    application's buffer registered as a deposit endpoint (any alignment) with a
 *    listener of its own. Its key (FI_MR_PROV_KEY) is a random service number and a
 *    random secret: an initiator connects to that service on first use with the key as
 *    its connect private data, and the listener admits only requests that carry it (a
 *    wrong key is answered as "no listener" and counted by the target's device), so a
 *    region is reachable only by whoever was given its key. The region's address and
 *    length come back in the listener's reply (FI_MR_VIRT_ADDR when the application
 *    asks for it, offsets otherwise). Writes go through the sender's staging slots
 *    (SLOT bytes at a time); reads and fetched atomic values land there and are copied
 *    out when they complete. Atomics: 64-bit integers, FI_SUM (fetch-and-add),
 *    FI_ATOMIC_READ (adding 0), FI_ATOMIC_WRITE (non-fetching) and FI_CSWAP; the
 *    target's device performs them in order, the target application is not involved.
 *    Bounds and rights are the target's: an access beyond the region, or one it does
 *    not allow, completes with FI_EACCES and writes nothing.
 * Not provided (-FI_ENOSYS): counters, wait sets, scalable endpoints, shared contexts,
 * passive endpoints, RMA with remote CQ data and event queues (an RDM endpoint needs
 * none); FI_PEEK, FI_CLAIM and FI_DISCARD on untagged receives (fi_recvmsg). Not
 * provided either: buffered and multi-receive (FI_BUFFERED_RECV, FI_MULTI_RECV), and
 * cancelling a send.
 */
#include <deposit.h>
#include <errno.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define PROV_NAME "deposit"
#define PROV_VERSION FI_VERSION(0, 1)
#define API_VERSION FI_VERSION(1, 17)
#define SLOT 8192
#define MAX_PEERS 48
#define CREDITS 40
#define RING_SLOTS 2048 /* >= MAX_PEERS * (CREDITS + 2), a power of two */
#define STAGE_SLOTS 256
#define HDR 48
#define FRAG (SLOT - HDR)
#define BASE_SERVICE 18700
#define MAX_MSG (1ull << 32)
#define CQ_DEPTH 65536
#define CQ_ERR_DEPTH 256

enum { T_DATA = 1, T_CREDIT = 2 };
/* What a request is: a message, or one of the one-sided operations. */
enum { K_MSG = 0, K_WRITE, K_READ, K_ATOMIC, K_FETCH, K_CSWAP };
enum { F_FIRST = 1, F_LAST = 2, F_TAGGED = 4, F_DATA = 8 };

struct hdr {
    uint8_t type, flags;
    uint16_t pad;
    uint32_t frag_len;
    uint8_t src_ip[4];
    uint32_t src_service;
    uint64_t tag, data, total;
    uint32_t seq, credits;
};

struct addr {
    uint8_t ip[4];
    uint32_t service;
};

static int same(const struct addr *a, const uint8_t ip[4], uint32_t service) {
    return !memcmp(a->ip, ip, 4) && a->service == service;
}

/* Closes an object that owns nothing but itself. */
static int fab_close(struct fid *f) {
    free(f);
    return 0;
}

/* ---- the device ---------------------------------------------------------------- */

static struct dd_device *device;
static uint8_t device_ip[4];
static int device_refs, next_service;

static int rank_of(void) {
    const char *v[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (int i = 0; i < 3; i++)
        if (getenv(v[i]))
            return atoi(getenv(v[i]));
    return 0;
}

/* `s` with every "%r" replaced by the rank. */
static void subst(const char *s, char *out, size_t n) {
    int r = rank_of();
    size_t k = 0;
    for (; *s && k + 12 < n; s++) {
        if (s[0] == '%' && s[1] == 'r') {
            k += (size_t)snprintf(out + k, n - k, "%d", r);
            s++;
        } else {
            out[k++] = *s;
        }
    }
    out[k] = 0;
}

static int device_get(void) {
    if (device) {
        device_refs++;
        return 0;
    }
    char port[256], ip[64];
    const char *p = getenv("DEPOSIT_FI_DEV");
    subst(p ? p : "memif:/tmp/deposit-fi.sock:%r", port, sizeof port);
    /* memif's role by rank: 0 serves, the others are clients (two ranks). */
    char *role = strrchr(port, ':');
    if (!strncmp(port, "memif:", 6) && role && (!strcmp(role, ":0") || !strcmp(role, ":1")))
        strcpy(role + 1, role[1] == '0' ? "server" : "client");
    int r = rank_of();
    const char *i = getenv("DEPOSIT_FI_IP");
    if (i)
        subst(i, ip, sizeof ip);
    else
        snprintf(ip, sizeof ip, "10.77.%d.%d", (r + 1) >> 8, (r + 1) & 255);
    unsigned a, b, c, d;
    if (sscanf(ip, "%u.%u.%u.%u", &a, &b, &c, &d) != 4 || a > 255 || b > 255 || c > 255 || d > 255) {
        fprintf(stderr, "deposit-fi: DEPOSIT_FI_IP %s is not an IPv4 address\n", ip);
        return -FI_EINVAL;
    }
    struct dd_device_config cfg;
    dd_device_config_init(&cfg);
    cfg.port = port;
    char identity[256];
    const char *id = getenv("DEPOSIT_FI_IDENTITY");
    if (id) {
        subst(id, identity, sizeof identity);
        cfg.identity_path = identity;
    }
    cfg.known_peers_path = getenv("DEPOSIT_FI_KNOWN_PEERS");
    cfg.ip[0] = (uint8_t)a, cfg.ip[1] = (uint8_t)b, cfg.ip[2] = (uint8_t)c, cfg.ip[3] = (uint8_t)d;
    /* Progress is manual (FI_PROGRESS_MANUAL), but a consumer may stop calling for
     * long — an MPI rank computing, fi_pingpong blocked in its control socket right
     * after its last receive — while a peer waits for the acknowledgement of what it
     * sent (given up after ~4 s: RetryExceeded). The device's own thread takes a turn
     * when no call took one for 1 ms. */
    cfg.progress_guard_us = 1000;
    /* A memif client whose server (another rank) has not created its socket yet fails
     * at once, and so, now and then, does af_packet on a veth made a moment ago: it
     * tries again for up to 10 s (a port that fails gives back what it created). */
    for (int tries = 0; dd_device_open(&cfg, &device) < 0; tries++) {
        if (tries == 200) {
            fprintf(stderr, "deposit-fi: cannot open %s: %s\n", port, dd_last_error());
            device = NULL;
            return -FI_ENODEV;
        }
        struct timespec t = {0, 50 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    memcpy(device_ip, cfg.ip, 4);
    device_refs = 1;
    return 0;
}

static void stat_line(const char *name, uint64_t value, void *arg) {
    if (value)
        fprintf(stderr, "deposit-fi: rank %d %s %llu\n", *(int *)arg, name, (unsigned long long)value);
}

static void device_put(void) {
    if (device && --device_refs == 0) {
        /* DEPOSIT_FI_STATS: the device's counters that are not zero and its refusals by
         * reason (the names of ddperf --stats), on stderr when it closes. */
        if (getenv("DEPOSIT_FI_STATS")) {
            int r = rank_of();
            dd_device_stats(device, stat_line, &r);
        }
        dd_device_close(device);
        device = NULL;
    }
}

/* ---- memory regions (the domain's: one device per process) ------------------------ */

struct mr {
    struct fid_mr fid;
    struct mr *next;
    struct dd_endpoint *dep; /* NULL: no remote access, nothing to reach */
    struct dd_listener *listener;
    struct dd_conn **conns; /* initiators admitted (kept: dropping one closes it) */
    int nconns, capconns;
    uint64_t base, len;
};

static struct mr *mrs;
static struct dd_cq *mr_cq; /* the regions' connections post nothing; one queue for all */
static int virt_addr;       /* FI_MR_VIRT_ADDR: remote addresses are virtual addresses */

/* Takes the initiators that connected to region `m` since the last look. */
static void mr_accept(struct mr *m) {
    struct dd_conn *c;
    while (m->listener && dd_accept(m->listener, 0, &c) == DD_OK) {
        if (m->nconns == m->capconns) {
            int cap = m->capconns ? 2 * m->capconns : 8;
            struct dd_conn **n = realloc(m->conns, (size_t)cap * sizeof *n);
            if (!n) {
                dd_conn_close(c);
                continue;
            }
            m->conns = n, m->capconns = cap;
        }
        m->conns[m->nconns++] = c;
    }
}

static int mr_close(struct fid *f) {
    struct mr *m = (struct mr *)f;
    for (struct mr **pp = &mrs; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    mr_accept(m); /* so that what is queued closes too */
    for (int i = 0; i < m->nconns; i++)
        dd_conn_close(m->conns[i]);
    free(m->conns);
    if (m->listener)
        dd_listener_close(m->listener);
    if (m->dep)
        dd_endpoint_free(m->dep);
    free(m);
    return 0;
}

static struct fi_ops mr_fi_ops;

static int mr_reg(struct fid *dom, const void *buf, size_t len, uint64_t access, uint64_t offset,
                  uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *ctx) {
    (void)dom, (void)offset, (void)requested_key;
    if (flags)
        return -FI_EBADFLAGS;
    struct mr *m = calloc(1, sizeof *m);
    if (!m)
        return -FI_ENOMEM;
    m->fid.fid.fclass = FI_CLASS_MR, m->fid.fid.context = ctx, m->fid.fid.ops = &mr_fi_ops;
    m->fid.mem_desc = m;
    m->base = (uint64_t)(uintptr_t)buf, m->len = len;
    uint32_t rights = ((access & FI_REMOTE_READ) ? DD_REMOTE_READ : 0) |
                      ((access & FI_REMOTE_WRITE) ? DD_REMOTE_WRITE | DD_REMOTE_ATOMIC : 0);
    if (!rights || !len || !buf) { /* local use only: nothing for peers to reach */
        *out = &m->fid;
        return 0;
    }
    if ((!mr_cq && dd_cq_create(device, 64, &mr_cq) < 0) ||
        dd_endpoint_register(device, (void *)buf, len, rights, &m->dep) < 0) {
        fprintf(stderr, "deposit-fi: memory registration: %s\n", dd_last_error());
        free(m);
        return -FI_ENOMEM;
    }
    uint64_t reply[2] = {m->base, m->len};
    for (int tries = 0; tries < 16; tries++) {
        uint32_t r[2];
        if (getrandom(r, sizeof r, 0) != sizeof r)
            break;
        uint32_t service = 0x80000000u | r[0];
        m->fid.key = (uint64_t)(r[1] | 1) << 32 | service;
        struct dd_conn_options o = {0};
        o.private_data = reply, o.private_data_len = sizeof reply;
        o.require_private_data = &m->fid.key, o.require_private_data_len = sizeof m->fid.key;
        if (dd_listen(device, service, m->dep, mr_cq, &o, &m->listener) == DD_OK)
            break;
        m->listener = NULL; /* that service is taken: another draw */
    }
    if (!m->listener) {
        fprintf(stderr, "deposit-fi: memory registration: %s\n", dd_last_error());
        dd_endpoint_free(m->dep);
        free(m);
        return -FI_ENOMEM;
    }
    m->next = mrs, mrs = m;
    *out = &m->fid;
    return 0;
}

static int mr_regv(struct fid *dom, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
                   uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *ctx) {
    if (count > 1)
        return -FI_EINVAL;
    return mr_reg(dom, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, access, offset, requested_key,
                  flags, out, ctx);
}

static int mr_regattr(struct fid *dom, const struct fi_mr_attr *a, uint64_t flags, struct fid_mr **out) {
    return mr_regv(dom, a->mr_iov, a->iov_count, a->access, a->offset, a->requested_key, flags, out, a->context);
}

/* ---- completion queues ---------------------------------------------------------- */

struct cq {
    struct fid_cq fid;
    enum fi_cq_format format;
    struct fi_cq_tagged_entry *ring;
    fi_addr_t *src;
    size_t head, tail;
    struct fi_cq_err_entry err[CQ_ERR_DEPTH];
    size_t err_head, err_tail;
    struct ep *eps[8];
    int neps;
    int drained; /* the last read returned entries and emptied the queue */
};

static void cq_push(struct cq *cq, void *ctx, uint64_t flags, size_t len, void *buf, uint64_t data,
                    uint64_t tag, fi_addr_t src) {
    if (!cq)
        return;
    if (cq->tail - cq->head == CQ_DEPTH) {
        fprintf(stderr, "deposit-fi: completion queue overrun\n");
        return;
    }
    struct fi_cq_tagged_entry *e = &cq->ring[cq->tail % CQ_DEPTH];
    e->op_context = ctx, e->flags = flags, e->len = len, e->buf = buf, e->data = data, e->tag = tag;
    cq->src[cq->tail % CQ_DEPTH] = src;
    cq->tail++;
}

/* An error completion; for a receive, the message's tag and CQ data (Open MPI's MTL
 * takes a truncated message's source from them). */
static void cq_push_err(struct cq *cq, void *ctx, uint64_t flags, int err, size_t len, size_t olen, uint64_t tag,
                        uint64_t data) {
    if (!cq)
        return;
    if (cq->err_tail - cq->err_head == CQ_ERR_DEPTH) {
        fprintf(stderr, "deposit-fi: completion queue overrun (errors)\n");
        return;
    }
    struct fi_cq_err_entry *e = &cq->err[cq->err_tail++ % CQ_ERR_DEPTH];
    memset(e, 0, sizeof *e);
    e->op_context = ctx, e->flags = flags, e->len = len, e->olen = olen, e->err = err, e->tag = tag;
    e->data = data;
    e->prov_errno = err;
}

/* ---- endpoints ------------------------------------------------------------------- */

struct rx {
    struct rx *next;
    void *buf, *ctx;
    size_t len;
    fi_addr_t src;
    uint64_t tag, ignore;
    int tagged;
};

struct unexp {
    struct unexp *next;
    int peer, tagged, complete;
    uint64_t tag, data, total;
    size_t got;
    uint8_t *buf;  /* NULL once discarded */
    struct rx *rx; /* a receive that matched it before it was whole */
    /* Claimed by a peek (FI_PEEK | FI_CLAIM) with this context: only the FI_CLAIM
     * receive with the same context takes it. Discarded (FI_DISCARD) before it was
     * whole: its fragments are dropped, the entry freed at the last one. */
    void *claim_ctx;
    int claimed, discarded;
};

struct tx {
    struct tx *next;
    const uint8_t *buf;
    size_t len, off;
    int peer, tagged, inject, flags;
    uint64_t tag, data;
    void *ctx;
    int frags_out;
    uint32_t seq;
    uint8_t *copy; /* inject: our own copy; atomics: the operands */
    /* One-sided operations: the kind, the target region (key, address) and the
     * connection to it, where results go, compare operands, the atomic op, the error. */
    int kind, err;
    uint64_t key, raddr;
    struct dd_conn *rconn;
    uint8_t *result, *compare;
    enum fi_op aop;
};

/* A remote memory region we reach: its key at a peer, our connection to it, and its
 * address and length (from its listener's reply). */
struct rmr {
    int peer;
    uint64_t key, base, len;
    struct dd_conn *conn;
};

struct peer {
    struct addr a;
    struct dd_conn *out; /* our connection to it, once opened */
    uint32_t ip;         /* its ring instruction */
    uint32_t slot;       /* its ring's stride: our fragments fit it */
    fi_addr_t fi_addr;   /* its AV index, once found there (0: not yet; else index + 1) */
    int credits, consumed, credit_pending;
    uint32_t tx_seq;
    /* The message being received from it. */
    struct rx *cur_rx;
    struct unexp *cur_unexp;
    size_t cur_got, cur_total;
    int cur_truncated;
    uint64_t cur_tag, cur_data;
    int cur_tagged;
};

struct av {
    struct fid_av fid;
    struct addr *table;
    size_t n, cap;
};

struct ep {
    struct fid_ep fid;
    struct fi_info *info;
    struct cq *txcq, *rxcq;
    struct av *av;
    int enabled;
    uint32_t service;
    struct dd_endpoint *dep;
    /* This endpoint's ring stride: SLOT, or less where one message carries less. */
    uint32_t slot;
    struct dd_cq *dcq;
    struct dd_listener *listener;
    struct dd_instr_window *code;
    struct dd_conn *accepted[MAX_PEERS];
    int naccepted;
    uint64_t consumed;
    struct peer peers[MAX_PEERS];
    int npeers;
    struct rx *msg_rx, *tag_rx;
    struct unexp *unexp;
    struct tx *txq, *txq_tail;
    /* Staging slots: the request each holds until acknowledged. */
    struct tx *stage_owner[STAGE_SLOTS];
    /* A one-sided operation's slot: where in the request it is, and how many bytes. */
    size_t stage_at[STAGE_SLOTS];
    uint32_t stage_len[STAGE_SLOTS];
    int stage_next, stage_free;
    struct rmr *rmrs;
    int nrmr, caprmr;
    int progressing;
    unsigned turns;
};

static uint8_t *ring_of(struct ep *ep) { return dd_endpoint_ptr(ep->dep); }
static uint64_t stage_off(int s) { return (uint64_t)RING_SLOTS * SLOT + (uint64_t)s * SLOT; }
/* The ring lies at 0 (RING_SLOTS x ep->slot, within RING_SLOTS x SLOT), the staging slots
 * after it. */

static int peer_find(struct ep *ep, const uint8_t ip[4], uint32_t service) {
    for (int i = 0; i < ep->npeers; i++)
        if (same(&ep->peers[i].a, ip, service))
            return i;
    if (ep->npeers == MAX_PEERS)
        return -1;
    struct peer *p = &ep->peers[ep->npeers];
    memset(p, 0, sizeof *p);
    memcpy(p->a.ip, ip, 4);
    p->a.service = service;
    p->credits = CREDITS;
    return ep->npeers++;
}

/* The AV index of a peer (a search once: AV entries stay until the AV closes). */
static fi_addr_t fi_addr_of(struct ep *ep, int peer) {
    struct peer *p = &ep->peers[peer];
    if (p->fi_addr)
        return p->fi_addr - 1;
    if (!ep->av)
        return FI_ADDR_NOTAVAIL;
    for (size_t i = 0; i < ep->av->n; i++)
        if (same(&ep->av->table[i], p->a.ip, p->a.service)) {
            p->fi_addr = i + 1;
            return i;
        }
    return FI_ADDR_NOTAVAIL;
}

/* Opens our connection to a peer (blocking: the device's CM timeout). */
static int peer_connect(struct ep *ep, struct peer *p) {
    if (p->out)
        return 0;
    uint8_t hello[8];
    memcpy(hello, device_ip, 4);
    memcpy(hello + 4, &ep->service, 4);
    struct dd_conn_options o = {0};
    o.private_data = hello;
    o.private_data_len = sizeof hello;
    if (dd_connect(device, p->a.ip, p->a.service, ep->dep, ep->dcq, &o, &p->out) < 0) {
        fprintf(stderr, "deposit-fi: connect to %u.%u.%u.%u:%u: %s\n", p->a.ip[0], p->a.ip[1], p->a.ip[2],
                p->a.ip[3], p->a.service, dd_last_error());
        p->out = NULL;
        return -FI_EHOSTUNREACH;
    }
    const void *pd;
    uint32_t len;
    dd_conn_private_data(p->out, &pd, &len);
    if (len < 8) {
        fprintf(stderr, "deposit-fi: the peer's listener did not say its instruction pointer and slot\n");
        return -FI_EOTHER;
    }
    memcpy(&p->ip, pd, 4);
    memcpy(&p->slot, (const uint8_t *)pd + 4, 4);
    if (p->slot > ep->slot)
        p->slot = ep->slot; /* our staging slots hold no more than our own stride */
    if (p->slot <= HDR) {
        fprintf(stderr, "deposit-fi: the peer's slot of %u bytes holds no data\n", p->slot);
        return -FI_EOTHER;
    }
    return 0;
}

/* Posts one slot's message (header + data) to a peer, staged in slot `s`. */
static int post_slot(struct ep *ep, struct peer *p, int s, uint32_t len) {
    struct dd_wr w = {0};
    w.wr_id = (uint64_t)s;
    w.opcode = DD_OP_INVOKE;
    w.flags = DD_WR_SIGNALED;
    w.local = ep->dep;
    w.local_offset = stage_off(s);
    w.length = len;
    w.ip = p->ip;
    int rc = dd_post(p->out, &w);
    if (rc < 0 && rc != DD_ERR_AGAIN)
        fprintf(stderr, "deposit-fi: post: %s\n", dd_last_error());
    return rc;
}

static int stage_take(struct ep *ep, struct tx *owner) {
    if (ep->stage_free == 0)
        return -1;
    for (int k = 0; k < STAGE_SLOTS; k++) {
        int s = (ep->stage_next + k) % STAGE_SLOTS;
        if (!ep->stage_owner[s]) {
            ep->stage_owner[s] = owner;
            ep->stage_free--;
            ep->stage_next = (s + 1) % STAGE_SLOTS;
            return s;
        }
    }
    return -1;
}

/* A credit message to a peer: header only, costs no credit (the ring reserves room). */
static struct tx credit_owner;

static void send_credit(struct ep *ep, struct peer *p) {
    if (peer_connect(ep, p) < 0)
        return;
    int s = stage_take(ep, &credit_owner);
    if (s < 0) {
        p->credit_pending = 1;
        return;
    }
    struct hdr h = {0};
    h.type = T_CREDIT;
    memcpy(h.src_ip, device_ip, 4);
    h.src_service = ep->service;
    h.credits = (uint32_t)p->consumed;
    memcpy(ring_of(ep) + stage_off(s), &h, HDR);
    if (post_slot(ep, p, s, HDR) < 0) {
        ep->stage_owner[s] = NULL;
        ep->stage_free++;
        p->credit_pending = 1;
        return;
    }
    p->consumed = 0;
    p->credit_pending = 0;
}

/* The region `key` of peer `pi`: our connection to it, opened on first use (blocking:
 * the device's CM timeout); NULL when the peer admits no such key. */
static struct rmr *rmr_get(struct ep *ep, int pi, uint64_t key) {
    for (int i = 0; i < ep->nrmr; i++)
        if (ep->rmrs[i].peer == pi && ep->rmrs[i].key == key)
            return &ep->rmrs[i];
    if (ep->nrmr == ep->caprmr) {
        int cap = ep->caprmr ? 2 * ep->caprmr : 8;
        struct rmr *n = realloc(ep->rmrs, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        ep->rmrs = n, ep->caprmr = cap;
    }
    struct peer *p = &ep->peers[pi];
    struct dd_conn_options o = {0};
    o.private_data = &key, o.private_data_len = sizeof key;
    struct dd_conn *c;
    if (dd_connect(device, p->a.ip, (uint32_t)key, ep->dep, ep->dcq, &o, &c) < 0)
        return NULL; /* refused: no region with that key there */
    const void *pd;
    uint32_t len;
    dd_conn_private_data(c, &pd, &len);
    if (len < 16) {
        dd_conn_close(c);
        return NULL;
    }
    struct rmr *r = &ep->rmrs[ep->nrmr++];
    r->peer = pi, r->key = key, r->conn = c;
    memcpy(&r->base, pd, 8);
    memcpy(&r->len, (const uint8_t *)pd + 8, 8);
    return r;
}

static void tx_done(struct ep *ep, struct tx *t);

/* Moves as much of a one-sided request as staging allows; the number posted. */
static int push_rma(struct ep *ep, struct tx *t) {
    if (!t->rconn && t->off < t->len) {
        struct rmr *r = rmr_get(ep, t->peer, t->key);
        if (!r) {
            t->err = FI_EACCES, t->off = t->len;
        } else {
            uint64_t at = t->raddr - (virt_addr ? r->base : 0);
            if ((virt_addr && t->raddr < r->base) || at + t->len > UINT32_MAX) {
                t->err = FI_EINVAL, t->off = t->len;
            } else {
                t->raddr = at; /* from here on, an offset into the region */
                t->rconn = r->conn;
            }
        }
    }
    int posted = 0;
    while (t->off < t->len && ep->stage_free > 0) {
        int s = stage_take(ep, t);
        if (s < 0)
            break;
        uint8_t *slot = ring_of(ep) + stage_off(s);
        int atomic = t->kind >= K_ATOMIC;
        size_t n = atomic ? 8 : (t->len - t->off < SLOT ? t->len - t->off : SLOT);
        struct dd_wr w = {0};
        w.wr_id = (uint64_t)s;
        w.flags = DD_WR_SIGNALED;
        w.local = ep->dep;
        w.local_offset = stage_off(s);
        w.length = (uint32_t)n;
        w.remote_offset = (uint32_t)(t->raddr + t->off);
        uint64_t operand = 0;
        if (atomic && t->copy)
            memcpy(&operand, t->copy + t->off, 8);
        if (t->kind == K_WRITE || (t->kind == K_ATOMIC && t->aop == FI_ATOMIC_WRITE)) {
            w.opcode = DD_OP_WRITE;
            memcpy(slot, (t->kind == K_WRITE ? t->buf : t->copy) + t->off, n);
        } else if (t->kind == K_READ) {
            w.opcode = DD_OP_READ;
        } else if (t->kind == K_CSWAP) {
            w.opcode = DD_OP_CMP_SWAP;
            memcpy(&w.compare, t->compare + t->off, 8);
            w.swap = operand;
        } else { /* FI_SUM, and FI_ATOMIC_READ as adding 0 */
            w.opcode = DD_OP_FETCH_ADD;
            w.add = t->aop == FI_SUM ? operand : 0;
        }
        ep->stage_at[s] = t->off, ep->stage_len[s] = (uint32_t)n;
        int rc = dd_post(t->rconn, &w);
        if (rc < 0) {
            ep->stage_owner[s] = NULL;
            ep->stage_free++;
            if (rc != DD_ERR_AGAIN)
                t->err = FI_EIO, t->off = t->len;
            break;
        }
        posted++;
        t->frags_out++;
        t->off += n;
    }
    if (t->off >= t->len && t->frags_out == 0)
        tx_done(ep, t);
    return posted;
}

/* Moves as many fragments of queued sends as credits and staging allow. */
static void push_sends(struct ep *ep) {
    int posted = 0;
    for (struct tx *t = ep->txq, *next; t; t = next) {
        next = t->next;
        if (t->kind != K_MSG) {
            posted += push_rma(ep, t);
            continue;
        }
        struct peer *p = &ep->peers[t->peer];
        if (!p->out && peer_connect(ep, p) < 0)
            continue;
        while (t->off < t->len || (t->len == 0 && t->frags_out == 0 && t->off == 0 && !t->flags)) {
            if (p->credits == 0 || ep->stage_free == 0)
                break;
            int s = stage_take(ep, t);
            if (s < 0)
                break;
            size_t frag = p->slot - HDR;
            size_t n = t->len - t->off < frag ? t->len - t->off : frag;
            struct hdr h = {0};
            h.type = T_DATA;
            h.flags = (uint8_t)((t->off == 0 ? F_FIRST : 0) | (t->off + n == t->len ? F_LAST : 0) |
                                (t->tagged ? F_TAGGED : 0));
            h.frag_len = (uint32_t)n;
            memcpy(h.src_ip, device_ip, 4);
            h.src_service = ep->service;
            h.tag = t->tag, h.data = t->data, h.total = t->len, h.seq = t->seq;
            uint8_t *slot = ring_of(ep) + stage_off(s);
            memcpy(slot, &h, HDR);
            memcpy(slot + HDR, (t->copy ? t->copy : t->buf) + t->off, n);
            if (post_slot(ep, p, s, (uint32_t)(HDR + n)) < 0) {
                ep->stage_owner[s] = NULL;
                ep->stage_free++;
                break;
            }
            p->credits--;
            posted++;
            t->frags_out++;
            t->off += n;
            if (t->len == 0) {
                t->flags = 1; /* the one empty fragment went */
                break;
            }
        }
    }
    /* A doorbell: what was posted leaves now, not at the next progress call (an
     * application may wait elsewhere, e.g. for a peer, after an inject). */
    if (posted)
        dd_device_progress(device);
}

static void tx_done(struct ep *ep, struct tx *t) {
    /* Unlink from the queue. */
    struct tx **pp = &ep->txq, *prev = NULL;
    while (*pp && *pp != t)
        prev = *pp, pp = &(*pp)->next;
    if (*pp) {
        *pp = t->next;
        if (ep->txq_tail == t)
            ep->txq_tail = prev;
    }
    static const uint64_t kind_flags[] = {
        [K_WRITE] = FI_RMA | FI_WRITE, [K_READ] = FI_RMA | FI_READ, [K_ATOMIC] = FI_ATOMIC | FI_WRITE,
        [K_FETCH] = FI_ATOMIC | FI_READ, [K_CSWAP] = FI_ATOMIC | FI_READ,
    };
    uint64_t flags = t->kind == K_MSG ? (t->tagged ? FI_TAGGED : FI_MSG) | FI_SEND : kind_flags[t->kind];
    if (t->err)
        cq_push_err(ep->txcq, t->ctx, flags, t->err, 0, 0, 0, 0);
    else if (!t->inject)
        cq_push(ep->txcq, t->ctx, flags, 0, NULL, 0, 0, FI_ADDR_NOTAVAIL);
    free(t->copy);
    free(t->compare);
    free(t);
}

static void deliver_done(struct ep *ep, struct rx *rx, int peer, size_t got, size_t total, uint64_t tag,
                         uint64_t data, int tagged, int has_data) {
    uint64_t flags = (tagged ? FI_TAGGED : FI_MSG) | FI_RECV | (has_data ? FI_REMOTE_CQ_DATA : 0);
    if (total > rx->len)
        cq_push_err(ep->rxcq, rx->ctx, flags, FI_ETRUNC, rx->len, total - rx->len, tag, data);
    else
        cq_push(ep->rxcq, rx->ctx, flags, got, rx->buf, data, tag, fi_addr_of(ep, peer));
    free(rx);
}

static int matches(struct ep *ep, struct rx *rx, int peer, int tagged, uint64_t tag) {
    if (rx->tagged != tagged)
        return 0;
    if (tagged && ((rx->tag ^ tag) & ~rx->ignore))
        return 0;
    if (rx->src != FI_ADDR_UNSPEC && rx->src != fi_addr_of(ep, peer))
        return 0;
    return 1;
}

static struct rx *take_posted(struct ep *ep, int peer, int tagged, uint64_t tag) {
    struct rx **pp = tagged ? &ep->tag_rx : &ep->msg_rx;
    for (; *pp; pp = &(*pp)->next)
        if (matches(ep, *pp, peer, tagged, tag)) {
            struct rx *r = *pp;
            *pp = r->next;
            return r;
        }
    return NULL;
}

static void unexp_unlink(struct ep *ep, struct unexp *u) {
    struct unexp **pp = &ep->unexp;
    while (*pp != u)
        pp = &(*pp)->next;
    *pp = u->next;
}

/* Receive `rx` takes unexpected message `u`: at once if it is whole, else when its last
 * fragment comes (consume). */
static void unexp_take(struct ep *ep, struct unexp *u, struct rx *rx) {
    if (!u->complete) {
        u->rx = rx;
        return;
    }
    size_t n = u->total < rx->len ? u->total : rx->len;
    if (n)
        memcpy(rx->buf, u->buf, n);
    unexp_unlink(ep, u);
    deliver_done(ep, rx, u->peer, n, u->total, u->tag, u->data, u->tagged, 1);
    free(u->buf);
    free(u);
}

/* Drops unexpected message `u` (FI_DISCARD): now if it is whole, else as the rest of it
 * comes (consume). */
static void unexp_discard(struct ep *ep, struct unexp *u) {
    free(u->buf);
    u->buf = NULL;
    if (u->complete) {
        unexp_unlink(ep, u);
        free(u);
    } else {
        u->discarded = 1;
    }
}

/* One message of the ring. */
static int debug = -1;

static void consume(struct ep *ep, const uint8_t *slot) {
    struct hdr h;
    memcpy(&h, slot, HDR);
    if (debug < 0)
        debug = getenv("DEPOSIT_FI_DEBUG") != NULL;
    if (debug)
        fprintf(stderr, "deposit-fi: slot %llu: type %u flags %u len %u from %u.%u.%u.%u:%u seq %u credits %u\n",
                (unsigned long long)ep->consumed, h.type, h.flags, h.frag_len, h.src_ip[0], h.src_ip[1], h.src_ip[2],
                h.src_ip[3], h.src_service, h.seq, h.credits);
    int pi = peer_find(ep, h.src_ip, h.src_service);
    if (pi < 0) {
        fprintf(stderr, "deposit-fi: more than %d peers\n", MAX_PEERS);
        return;
    }
    struct peer *p = &ep->peers[pi];
    if (h.type == T_CREDIT) {
        p->credits += (int)h.credits;
        return;
    }
    if (h.type != T_DATA)
        return;
    const uint8_t *data = slot + HDR;
    int tagged = !!(h.flags & F_TAGGED);
    if (h.flags & F_FIRST) {
        p->cur_total = h.total, p->cur_got = 0, p->cur_tag = h.tag, p->cur_data = h.data;
        p->cur_tagged = tagged;
        p->cur_rx = take_posted(ep, pi, tagged, h.tag);
        p->cur_unexp = NULL;
        if (!p->cur_rx) {
            struct unexp *u = calloc(1, sizeof *u);
            u->peer = pi, u->tagged = tagged, u->tag = h.tag, u->data = h.data, u->total = h.total;
            u->buf = malloc(h.total ? h.total : 1);
            struct unexp **pp = &ep->unexp;
            while (*pp)
                pp = &(*pp)->next;
            *pp = u;
            p->cur_unexp = u;
        }
    }
    if (p->cur_rx) {
        struct rx *rx = p->cur_rx;
        if (p->cur_got < rx->len) {
            size_t n = h.frag_len < rx->len - p->cur_got ? h.frag_len : rx->len - p->cur_got;
            memcpy((uint8_t *)rx->buf + p->cur_got, data, n);
        }
    } else if (p->cur_unexp && p->cur_unexp->buf) {
        memcpy(p->cur_unexp->buf + p->cur_got, data, h.frag_len);
    }
    p->cur_got += h.frag_len;
    if (h.flags & F_LAST) {
        if (p->cur_rx) {
            size_t got = p->cur_got < p->cur_rx->len ? p->cur_got : p->cur_rx->len;
            deliver_done(ep, p->cur_rx, pi, got, p->cur_total, p->cur_tag, p->cur_data, tagged, 1);
        } else if (p->cur_unexp) {
            struct unexp *u = p->cur_unexp;
            u->got = p->cur_got;
            u->complete = 1;
            if (u->discarded) {
                unexp_unlink(ep, u);
                free(u);
            } else if (u->rx) { /* matched while incomplete */
                struct rx *rx = u->rx;
                size_t n = u->total < rx->len ? u->total : rx->len;
                if (n)
                    memcpy(rx->buf, u->buf, n);
                unexp_unlink(ep, u);
                deliver_done(ep, rx, u->peer, n, u->total, u->tag, u->data, u->tagged, 1);
                free(u->buf);
                free(u);
            }
        }
        p->cur_rx = NULL, p->cur_unexp = NULL;
    }
    if (++p->consumed >= CREDITS / 2 || p->credit_pending)
        send_credit(ep, p);
}

static void progress(struct ep *ep) {
    if (!ep->enabled || ep->progressing)
        return;
    ep->progressing = 1;
    dd_device_progress(device);
    /* New peers (a look every 64 turns: it is a call through the API's wait). */
    struct dd_conn *c;
    if ((ep->turns++ & 63) == 0) {
        while (ep->naccepted < MAX_PEERS && dd_accept(ep->listener, 0, &c) == DD_OK)
            ep->accepted[ep->naccepted++] = c;
        for (struct mr *m = mrs; m; m = m->next)
            mr_accept(m);
    }
    /* The ring. */
    uint64_t arrived = 0;
    for (int i = 0; i < ep->naccepted; i++)
        arrived += dd_conn_arrivals(ep->accepted[i]);
    while (ep->consumed < arrived) {
        consume(ep, ring_of(ep) + (ep->consumed % RING_SLOTS) * ep->slot);
        ep->consumed++;
    }
    /* Acknowledged fragments: taken, not polled (that would drive the device again,
     * and an acknowledgement owed for a message just consumed would go in a frame of
     * its own instead of riding on the reply the application is about to post). */
    struct dd_completion wc[64];
    int n;
    while ((n = dd_cq_take(ep->dcq, wc, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            int s = (int)wc[i].wr_id;
            if (s < 0 || s >= STAGE_SLOTS)
                continue;
            struct tx *t = ep->stage_owner[s];
            ep->stage_owner[s] = NULL;
            ep->stage_free++;
            if (t && t != &credit_owner && t->kind != K_MSG) {
                if (wc[i].status != DD_WC_SUCCESS) /* the target refused it: bounds, rights */
                    t->err = wc[i].remote_reason >= 0 ? FI_EACCES : FI_EIO, t->off = t->len;
                else if (t->result) /* reads, fetching and compare atomics */
                    memcpy(t->result + ep->stage_at[s], ring_of(ep) + stage_off(s), ep->stage_len[s]);
                if (--t->frags_out == 0 && t->off >= t->len)
                    tx_done(ep, t);
                continue;
            }
            if (wc[i].status != DD_WC_SUCCESS)
                fprintf(stderr, "deposit-fi: a fragment completed with %s (%s)\n", dd_wc_status_str(wc[i].status),
                        dd_drop_reason_str(wc[i].remote_reason));
            if (!t || t == &credit_owner)
                continue;
            if (--t->frags_out == 0 && t->off >= t->len)
                tx_done(ep, t);
        }
    }
    for (int i = 0; i < ep->npeers; i++)
        if (ep->peers[i].credit_pending)
            send_credit(ep, &ep->peers[i]);
    push_sends(ep);
    ep->progressing = 0;
}

/* ---- data transfer calls ---------------------------------------------------------- */

static struct ep *ep_of(struct fid_ep *e) { return (struct ep *)e; }

static int peer_of_addr(struct ep *ep, fi_addr_t a) {
    if (!ep->av || a >= ep->av->n)
        return -1;
    return peer_find(ep, ep->av->table[a].ip, ep->av->table[a].service);
}

static ssize_t do_send(struct fid_ep *fep, const void *buf, size_t len, fi_addr_t dest, void *ctx, int tagged,
                       uint64_t tag, uint64_t data, int inject) {
    struct ep *ep = ep_of(fep);
    if (!ep->enabled)
        return -FI_EOPBADSTATE;
    if (len > MAX_MSG)
        return -FI_EMSGSIZE;
    int pi = peer_of_addr(ep, dest);
    if (pi < 0)
        return -FI_EINVAL;
    struct tx *t = calloc(1, sizeof *t);
    if (!t)
        return -FI_ENOMEM;
    t->buf = buf, t->len = len, t->peer = pi, t->tagged = tagged, t->tag = tag, t->data = data, t->ctx = ctx;
    t->inject = inject;
    t->seq = ep->peers[pi].tx_seq++;
    if (inject) {
        t->copy = malloc(len ? len : 1);
        if (!t->copy) {
            free(t);
            return -FI_ENOMEM;
        }
        memcpy(t->copy, buf, len);
    }
    if (ep->txq_tail)
        ep->txq_tail->next = t;
    else
        ep->txq = t;
    ep->txq_tail = t;
    push_sends(ep);
    return 0;
}

static ssize_t do_recv(struct fid_ep *fep, void *buf, size_t len, fi_addr_t src, void *ctx, int tagged,
                       uint64_t tag, uint64_t ignore) {
    struct ep *ep = ep_of(fep);
    struct rx *rx = calloc(1, sizeof *rx);
    if (!rx)
        return -FI_ENOMEM;
    rx->buf = buf, rx->len = len, rx->ctx = ctx, rx->tagged = tagged, rx->tag = tag, rx->ignore = ignore;
    rx->src = (ep->info->caps & FI_DIRECTED_RECV) ? src : FI_ADDR_UNSPEC;
    /* An unexpected message first, in arrival order (not one that a receive or a peek
     * already has). */
    for (struct unexp *u = ep->unexp; u; u = u->next)
        if (!u->rx && !u->claimed && !u->discarded && matches(ep, rx, u->peer, u->tagged, u->tag)) {
            unexp_take(ep, u, rx);
            return 0;
        }
    struct rx **pp = tagged ? &ep->tag_rx : &ep->msg_rx;
    while (*pp)
        pp = &(*pp)->next;
    *pp = rx;
    return 0;
}

static ssize_t msg_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx) {
    (void)desc;
    return do_send(e, buf, len, dest, ctx, 0, 0, 0, 0);
}
static ssize_t msg_senddata(struct fid_ep *e, const void *buf, size_t len, void *desc, uint64_t data,
                            fi_addr_t dest, void *ctx) {
    (void)desc;
    return do_send(e, buf, len, dest, ctx, 0, 0, data, 0);
}
static ssize_t msg_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest) {
    return do_send(e, buf, len, dest, NULL, 0, 0, 0, 1);
}
static ssize_t msg_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data, fi_addr_t dest) {
    return do_send(e, buf, len, dest, NULL, 0, 0, data, 1);
}
static ssize_t msg_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx) {
    (void)desc;
    return do_recv(e, buf, len, src, ctx, 0, 0, 0);
}
static ssize_t msg_sendv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                         void *ctx) {
    (void)desc;
    if (count > 1)
        return -FI_EINVAL;
    return do_send(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, dest, ctx, 0, 0, 0, 0);
}
static ssize_t msg_recvv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                         void *ctx) {
    (void)desc;
    if (count > 1)
        return -FI_EINVAL;
    return do_recv(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, src, ctx, 0, 0, 0);
}
static ssize_t msg_sendmsg(struct fid_ep *e, const struct fi_msg *m, uint64_t flags) {
    if (m->iov_count > 1)
        return -FI_EINVAL;
    const void *b = m->iov_count ? m->msg_iov[0].iov_base : NULL;
    size_t l = m->iov_count ? m->msg_iov[0].iov_len : 0;
    return do_send(e, b, l, m->addr, m->context, 0, 0, (flags & FI_REMOTE_CQ_DATA) ? m->data : 0,
                   !!(flags & FI_INJECT) && !(flags & FI_COMPLETION));
}
static ssize_t msg_recvmsg(struct fid_ep *e, const struct fi_msg *m, uint64_t flags) {
    if (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD))
        return -FI_ENOSYS; /* tagged receives only: not a receive without a buffer */
    if (m->iov_count > 1)
        return -FI_EINVAL;
    return do_recv(e, m->iov_count ? m->msg_iov[0].iov_base : NULL, m->iov_count ? m->msg_iov[0].iov_len : 0,
                   m->addr, m->context, 0, 0, 0);
}

static ssize_t tag_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag,
                        void *ctx) {
    (void)desc;
    return do_send(e, buf, len, dest, ctx, 1, tag, 0, 0);
}
static ssize_t tag_senddata(struct fid_ep *e, const void *buf, size_t len, void *desc, uint64_t data,
                            fi_addr_t dest, uint64_t tag, void *ctx) {
    (void)desc;
    return do_send(e, buf, len, dest, ctx, 1, tag, data, 0);
}
static ssize_t tag_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest, uint64_t tag) {
    return do_send(e, buf, len, dest, NULL, 1, tag, 0, 1);
}
static ssize_t tag_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
                              uint64_t tag) {
    return do_send(e, buf, len, dest, NULL, 1, tag, data, 1);
}
static ssize_t tag_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
                        uint64_t ignore, void *ctx) {
    (void)desc;
    return do_recv(e, buf, len, src, ctx, 1, tag, ignore);
}
static ssize_t tag_sendv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                         uint64_t tag, void *ctx) {
    (void)desc;
    if (count > 1)
        return -FI_EINVAL;
    return do_send(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, dest, ctx, 1, tag, 0, 0);
}
static ssize_t tag_recvv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                         uint64_t tag, uint64_t ignore, void *ctx) {
    (void)desc;
    if (count > 1)
        return -FI_EINVAL;
    return do_recv(e, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, src, ctx, 1, tag, ignore);
}
static ssize_t tag_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags) {
    if (m->iov_count > 1)
        return -FI_EINVAL;
    const void *b = m->iov_count ? m->msg_iov[0].iov_base : NULL;
    size_t l = m->iov_count ? m->msg_iov[0].iov_len : 0;
    return do_send(e, b, l, m->addr, m->context, 1, m->tag, (flags & FI_REMOTE_CQ_DATA) ? m->data : 0,
                   !!(flags & FI_INJECT) && !(flags & FI_COMPLETION));
}
/* FI_PEEK: the unexpected message that a tagged receive with this tag, ignore mask and
 * source would take now (arrival order; not one a receive or a claim already has),
 * reported whole (its length, tag, CQ data, source) even while its fragments are still
 * coming; its data too when the peek gives a buffer and the message is whole. Else an
 * FI_ENOMSG error completion. With FI_CLAIM the message is the peek's: no other
 * receive or peek sees it, the FI_CLAIM receive with the same context takes it. With
 * FI_DISCARD it is dropped (the peek's completion still describes it). */
static ssize_t tag_peek(struct ep *ep, const struct fi_msg_tagged *m, uint64_t flags) {
    progress(ep); /* what has arrived is there to be seen */
    struct rx want = {.tagged = 1, .tag = m->tag, .ignore = m->ignore};
    want.src = (ep->info->caps & FI_DIRECTED_RECV) ? m->addr : FI_ADDR_UNSPEC;
    struct unexp *u = ep->unexp;
    while (u && (u->rx || u->claimed || u->discarded || !matches(ep, &want, u->peer, u->tagged, u->tag)))
        u = u->next;
    if (!u) {
        cq_push_err(ep->rxcq, m->context, FI_TAGGED | FI_RECV, FI_ENOMSG, 0, 0, m->tag, 0);
        return 0;
    }
    void *buf = NULL;
    if (!(flags & FI_DISCARD) && u->complete && m->iov_count == 1 && m->msg_iov[0].iov_base) {
        size_t n = u->total < m->msg_iov[0].iov_len ? u->total : m->msg_iov[0].iov_len;
        memcpy(m->msg_iov[0].iov_base, u->buf, n);
        buf = m->msg_iov[0].iov_base;
    }
    cq_push(ep->rxcq, m->context, FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA, u->total, buf, u->data, u->tag,
            fi_addr_of(ep, u->peer));
    if (flags & FI_DISCARD) {
        unexp_discard(ep, u);
    } else if (flags & FI_CLAIM) {
        u->claimed = 1;
        u->claim_ctx = m->context;
    }
    return 0;
}

/* FI_CLAIM without FI_PEEK: the message claimed by the peek with this context, into
 * the buffer given (or, with FI_DISCARD, dropped: a completion of 0 bytes). */
static ssize_t tag_claim(struct ep *ep, const struct fi_msg_tagged *m, uint64_t flags) {
    struct unexp *u = ep->unexp;
    while (u && !(u->claimed && u->claim_ctx == m->context && !u->rx && !u->discarded))
        u = u->next;
    if (!u)
        return -FI_EINVAL; /* nothing claimed with that context */
    if (flags & FI_DISCARD) {
        cq_push(ep->rxcq, m->context, FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA, 0, NULL, u->data, u->tag,
                fi_addr_of(ep, u->peer));
        unexp_discard(ep, u);
        return 0;
    }
    struct rx *rx = calloc(1, sizeof *rx);
    if (!rx)
        return -FI_ENOMEM;
    rx->buf = m->iov_count ? m->msg_iov[0].iov_base : NULL, rx->len = m->iov_count ? m->msg_iov[0].iov_len : 0;
    rx->ctx = m->context, rx->tagged = 1, rx->tag = u->tag, rx->src = FI_ADDR_UNSPEC;
    unexp_take(ep, u, rx);
    return 0;
}

static ssize_t tag_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags) {
    if (m->iov_count > 1)
        return -FI_EINVAL;
    if (flags & FI_PEEK)
        return tag_peek(ep_of(e), m, flags);
    if (flags & FI_CLAIM)
        return tag_claim(ep_of(e), m, flags);
    return do_recv(e, m->iov_count ? m->msg_iov[0].iov_base : NULL, m->iov_count ? m->msg_iov[0].iov_len : 0,
                   m->addr, m->context, 1, m->tag, m->ignore);
}

/* Unsupported operations of every signature (the callers only look at the result). */
static int nosys_int() { return -FI_ENOSYS; }
static ssize_t nosys_ssize() { return -FI_ENOSYS; }

static struct fi_ops_msg msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = msg_recv, .recvv = msg_recvv, .recvmsg = msg_recvmsg,
    .send = msg_send, .sendv = msg_sendv, .sendmsg = msg_sendmsg,
    .inject = msg_inject, .senddata = msg_senddata, .injectdata = msg_injectdata,
};
static struct fi_ops_tagged tag_ops = {
    .size = sizeof(struct fi_ops_tagged),
    .recv = tag_recv, .recvv = tag_recvv, .recvmsg = tag_recvmsg,
    .send = tag_send, .sendv = tag_sendv, .sendmsg = tag_sendmsg,
    .inject = tag_inject, .senddata = tag_senddata, .injectdata = tag_injectdata,
};

/* ---- RMA and atomics ---------------------------------------------------------------- */

/* Queues a one-sided request of `len` bytes (atomics: `len` / 8 words). */
static ssize_t do_rma(struct fid_ep *fep, int kind, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
                      uint64_t key, void *ctx, int inject, void *result, const void *compare, enum fi_op op) {
    struct ep *ep = ep_of(fep);
    if (!ep->enabled)
        return -FI_EOPBADSTATE;
    int pi = peer_of_addr(ep, dest);
    if (pi < 0)
        return -FI_EINVAL;
    struct tx *t = calloc(1, sizeof *t);
    if (!t)
        return -FI_ENOMEM;
    t->kind = kind, t->buf = buf, t->len = len, t->peer = pi, t->ctx = ctx, t->inject = inject;
    t->raddr = addr, t->key = key, t->result = result, t->aop = op;
    if (kind == K_READ)
        t->result = (uint8_t *)buf;
    /* Operands are ours from now on (an inject's buffer is the caller's again at once). */
    int own = (inject && kind == K_WRITE) || kind >= K_ATOMIC;
    if (own) {
        t->copy = malloc(len ? len : 1);
        if (t->copy && buf)
            memcpy(t->copy, buf, len);
        if (kind == K_WRITE)
            t->buf = t->copy;
    }
    if (compare) {
        t->compare = malloc(len);
        if (t->compare)
            memcpy(t->compare, compare, len);
    }
    if ((own && !t->copy) || (compare && !t->compare)) {
        free(t->copy), free(t->compare), free(t);
        return -FI_ENOMEM;
    }
    if (ep->txq_tail)
        ep->txq_tail->next = t;
    else
        ep->txq = t;
    ep->txq_tail = t;
    push_sends(ep);
    return 0;
}

/* The one-iovec and message forms of reads and writes. */
static ssize_t do_rmav(struct fid_ep *e, int kind, const struct iovec *iov, size_t count, fi_addr_t peer,
                       uint64_t addr, uint64_t key, void *ctx) {
    if (count > 1)
        return -FI_EINVAL;
    return do_rma(e, kind, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, peer, addr, key, ctx, 0,
                  NULL, NULL, 0);
}
static ssize_t do_rmamsg(struct fid_ep *e, int kind, const struct fi_msg_rma *m, uint64_t flags) {
    if (m->iov_count > 1 || m->rma_iov_count != 1 || (flags & FI_REMOTE_CQ_DATA))
        return -FI_EINVAL;
    int inject = kind == K_WRITE && (flags & FI_INJECT) && !(flags & FI_COMPLETION);
    return do_rma(e, kind, m->iov_count ? m->msg_iov[0].iov_base : NULL, m->iov_count ? m->msg_iov[0].iov_len : 0,
                  m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->context, inject, NULL, NULL, 0);
}

static ssize_t rma_read(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr,
                        uint64_t key, void *ctx) {
    (void)desc;
    return do_rma(e, K_READ, buf, len, src, addr, key, ctx, 0, NULL, NULL, 0);
}
static ssize_t rma_readv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
                         uint64_t addr, uint64_t key, void *ctx) {
    (void)desc;
    return do_rmav(e, K_READ, iov, count, src, addr, key, ctx);
}
static ssize_t rma_readmsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t flags) {
    return do_rmamsg(e, K_READ, m, flags);
}
static ssize_t rma_write(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr,
                         uint64_t key, void *ctx) {
    (void)desc;
    return do_rma(e, K_WRITE, buf, len, dest, addr, key, ctx, 0, NULL, NULL, 0);
}
static ssize_t rma_writev(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
                          uint64_t addr, uint64_t key, void *ctx) {
    (void)desc;
    return do_rmav(e, K_WRITE, iov, count, dest, addr, key, ctx);
}
static ssize_t rma_writemsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t flags) {
    return do_rmamsg(e, K_WRITE, m, flags);
}
static ssize_t rma_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
                          uint64_t key) {
    return do_rma(e, K_WRITE, buf, len, dest, addr, key, NULL, 1, NULL, NULL, 0);
}

/* 64-bit integers; FI_SUM and FI_ATOMIC_WRITE, fetching FI_SUM and FI_ATOMIC_READ,
 * FI_CSWAP: what a deposit fetch-and-add, compare-and-swap or 8-byte write does. */
static int atomic_ok(enum fi_datatype dt, enum fi_op op, int kind) {
    if (dt != FI_UINT64 && dt != FI_INT64)
        return 0;
    switch (kind) {
    case K_ATOMIC: return op == FI_SUM || op == FI_ATOMIC_WRITE;
    case K_FETCH: return op == FI_SUM || op == FI_ATOMIC_READ;
    default: return op == FI_CSWAP;
    }
}

static ssize_t do_atomic(struct fid_ep *e, int kind, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx, int inject, void *result,
                         const void *compare) {
    if (!atomic_ok(dt, op, kind))
        return -FI_EOPNOTSUPP;
    if (addr % 8)
        return -FI_EINVAL;
    return do_rma(e, kind, buf, count * 8, dest, addr, key, ctx, inject, result, compare, op);
}

static ssize_t at_write(struct fid_ep *e, const void *buf, size_t count, void *desc, fi_addr_t dest,
                        uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
    (void)desc;
    return do_atomic(e, K_ATOMIC, buf, count, dest, addr, key, dt, op, ctx, 0, NULL, NULL);
}
static ssize_t at_writev(struct fid_ep *e, const struct fi_ioc *iov, void **desc, size_t count, fi_addr_t dest,
                         uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
    (void)desc;
    if (count != 1)
        return -FI_EINVAL;
    return do_atomic(e, K_ATOMIC, iov[0].addr, iov[0].count, dest, addr, key, dt, op, ctx, 0, NULL, NULL);
}
static ssize_t at_writemsg(struct fid_ep *e, const struct fi_msg_atomic *m, uint64_t flags) {
    if (m->iov_count != 1 || m->rma_iov_count != 1)
        return -FI_EINVAL;
    return do_atomic(e, K_ATOMIC, m->msg_iov[0].addr, m->msg_iov[0].count, m->addr, m->rma_iov[0].addr,
                     m->rma_iov[0].key, m->datatype, m->op, m->context,
                     !!(flags & FI_INJECT) && !(flags & FI_COMPLETION), NULL, NULL);
}
static ssize_t at_inject(struct fid_ep *e, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, enum fi_datatype dt, enum fi_op op) {
    return do_atomic(e, K_ATOMIC, buf, count, dest, addr, key, dt, op, NULL, 1, NULL, NULL);
}
static ssize_t at_readwrite(struct fid_ep *e, const void *buf, size_t count, void *desc, void *result,
                            void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                            enum fi_op op, void *ctx) {
    (void)desc, (void)result_desc;
    return do_atomic(e, K_FETCH, buf, count, dest, addr, key, dt, op, ctx, 0, result, NULL);
}
static ssize_t at_readwritev(struct fid_ep *e, const struct fi_ioc *iov, void **desc, size_t count,
                             struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
                             uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
    (void)desc, (void)result_desc;
    if (count != 1 || result_count != 1)
        return -FI_EINVAL;
    return do_atomic(e, K_FETCH, iov[0].addr, resultv[0].count, dest, addr, key, dt, op, ctx, 0, resultv[0].addr,
                     NULL);
}
static ssize_t at_readwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m, struct fi_ioc *resultv,
                               void **result_desc, size_t result_count, uint64_t flags) {
    (void)result_desc, (void)flags;
    if (m->rma_iov_count != 1 || result_count != 1)
        return -FI_EINVAL;
    return do_atomic(e, K_FETCH, m->iov_count ? m->msg_iov[0].addr : NULL, resultv[0].count, m->addr,
                     m->rma_iov[0].addr, m->rma_iov[0].key, m->datatype, m->op, m->context, 0, resultv[0].addr, NULL);
}
static ssize_t at_compwrite(struct fid_ep *e, const void *buf, size_t count, void *desc, const void *compare,
                            void *compare_desc, void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
                            uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
    (void)desc, (void)compare_desc, (void)result_desc;
    return do_atomic(e, K_CSWAP, buf, count, dest, addr, key, dt, op, ctx, 0, result, compare);
}
static ssize_t at_compwritev(struct fid_ep *e, const struct fi_ioc *iov, void **desc, size_t count,
                             const struct fi_ioc *comparev, void **compare_desc, size_t compare_count,
                             struct fi_ioc *resultv, void **result_desc, size_t result_count, fi_addr_t dest,
                             uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
    (void)desc, (void)compare_desc, (void)result_desc;
    if (count != 1 || compare_count != 1 || result_count != 1 || comparev[0].count != iov[0].count)
        return -FI_EINVAL;
    return do_atomic(e, K_CSWAP, iov[0].addr, iov[0].count, dest, addr, key, dt, op, ctx, 0, resultv[0].addr,
                     comparev[0].addr);
}
static ssize_t at_compwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m, const struct fi_ioc *comparev,
                               void **compare_desc, size_t compare_count, struct fi_ioc *resultv,
                               void **result_desc, size_t result_count, uint64_t flags) {
    (void)compare_desc, (void)result_desc, (void)flags;
    if (m->iov_count != 1 || m->rma_iov_count != 1 || compare_count != 1 || result_count != 1)
        return -FI_EINVAL;
    return do_atomic(e, K_CSWAP, m->msg_iov[0].addr, m->msg_iov[0].count, m->addr, m->rma_iov[0].addr,
                     m->rma_iov[0].key, m->datatype, m->op, m->context, 0, resultv[0].addr, comparev[0].addr);
}
static int valid(enum fi_datatype dt, enum fi_op op, size_t *count, int kind) {
    if (!atomic_ok(dt, op, kind))
        return -FI_EOPNOTSUPP;
    *count = SLOT / 8;
    return 0;
}
static int at_writevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *count) {
    (void)e;
    return valid(dt, op, count, K_ATOMIC);
}
static int at_readwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *count) {
    (void)e;
    return valid(dt, op, count, K_FETCH);
}
static int at_compwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op, size_t *count) {
    (void)e;
    return valid(dt, op, count, K_CSWAP);
}

static struct fi_ops_rma rma_ops = {
    .size = sizeof(struct fi_ops_rma), .read = rma_read, .readv = rma_readv, .readmsg = rma_readmsg,
    .write = rma_write, .writev = rma_writev, .writemsg = rma_writemsg, .inject = rma_inject,
    .writedata = (void *)nosys_ssize, .injectdata = (void *)nosys_ssize,
};
static struct fi_ops_atomic atomic_ops = {
    .size = sizeof(struct fi_ops_atomic), .write = at_write, .writev = at_writev, .writemsg = at_writemsg,
    .inject = at_inject, .readwrite = at_readwrite, .readwritev = at_readwritev,
    .readwritemsg = at_readwritemsg, .compwrite = at_compwrite, .compwritev = at_compwritev,
    .compwritemsg = at_compwritemsg, .writevalid = at_writevalid, .readwritevalid = at_readwritevalid,
    .compwritevalid = at_compwritevalid,
};

/* ---- endpoint object ------------------------------------------------------------- */

static int ep_close(struct fid *f) {
    struct ep *ep = (struct ep *)f;
    if (ep->enabled) {
        /* Let the last acknowledgements and credits go out (bounded). */
        for (int i = 0; i < 100000 && (ep->txq || ep->stage_free < STAGE_SLOTS); i++)
            progress(ep);
        for (int i = 0; i < ep->npeers; i++)
            if (ep->peers[i].out)
                dd_conn_close(ep->peers[i].out);
        for (int i = 0; i < ep->naccepted; i++)
            dd_conn_close(ep->accepted[i]);
        for (int i = 0; i < ep->nrmr; i++)
            dd_conn_close(ep->rmrs[i].conn);
        free(ep->rmrs);
        dd_listener_close(ep->listener);
        dd_instr_window_release(ep->code);
        dd_cq_destroy(ep->dcq);
        dd_endpoint_free(ep->dep);
    }
    for (int c = 0; c < 2; c++) {
        struct cq *cq = c ? ep->rxcq : ep->txcq;
        if (!cq || (c && cq == ep->txcq))
            continue;
        for (int i = 0; i < cq->neps; i++)
            if (cq->eps[i] == ep)
                cq->eps[i] = cq->eps[--cq->neps];
    }
    fi_freeinfo(ep->info);
    free(ep);
    return 0;
}

static int cq_add_ep(struct cq *cq, struct ep *ep) {
    for (int i = 0; i < cq->neps; i++)
        if (cq->eps[i] == ep)
            return 0;
    if (cq->neps == 8)
        return -FI_ENOSPC;
    cq->eps[cq->neps++] = ep;
    return 0;
}

static int ep_bind(struct fid *f, struct fid *b, uint64_t flags) {
    struct ep *ep = (struct ep *)f;
    switch (b->fclass) {
    case FI_CLASS_CQ:
        if (flags & FI_TRANSMIT)
            ep->txcq = (struct cq *)b;
        if (flags & FI_RECV)
            ep->rxcq = (struct cq *)b;
        return cq_add_ep((struct cq *)b, ep);
    case FI_CLASS_AV:
        ep->av = (struct av *)b;
        return 0;
    case FI_CLASS_EQ:
        return 0;
    default:
        return -FI_ENOSYS;
    }
}

static int ep_enable(struct ep *ep) {
    if (ep->enabled)
        return 0;
    uint64_t len = (uint64_t)(RING_SLOTS + STAGE_SLOTS) * SLOT;
    struct dd_regwin regs;
    struct dd_instr ins = {0};
    uint32_t pd[2];
    /* A slot is one message: at most what one message carries on this port, a power of
     * two so that the ring wraps by its mask. */
    uint32_t max = dd_device_segment_max(device);
    ep->slot = SLOT;
    while (ep->slot > max && ep->slot > 1024)
        ep->slot /= 2;
    if (ep->slot > max) {
        fprintf(stderr, "deposit-fi: one message carries %u bytes on this port; too few\n", max);
        return -FI_EINVAL;
    }
    if (dd_endpoint_alloc(device, len, DD_REMOTE_WRITE, &ep->dep) < 0 || dd_cq_create(device, 4096, &ep->dcq) < 0 ||
        dd_alloc_registers(ep->dep, 3, &regs) < 0 || dd_write_register(device, regs, 0, 0) < 0 ||
        dd_write_register(device, regs, 1, ep->slot) < 0 ||
        dd_write_register(device, regs, 2, (uint64_t)RING_SLOTS * ep->slot - 1) < 0)
        goto fail;
    ins.opcode = DD_OP_WRITE;
    ins.addr.mode = DD_ADDR_POST_INCREMENT;
    ins.addr.ra = 0;
    ins.addr.op1 = (struct dd_regop){.op = 6 /* AND */, .dst = 0, .src_is_reg = true, .src_reg = 2};
    if (dd_alloc_instructions(device, ep->dep, 1, &ep->code) < 0 ||
        dd_program(device, ep->code, 0, &ins, 1, &pd[0]) < 0)
        goto fail;
    pd[1] = ep->slot;
    struct dd_conn_options o = {0};
    o.registers = regs;
    o.instructions = ep->code;
    o.isolated = true;
    o.private_data = pd;
    o.private_data_len = sizeof pd;
    o.authorized_keys_path = getenv("DEPOSIT_FI_AUTHORIZED_KEYS");
    ep->service = BASE_SERVICE + (uint32_t)next_service++;
    const char *s = getenv("DEPOSIT_FI_SERVICE");
    if (s)
        ep->service = (uint32_t)atoi(s) + (uint32_t)next_service - 1;
    if (dd_listen(device, ep->service, ep->dep, ep->dcq, &o, &ep->listener) < 0)
        goto fail;
    ep->stage_free = STAGE_SLOTS;
    ep->enabled = 1;
    return 0;
fail:
    fprintf(stderr, "deposit-fi: endpoint: %s\n", dd_last_error());
    return -FI_ENOMEM;
}

static int ep_control(struct fid *f, int command, void *arg) {
    (void)arg;
    if (command == FI_ENABLE)
        return ep_enable((struct ep *)f);
    return -FI_ENOSYS;
}

static int ep_getname(fid_t f, void *addr, size_t *len) {
    struct ep *ep = (struct ep *)f;
    size_t have = *len;
    *len = sizeof(struct addr);
    if (have < sizeof(struct addr))
        return -FI_ETOOSMALL;
    if (!ep->enabled) {
        int rc = ep_enable(ep);
        if (rc)
            return rc;
    }
    struct addr a;
    memcpy(a.ip, device_ip, 4);
    a.service = ep->service;
    memcpy(addr, &a, sizeof a);
    return 0;
}

static ssize_t ep_cancel(fid_t f, void *ctx) {
    struct ep *ep = (struct ep *)f;
    for (int t = 0; t < 2; t++)
        for (struct rx **pp = t ? &ep->tag_rx : &ep->msg_rx; *pp; pp = &(*pp)->next)
            if ((*pp)->ctx == ctx) {
                struct rx *r = *pp;
                *pp = r->next;
                cq_push_err(ep->rxcq, ctx, (t ? FI_TAGGED : FI_MSG) | FI_RECV, FI_ECANCELED, 0, 0, r->tag, 0);
                free(r);
                return 0;
            }
    return -FI_ENOENT;
}

static int ep_getopt(fid_t f, int level, int name, void *val, size_t *len) {
    (void)f;
    if (level == FI_OPT_ENDPOINT && name == FI_OPT_MIN_MULTI_RECV && *len >= sizeof(size_t)) {
        *(size_t *)val = 0;
        return 0;
    }
    return -FI_ENOPROTOOPT;
}
static int ep_setopt(fid_t f, int level, int name, const void *val, size_t len) {
    (void)f, (void)level, (void)name, (void)val, (void)len;
    return -FI_ENOPROTOOPT;
}

static struct fi_ops ep_fi_ops = {
    .size = sizeof(struct fi_ops), .close = ep_close, .bind = ep_bind, .control = ep_control,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep), .cancel = ep_cancel, .getopt = ep_getopt, .setopt = ep_setopt,
    .tx_ctx = (void *)nosys_int, .rx_ctx = (void *)nosys_int,
    .rx_size_left = (void *)nosys_ssize, .tx_size_left = (void *)nosys_ssize,
};
static struct fi_ops_cm cm_ops = {
    .size = sizeof(struct fi_ops_cm), .setname = (void *)nosys_int, .getname = ep_getname,
    .getpeer = (void *)nosys_int, .connect = (void *)nosys_int, .listen = (void *)nosys_int,
    .accept = (void *)nosys_int, .reject = (void *)nosys_int, .shutdown = (void *)nosys_int,
    .join = (void *)nosys_int,
};

/* ---- completion queue object ------------------------------------------------------- */

static void cq_progress(struct cq *cq) {
    for (int i = 0; i < cq->neps; i++)
        progress(cq->eps[i]);
}

static ssize_t cq_readfrom(struct fid_cq *f, void *buf, size_t count, fi_addr_t *src) {
    struct cq *cq = (struct cq *)f;
    /* A read that finds the queue empty drives progress, but not the one right after a
     * read that emptied it: a consumer draining until -FI_EAGAIN (Open MPI's ofi MTL)
     * would take a second device turn before it could act on what it read, and that
     * turn would send the acknowledgement owed for a message just consumed in a frame
     * of its own instead of on the reply about to be posted. */
    if (cq->head == cq->tail && !cq->drained)
        cq_progress(cq);
    if (cq->err_head != cq->err_tail)
        return -FI_EAVAIL;
    size_t n = 0;
    for (; n < count && cq->head != cq->tail; n++, cq->head++) {
        struct fi_cq_tagged_entry *e = &cq->ring[cq->head % CQ_DEPTH];
        if (src)
            src[n] = cq->src[cq->head % CQ_DEPTH];
        switch (cq->format) {
        case FI_CQ_FORMAT_CONTEXT:
            ((struct fi_cq_entry *)buf)[n].op_context = e->op_context;
            break;
        case FI_CQ_FORMAT_MSG: {
            struct fi_cq_msg_entry *m = &((struct fi_cq_msg_entry *)buf)[n];
            m->op_context = e->op_context, m->flags = e->flags, m->len = e->len;
            break;
        }
        case FI_CQ_FORMAT_DATA: {
            struct fi_cq_data_entry *d = &((struct fi_cq_data_entry *)buf)[n];
            d->op_context = e->op_context, d->flags = e->flags, d->len = e->len, d->buf = e->buf, d->data = e->data;
            break;
        }
        default:
            ((struct fi_cq_tagged_entry *)buf)[n] = *e;
        }
    }
    cq->drained = n > 0 && cq->head == cq->tail;
    return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t cq_read(struct fid_cq *f, void *buf, size_t count) { return cq_readfrom(f, buf, count, NULL); }

static ssize_t cq_readerr(struct fid_cq *f, struct fi_cq_err_entry *buf, uint64_t flags) {
    (void)flags;
    struct cq *cq = (struct cq *)f;
    if (cq->err_head == cq->err_tail)
        return -FI_EAGAIN;
    *buf = cq->err[cq->err_head++ % CQ_ERR_DEPTH];
    return 1;
}

/* Blocking read: spins driving progress for a while, then sleeps 50 us between
 * looks, until an entry comes or `timeout` ms pass (-1: forever). */
static ssize_t cq_sreadfrom(struct fid_cq *f, void *buf, size_t count, fi_addr_t *src, const void *cond,
                            int timeout) {
    (void)cond;
    struct timespec t0, now, nap = {0, 50000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long spins = 0;; spins++) {
        ssize_t n = cq_readfrom(f, buf, count, src);
        if (n != -FI_EAGAIN)
            return n;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (timeout >= 0 && ms >= timeout)
            return -FI_EAGAIN;
        if (spins > 1000)
            nanosleep(&nap, NULL);
    }
}

static ssize_t cq_sread(struct fid_cq *f, void *buf, size_t count, const void *cond, int timeout) {
    return cq_sreadfrom(f, buf, count, NULL, cond, timeout);
}

static const char *cq_strerror(struct fid_cq *f, int prov_errno, const void *err_data, char *buf, size_t len) {
    (void)f, (void)err_data;
    const char *s = fi_strerror(prov_errno);
    if (buf && len) {
        snprintf(buf, len, "%s", s);
        return buf;
    }
    return s;
}

static int cq_close(struct fid *f) {
    struct cq *cq = (struct cq *)f;
    free(cq->ring);
    free(cq->src);
    free(cq);
    return 0;
}

static struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops), .close = cq_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq), .read = cq_read, .readfrom = cq_readfrom, .readerr = cq_readerr,
    .sread = cq_sread, .sreadfrom = cq_sreadfrom, .signal = (void *)nosys_int, .strerror = cq_strerror,
};

/* ---- address vector ------------------------------------------------------------------- */

static int av_insert(struct fid_av *f, const void *addr, size_t count, fi_addr_t *out, uint64_t flags, void *ctx) {
    (void)flags, (void)ctx;
    struct av *av = (struct av *)f;
    const struct addr *a = addr;
    for (size_t i = 0; i < count; i++) {
        if (av->n == av->cap) {
            size_t cap = av->cap ? 2 * av->cap : 64;
            struct addr *t = realloc(av->table, cap * sizeof *t);
            if (!t)
                return (int)i;
            av->table = t, av->cap = cap;
        }
        av->table[av->n] = a[i];
        if (out)
            out[i] = av->n;
        av->n++;
    }
    return (int)count;
}

static int av_remove(struct fid_av *f, fi_addr_t *a, size_t count, uint64_t flags) {
    (void)f, (void)a, (void)count, (void)flags;
    return 0; /* entries stay valid until the AV closes */
}

static int av_lookup(struct fid_av *f, fi_addr_t a, void *addr, size_t *len) {
    struct av *av = (struct av *)f;
    if (a >= av->n)
        return -FI_EINVAL;
    size_t have = *len;
    *len = sizeof(struct addr);
    memcpy(addr, &av->table[a], have < sizeof(struct addr) ? have : sizeof(struct addr));
    return 0;
}

static const char *av_straddr(struct fid_av *f, const void *addr, char *buf, size_t *len) {
    (void)f;
    const struct addr *a = addr;
    char s[40];
    int n = snprintf(s, sizeof s, "deposit://%u.%u.%u.%u:%u", a->ip[0], a->ip[1], a->ip[2], a->ip[3], a->service);
    if (buf && *len)
        snprintf(buf, *len, "%s", s);
    *len = (size_t)n + 1;
    return buf;
}

static int av_close(struct fid *f) {
    struct av *av = (struct av *)f;
    free(av->table);
    free(av);
    return 0;
}

static struct fi_ops av_fi_ops = {
    .size = sizeof(struct fi_ops), .close = av_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av), .insert = av_insert, .insertsvc = (void *)nosys_int,
    .insertsym = (void *)nosys_int, .remove = av_remove, .lookup = av_lookup, .straddr = av_straddr,
    .av_set = (void *)nosys_int,
};

/* ---- domain --------------------------------------------------------------------------- */

struct domain {
    struct fid_domain fid;
};

static int dom_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx) {
    (void)d;
    if (attr && attr->flags & FI_EVENT)
        return -FI_ENOSYS;
    struct av *av = calloc(1, sizeof *av);
    if (!av)
        return -FI_ENOMEM;
    av->fid.fid.fclass = FI_CLASS_AV, av->fid.fid.context = ctx, av->fid.fid.ops = &av_fi_ops;
    av->fid.ops = &av_ops;
    *out = &av->fid;
    return 0;
}

static int dom_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx) {
    (void)d;
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
        return -FI_ENOSYS;
    struct cq *cq = calloc(1, sizeof *cq);
    if (!cq)
        return -FI_ENOMEM;
    cq->ring = calloc(CQ_DEPTH, sizeof *cq->ring);
    cq->src = calloc(CQ_DEPTH, sizeof *cq->src);
    if (!cq->ring || !cq->src) {
        cq_close(&cq->fid.fid);
        return -FI_ENOMEM;
    }
    cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
    cq->fid.fid.fclass = FI_CLASS_CQ, cq->fid.fid.context = ctx, cq->fid.fid.ops = &cq_fi_ops;
    cq->fid.ops = &cq_ops;
    *out = &cq->fid;
    return 0;
}

static int dom_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx) {
    (void)d;
    if (info->ep_attr && info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_UNSPEC)
        return -FI_ENOSYS;
    struct ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return -FI_ENOMEM;
    ep->info = fi_dupinfo(info);
    ep->fid.fid.fclass = FI_CLASS_EP, ep->fid.fid.context = ctx, ep->fid.fid.ops = &ep_fi_ops;
    ep->fid.ops = &ep_ops, ep->fid.cm = &cm_ops, ep->fid.msg = &msg_ops, ep->fid.tagged = &tag_ops;
    ep->fid.rma = &rma_ops, ep->fid.atomic = &atomic_ops;
    *out = &ep->fid;
    return 0;
}

static int dom_close(struct fid *f) {
    free(f);
    device_put();
    return 0;
}

static struct fi_ops dom_fi_ops = {
    .size = sizeof(struct fi_ops), .close = dom_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static int dom_query_atomic(struct fid_domain *d, enum fi_datatype dt, enum fi_op op, struct fi_atomic_attr *attr,
                            uint64_t flags) {
    (void)d;
    int kind = (flags & FI_COMPARE_ATOMIC) ? K_CSWAP : (flags & FI_FETCH_ATOMIC) ? K_FETCH : K_ATOMIC;
    attr->size = 8;
    return valid(dt, op, &attr->count, kind);
}

static struct fi_ops_domain dom_ops = {
    .size = sizeof(struct fi_ops_domain), .av_open = dom_av_open, .cq_open = dom_cq_open,
    .endpoint = dom_endpoint, .scalable_ep = (void *)nosys_int, .cntr_open = (void *)nosys_int,
    .poll_open = (void *)nosys_int, .stx_ctx = (void *)nosys_int, .srx_ctx = (void *)nosys_int,
    .query_atomic = dom_query_atomic, .query_collective = (void *)nosys_int,
};
static struct fi_ops_mr mr_ops = {
    .size = sizeof(struct fi_ops_mr), .reg = mr_reg, .regv = mr_regv, .regattr = mr_regattr,
};
static struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops), .close = mr_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};


static int fab_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **out, void *ctx) {
    (void)fab;
    virt_addr = info && info->domain_attr && (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
    int rc = device_get();
    if (rc)
        return rc;
    struct domain *d = calloc(1, sizeof *d);
    if (!d) {
        device_put();
        return -FI_ENOMEM;
    }
    d->fid.fid.fclass = FI_CLASS_DOMAIN, d->fid.fid.context = ctx, d->fid.fid.ops = &dom_fi_ops;
    d->fid.ops = &dom_ops, d->fid.mr = &mr_ops;
    *out = &d->fid;
    return 0;
}

/* ---- event queue: an RDM endpoint reports no connection events; applications that
 * open one anyway (fi_pingpong) get an empty queue. ------------------------------------ */

static ssize_t eq_read(struct fid_eq *eq, uint32_t *ev, void *buf, size_t len, uint64_t flags) {
    (void)eq, (void)ev, (void)buf, (void)len, (void)flags;
    return -FI_EAGAIN;
}
static ssize_t eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags) {
    (void)eq, (void)buf, (void)flags;
    return -FI_EAGAIN;
}
static ssize_t eq_sread(struct fid_eq *eq, uint32_t *ev, void *buf, size_t len, int timeout, uint64_t flags) {
    (void)eq, (void)ev, (void)buf, (void)len, (void)flags;
    if (timeout > 0) {
        struct timespec t = {timeout / 1000, (long)(timeout % 1000) * 1000000};
        nanosleep(&t, NULL);
    }
    return -FI_EAGAIN;
}
static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops), .close = fab_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq), .read = eq_read, .readerr = eq_readerr, .write = (void *)nosys_ssize,
    .sread = eq_sread, .strerror = (void *)cq_strerror,
};

static int fab_eq_open(struct fid_fabric *fab, struct fi_eq_attr *attr, struct fid_eq **out, void *ctx) {
    (void)fab, (void)attr;
    struct fid_eq *eq = calloc(1, sizeof *eq);
    if (!eq)
        return -FI_ENOMEM;
    eq->fid.fclass = FI_CLASS_EQ, eq->fid.context = ctx, eq->fid.ops = &eq_fi_ops;
    eq->ops = &eq_ops;
    *out = eq;
    return 0;
}

/* ---- fabric and provider ---------------------------------------------------------------- */


static struct fi_ops fab_fi_ops = {
    .size = sizeof(struct fi_ops), .close = fab_close, .bind = (void *)nosys_int, .control = (void *)nosys_int,
    .ops_open = (void *)nosys_int, .tostr = (void *)nosys_int, .ops_set = (void *)nosys_int,
};
static struct fi_ops_fabric fab_ops = {
    .size = sizeof(struct fi_ops_fabric), .domain = fab_domain, .passive_ep = (void *)nosys_int,
    .eq_open = fab_eq_open, .wait_open = (void *)nosys_int, .trywait = (void *)nosys_int,
};

static int prov_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *ctx) {
    (void)attr;
    struct fid_fabric *f = calloc(1, sizeof *f);
    if (!f)
        return -FI_ENOMEM;
    f->fid.fclass = FI_CLASS_FABRIC, f->fid.context = ctx, f->fid.ops = &fab_fi_ops;
    f->ops = &fab_ops, f->api_version = API_VERSION;
    *out = f;
    return 0;
}

#define CAPS                                                                                 \
    (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV | FI_REMOTE_CQ_DATA |     \
     FI_LOCAL_COMM | FI_REMOTE_COMM | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ |   \
     FI_REMOTE_WRITE)
#define ONE_SIDED (FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)

static int prov_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                        const struct fi_info *hints, struct fi_info **info) {
    (void)version, (void)node, (void)service, (void)flags;
    if (hints) {
        if (hints->caps & ~CAPS)
            return -FI_ENODATA;
        if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
            return -FI_ENODATA;
        if (hints->fabric_attr && hints->fabric_attr->prov_name &&
            !strstr(hints->fabric_attr->prov_name, PROV_NAME))
            return -FI_ENODATA;
        if (hints->domain_attr && hints->domain_attr->mr_mode & FI_MR_BASIC)
            return -FI_ENODATA;
    }
    /* One-sided operations need the application to take our keys (FI_MR_PROV_KEY);
     * addresses are virtual addresses where it asks for that, offsets otherwise. */
    uint64_t app_mr = hints && hints->domain_attr ? (uint64_t)hints->domain_attr->mr_mode : ~0ull;
    uint64_t caps = hints && hints->caps ? hints->caps : CAPS;
    if ((caps & ONE_SIDED) && !(app_mr & FI_MR_PROV_KEY)) {
        if (hints && hints->caps)
            return -FI_ENODATA;
        caps &= ~(uint64_t)ONE_SIDED;
    }
    struct fi_info *fi = fi_allocinfo();
    if (!fi)
        return -FI_ENOMEM;
    fi->caps = caps;
    fi->mode = 0;
    fi->addr_format = FI_FORMAT_UNSPEC;
    fi->src_addrlen = 0;
    fi->tx_attr->caps = fi->caps, fi->tx_attr->msg_order = FI_ORDER_SAS, fi->tx_attr->comp_order = FI_ORDER_NONE;
    fi->tx_attr->inject_size = FRAG, fi->tx_attr->size = 4096, fi->tx_attr->iov_limit = 1;
    fi->tx_attr->op_flags = FI_TRANSMIT_COMPLETE;
    fi->rx_attr->caps = fi->caps, fi->rx_attr->msg_order = FI_ORDER_SAS, fi->rx_attr->comp_order = FI_ORDER_NONE;
    fi->rx_attr->size = 4096, fi->rx_attr->iov_limit = 1;
    fi->ep_attr->type = FI_EP_RDM, fi->ep_attr->protocol = FI_PROTO_UNSPEC;
    fi->ep_attr->max_msg_size = MAX_MSG, fi->ep_attr->tx_ctx_cnt = 1, fi->ep_attr->rx_ctx_cnt = 1;
    fi->ep_attr->mem_tag_format = 0xAAAAAAAAAAAAAAAAull; /* FI_TAG_GENERIC */
    fi->domain_attr->name = strdup(PROV_NAME);
    fi->domain_attr->threading = FI_THREAD_DOMAIN;
    fi->domain_attr->control_progress = FI_PROGRESS_MANUAL;
    fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    fi->domain_attr->resource_mgmt = FI_RM_ENABLED;
    fi->domain_attr->av_type = FI_AV_UNSPEC;
    fi->domain_attr->mr_mode = (caps & ONE_SIDED) ? (int)(FI_MR_PROV_KEY | (app_mr & FI_MR_VIRT_ADDR)) : 0;
    fi->domain_attr->mr_key_size = 8;
    fi->domain_attr->cq_data_size = 8;
    fi->domain_attr->cq_cnt = 64, fi->domain_attr->ep_cnt = 8, fi->domain_attr->tx_ctx_cnt = 8;
    fi->domain_attr->rx_ctx_cnt = 8, fi->domain_attr->max_ep_tx_ctx = 1, fi->domain_attr->max_ep_rx_ctx = 1;
    fi->domain_attr->mr_iov_limit = 1;
    fi->fabric_attr->name = strdup(PROV_NAME);
    fi->fabric_attr->prov_version = PROV_VERSION;
    fi->fabric_attr->api_version = API_VERSION;
    if (hints && hints->caps & FI_REMOTE_CQ_DATA)
        fi->caps |= FI_REMOTE_CQ_DATA;
    *info = fi;
    return 0;
}

static void prov_cleanup(void) {}

static struct fi_provider provider = {
    .version = PROV_VERSION,
    .fi_version = API_VERSION,
    .name = PROV_NAME,
    .getinfo = prov_getinfo,
    .fabric = prov_fabric,
    .cleanup = prov_cleanup,
};

FI_EXT_INI { return &provider; }
