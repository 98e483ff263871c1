/* Completion queues and counters, and their wait object (docs/design.md §12).
 *
 * A CQ holds what completed until it is read, in two arrays that grow (nothing is ever
 * dropped): successes with their source (FI_SOURCE), and error entries (fi_cq_readerr
 * while a read answers -FI_EAVAIL). Reading an empty queue drives progress — but not
 * the read right after one that emptied it: a consumer draining until -FI_EAGAIN
 * (Open MPI's MTL) would take a second device turn before acting on what it read, and
 * that turn would send the acknowledgement owed for a message just received in a frame
 * of its own instead of on the reply about to be posted. A counter counts completions,
 * injected ones too, and errors; reading it drives progress.
 *
 * FI_WAIT_FD is the device's wait fd (fi_control FI_GETWAIT), with its protocol
 * (deposit.h, dd_device_fd): drain, arm, sleep. fi_trywait drives progress and arms
 * it (-FI_EAGAIN: something is ready, read instead of sleeping); fi_cq_sread and
 * fi_cntr_wait spin a little, then do the same and sleep in poll(2) on it.
 */
#include "dfi.h"
#include <poll.h>
#include <time.h>

#define SPINS 200

/* Room for one more element in [head, tail) of `*arr` (moved down or grown). */
static void *room(void *arr, size_t *head, size_t *tail, size_t *cap, size_t sz) {
    char **a = arr;
    if (*tail == *cap && *head) {
        memmove(*a, *a + *head * sz, (*tail - *head) * sz);
        *tail -= *head, *head = 0;
    }
    if (*tail == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        char *n = realloc(*a, c * sz);
        if (!n)
            return NULL;
        *a = n, *cap = c;
    }
    return *a + (*tail)++ * sz;
}

void dfi_complete(struct dfi_cq *cq, struct dfi_cntr *cn, void *ctx, uint64_t flags, size_t len, void *buf,
                  uint64_t data, uint64_t tag, fi_addr_t src) {
    dfi_events++;
    if (cn)
        cn->value++;
    struct dfi_entry *e = cq ? room(&cq->e, &cq->head, &cq->tail, &cq->cap, sizeof *e) : NULL;
    if (e)
        *e = (struct dfi_entry){{ctx, flags, len, buf, data, tag}, src};
    else if (cq)
        fprintf(stderr, "deposit-fi: out of memory for a completion\n");
}

/* An error completion; for a receive, the message's tag and CQ data (Open MPI's MTL
 * takes a truncated message's source from them). */
void dfi_fail(struct dfi_cq *cq, struct dfi_cntr *cn, void *ctx, uint64_t flags, int err, size_t len,
              size_t olen, uint64_t tag, uint64_t data) {
    dfi_events++;
    if (cn)
        cn->err++;
    struct fi_cq_err_entry *e = cq ? room(&cq->x, &cq->xhead, &cq->xtail, &cq->xcap, sizeof *e) : NULL;
    if (e) {
        memset(e, 0, sizeof *e);
        e->op_context = ctx, e->flags = flags, e->len = len, e->olen = olen, e->err = err, e->tag = tag;
        e->data = data, e->prov_errno = err;
    }
}

/* ---- waiting on the device's fd ---------------------------------------------------- */

/* Drain and arm: 1 when something completed meanwhile (do not sleep), else 0. */
static int arm(void) {
    LOCK; /* the guard thread must not take an event between the drain and the arm */
    uint64_t before = dfi_events;
    dfi_progress();
    return dfi_events != before || dd_device_arm_fd(dfi_dev) != 0;
}

/* Sleeps on the fd for at most `left` ms (-1: no limit) and 100 ms. */
static void nap(int left) {
    struct pollfd p = {dd_device_fd(dfi_dev), POLLIN, 0};
    poll(&p, 1, left >= 0 && left < 100 ? left : 100);
}

/* Milliseconds left of `timeout` (-1: forever) since `t0`. */
static int left_of(const struct timespec *t0, int timeout) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
    return timeout < 0 ? -1 : ms >= timeout ? 0 : (int)(timeout - ms);
}

int dfi_trywait(struct fid_fabric *fab, struct fid **fids, int count) {
    (void)fab;
    LOCK;
    for (int i = 0; i < count; i++) {
        struct dfi_cq *cq = (struct dfi_cq *)fids[i];
        if (fids[i]->fclass == FI_CLASS_CQ && (cq->head != cq->tail || cq->xhead != cq->xtail))
            return -FI_EAGAIN;
    }
    return arm() ? -FI_EAGAIN : 0;
}

/* fi_control: FI_GETWAIT (the fd) and FI_GETWAITOBJ (FI_WAIT_FD). */
static int wait_control(struct fid *f, int command, void *arg) {
    (void)f;
    if (command == FI_GETWAIT)
        return (*(int *)arg = dd_device_fd(dfi_dev)) < 0 ? -FI_ENODATA : 0;
    if (command == FI_GETWAITOBJ)
        return *(enum fi_wait_obj *)arg = FI_WAIT_FD, 0;
    return -FI_ENOSYS;
}

static int wait_obj_ok(enum fi_wait_obj w) { return w == FI_WAIT_NONE || w == FI_WAIT_UNSPEC || w == FI_WAIT_FD; }

/* ---- completion queue ---------------------------------------------------------------- */

static ssize_t cq_readfrom(struct fid_cq *f, void *buf, size_t count, fi_addr_t *src) {
    LOCK;
    struct dfi_cq *cq = (struct dfi_cq *)f;
    if (cq->head == cq->tail && !cq->drained)
        dfi_progress();
    if (cq->xhead != cq->xtail)
        return -FI_EAVAIL;
    size_t n = 0;
    for (; n < count && cq->head != cq->tail; n++, cq->head++) { /* each format is a prefix of the tagged one */
        memcpy((char *)buf + n * cq->size, &cq->e[cq->head].e, cq->size);
        if (src)
            src[n] = cq->e[cq->head].src;
    }
    if (cq->head == cq->tail)
        cq->head = cq->tail = 0;
    cq->drained = n > 0 && cq->head == cq->tail;
    return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t cq_read(struct fid_cq *f, void *buf, size_t count) { return cq_readfrom(f, buf, count, NULL); }

static ssize_t cq_readerr(struct fid_cq *f, struct fi_cq_err_entry *buf, uint64_t flags) {
    (void)flags;
    LOCK;
    struct dfi_cq *cq = (struct dfi_cq *)f;
    if (cq->xhead == cq->xtail)
        return -FI_EAGAIN;
    *buf = cq->x[cq->xhead++];
    return 1;
}

static ssize_t cq_sreadfrom(struct fid_cq *f, void *buf, size_t count, fi_addr_t *src, const void *cond,
                            int timeout) {
    (void)cond;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int spins = 0;; spins++) {
        ssize_t n = cq_readfrom(f, buf, count, src);
        int left = left_of(&t0, timeout);
        if (n != -FI_EAGAIN || left == 0)
            return n;
        if (spins >= SPINS && !arm())
            nap(left);
    }
}

static ssize_t cq_sread(struct fid_cq *f, void *buf, size_t count, const void *cond, int timeout) {
    return cq_sreadfrom(f, buf, count, NULL, cond, timeout);
}

const char *dfi_strerror(struct fid_cq *f, int prov_errno, const void *err_data, char *buf, size_t len) {
    (void)f, (void)err_data;
    const char *s = fi_strerror(prov_errno);
    if (buf && len)
        snprintf(buf, len, "%s", s);
    return buf && len ? buf : s;
}

static int cq_close(struct fid *f) {
    struct dfi_cq *cq = (struct dfi_cq *)f;
    free(cq->e), free(cq->x), free(cq);
    return 0;
}

static struct fi_ops cq_fi_ops = FI_OPS(cq_close, dfi_nosys, wait_control);
static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq), .read = cq_read, .readfrom = cq_readfrom, .readerr = cq_readerr,
    .sread = cq_sread, .sreadfrom = cq_sreadfrom, .signal = (void *)dfi_nosys, .strerror = dfi_strerror,
};

int dfi_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx) {
    (void)d;
    if (!wait_obj_ok(attr->wait_obj) || attr->format > FI_CQ_FORMAT_TAGGED)
        return -FI_ENOSYS;
    struct dfi_cq *cq = calloc(1, sizeof *cq);
    if (!cq)
        return -FI_ENOMEM;
    static const size_t size[] = {
        [FI_CQ_FORMAT_UNSPEC] = sizeof(struct fi_cq_entry), [FI_CQ_FORMAT_CONTEXT] = sizeof(struct fi_cq_entry),
        [FI_CQ_FORMAT_MSG] = sizeof(struct fi_cq_msg_entry), [FI_CQ_FORMAT_DATA] = sizeof(struct fi_cq_data_entry),
        [FI_CQ_FORMAT_TAGGED] = sizeof(struct fi_cq_tagged_entry)};
    cq->size = size[attr->format];
    cq->fid.fid.fclass = FI_CLASS_CQ, cq->fid.fid.context = ctx, cq->fid.fid.ops = &cq_fi_ops;
    cq->fid.ops = &cq_ops;
    *out = &cq->fid;
    return 0;
}

/* ---- counters ------------------------------------------------------------------------ */

/* On the count or the error count: 0 reads it after a turn of progress, 1 adds `v`,
 * 2 sets it to `v`, 3 reads it as it is. */
static uint64_t cntr_op(struct fid_cntr *f, int err, int op, uint64_t v) {
    LOCK;
    struct dfi_cntr *c = (struct dfi_cntr *)f;
    uint64_t *x = err ? &c->err : &c->value;
    if (op == 0)
        dfi_progress();
    return *x = op == 1 ? *x + v : op == 2 ? v : *x;
}
static uint64_t cntr_read(struct fid_cntr *f) { return cntr_op(f, 0, 0, 0); }
static uint64_t cntr_readerr(struct fid_cntr *f) { return cntr_op(f, 1, 0, 0); }
static int cntr_add(struct fid_cntr *f, uint64_t v) { return cntr_op(f, 0, 1, v), 0; }
static int cntr_set(struct fid_cntr *f, uint64_t v) { return cntr_op(f, 0, 2, v), 0; }
static int cntr_adderr(struct fid_cntr *f, uint64_t v) { return cntr_op(f, 1, 1, v), 0; }
static int cntr_seterr(struct fid_cntr *f, uint64_t v) { return cntr_op(f, 1, 2, v), 0; }

/* Until the count reaches `threshold` (0), an error is counted (-FI_EAVAIL) or
 * `timeout` ms pass (-FI_ETIMEDOUT; -1: no limit). */
static int cntr_wait(struct fid_cntr *f, uint64_t threshold, int timeout) {
    uint64_t err = cntr_op(f, 1, 3, 0);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int spins = 0;; spins++) {
        if (cntr_read(f) >= threshold)
            return 0;
        if (cntr_op(f, 1, 3, 0) != err)
            return -FI_EAVAIL;
        int left = left_of(&t0, timeout);
        if (left == 0)
            return -FI_ETIMEDOUT;
        if (spins >= SPINS && !arm())
            nap(left);
    }
}

static struct fi_ops cntr_fi_ops = FI_OPS(dfi_close_free, dfi_nosys, wait_control);
static struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr), .read = cntr_read, .readerr = cntr_readerr, .add = cntr_add,
    .set = cntr_set, .wait = cntr_wait, .adderr = cntr_adderr, .seterr = cntr_seterr,
};

int dfi_cntr_open(struct fid_domain *d, struct fi_cntr_attr *attr, struct fid_cntr **out, void *ctx) {
    (void)d;
    if (attr && (!wait_obj_ok(attr->wait_obj) || attr->events != FI_CNTR_EVENTS_COMP))
        return -FI_ENOSYS;
    struct dfi_cntr *c = calloc(1, sizeof *c);
    if (!c)
        return -FI_ENOMEM;
    c->fid.fid.fclass = FI_CLASS_CNTR, c->fid.fid.context = ctx, c->fid.fid.ops = &cntr_fi_ops;
    c->fid.ops = &cntr_ops;
    *out = &c->fid;
    return 0;
}
