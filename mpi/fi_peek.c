/* fi_peek: the deposit provider's probes checked at the libfabric level — what MPI does
 * not reach or does not show: FI_DISCARD (no MPI call discards), a peek's buffer, and
 * the completion entries themselves (flags, length, tag, CQ data, source, error codes).
 * Two ranks; MPI (over kernel TCP or shared memory) only starts them, carries the
 * endpoint names and says when each step may go; the ranks open the deposit provider
 * themselves through libfabric (FI_PROVIDER_PATH, DEPOSIT_FI_DEV: scripts/mpi.sh
 * --fi-peek sets them). Rank 1 sends, rank 0 peeks and receives:
 *
 *  1. Nothing sent: FI_PEEK completes with an FI_ENOMSG error entry; FI_CLAIM with a
 *     context nothing was claimed with is refused (-FI_EINVAL).
 *  2. A small message: FI_PEEK reports FI_TAGGED | FI_RECV, its length, tag, CQ data and
 *     source, no buffer; with a buffer (half the message) the buffer, the first half of
 *     the data and still the whole length; the message stays: another tag, or another
 *     source (directed), finds nothing; a receive gets it whole.
 *  3. FI_PEEK | FI_CLAIM of A, then B with the same tag: a peek sees B, a receive posted
 *     after the claim gets B, FI_CLAIM with the claim's context gets A.
 *  4. FI_PEEK | FI_DISCARD of D (its description in the completion), then E with the
 *     same tag: the next receive gets E; nothing left.
 *  5. FI_PEEK | FI_CLAIM, then FI_CLAIM | FI_DISCARD: a completion of 0 bytes with the
 *     message's tag; nothing left; the context claims nothing any more.
 *  6. 1 MiB messages (rendezvous: the peek finds the first of them announced, its bytes
 *     still at the sender): FI_PEEK | FI_CLAIM reports the whole length, FI_CLAIM
 *     delivers every byte; FI_PEEK | FI_DISCARD of the second one (the sender's send
 *     completes all the same), then a small third one with the same tag: received
 *     intact.
 *  7. A receive too small, posted and claimed: FI_ETRUNC with len, olen, tag and data.
 *  8. fi_cancel of a posted receive: FI_ECANCELED; again: -FI_ENOENT; a message with
 *     its tag then goes to the next receive.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (1 << 20)

static int rank, step;
static struct fid_ep *ep;
static struct fid_cq *cq;
static fi_addr_t addr[2];
static uint8_t *sbuf[4], *rbuf[4];

static void fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fi_peek: rank %d: CHECK FAILED in step %d: %s\n", rank, step, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond))                                                                     \
            fail(__VA_ARGS__);                                                           \
    } while (0)

#define CALL(expr)                                                                       \
    do {                                                                                 \
        int rc_ = (int)(expr);                                                           \
        if (rc_)                                                                         \
            fail("%s: %s", #expr, fi_strerror(-rc_));                                    \
    } while (0)

static uint8_t pattern(size_t i, int k) { return (uint8_t)(i * 131 + k * 7 + 1); }

static void fill(uint8_t *b, size_t n, int k) {
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, k);
}

static void check_data(const uint8_t *b, size_t n, int k, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, k))
            fail("%s: message %d, byte %zu of %zu is %u, not %u", what, k, i, n, b[i], pattern(i, k));
}

/* A completion or error entry, by context. Completions that come for another context
 * wait here until asked for. */
struct done {
    void *ctx;
    int err; /* 0, or the error entry's err */
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry x;
    fi_addr_t src;
};
static struct done stash[32];
static int nstash;

static struct done wait_for(void *ctx) {
    double t0 = MPI_Wtime();
    for (;;) {
        for (int i = 0; i < nstash; i++)
            if (stash[i].ctx == ctx) {
                struct done d = stash[i];
                stash[i] = stash[--nstash];
                return d;
            }
        struct done d = {0};
        ssize_t n = fi_cq_readfrom(cq, &d.e, 1, &d.src);
        if (n == -FI_EAVAIL) {
            CHECK(fi_cq_readerr(cq, &d.x, 0) == 1, "fi_cq_readerr found no error entry after -FI_EAVAIL");
            d.err = d.x.err;
            d.ctx = d.x.op_context;
            n = 1;
        } else if (n == 1) {
            d.ctx = d.e.op_context;
        }
        CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_readfrom: %s", fi_strerror((int)-n));
        if (n == 1) {
            CHECK(nstash < 32, "too many completions for nobody");
            stash[nstash++] = d;
        }
        CHECK(MPI_Wtime() - t0 < 30, "no completion for context %p within 30 s", ctx);
    }
}

/* fi_trecvmsg of one buffer (or none) with flags. */
static ssize_t trecvmsg(void *buf, size_t len, fi_addr_t from, uint64_t tag, uint64_t ignore, void *ctx,
                        uint64_t flags) {
    struct iovec iov = {buf, len};
    struct fi_msg_tagged m = {0};
    m.msg_iov = buf ? &iov : NULL, m.iov_count = buf ? 1 : 0;
    m.addr = from, m.tag = tag, m.ignore = ignore, m.context = ctx;
    return fi_trecvmsg(ep, &m, flags);
}

/* A peek: its completion (success or error). */
static struct done peek(void *buf, size_t len, fi_addr_t from, uint64_t tag, uint64_t ignore, uint64_t flags) {
    static struct fi_context c;
    CALL(trecvmsg(buf, len, from, tag, ignore, &c, FI_PEEK | flags));
    return wait_for(&c);
}

/* Peeks until a message is found (it may still be on its way). */
static struct done peek_found(void *buf, size_t len, uint64_t tag, uint64_t flags, struct fi_context *ctx) {
    double t0 = MPI_Wtime();
    for (;;) {
        CALL(trecvmsg(buf, len, addr[1], tag, 0, ctx, FI_PEEK | flags));
        struct done d = wait_for(ctx);
        if (!d.err)
            return d;
        CHECK(d.err == FI_ENOMSG, "a peek failed with %s, not FI_ENOMSG", fi_strerror(d.err));
        CHECK(MPI_Wtime() - t0 < 30, "no message with tag %#llx within 30 s", (unsigned long long)tag);
    }
}

static void expect_nothing(uint64_t tag, uint64_t ignore, fi_addr_t from, const char *what) {
    struct done d = peek(NULL, 0, from, tag, ignore, 0);
    CHECK(d.err == FI_ENOMSG, "%s: a peek found a message (len %zu, tag %#llx) or failed otherwise (%d)", what,
          d.e.len, (unsigned long long)d.e.tag, d.err);
    CHECK(d.x.flags & FI_RECV, "%s: FI_ENOMSG entry without FI_RECV", what);
}

/* The description of message k: what a completion must say. */
static void expect_msg(const struct done *d, size_t len, uint64_t tag, uint64_t data, const char *what) {
    CHECK(!d->err, "%s: error entry %s", what, fi_strerror(d->err));
    CHECK((d->e.flags & (FI_TAGGED | FI_RECV)) == (FI_TAGGED | FI_RECV), "%s: flags %#llx", what,
          (unsigned long long)d->e.flags);
    CHECK(d->e.len == len, "%s: len %zu, not %zu", what, d->e.len, len);
    CHECK(d->e.tag == tag, "%s: tag %#llx, not %#llx", what, (unsigned long long)d->e.tag, (unsigned long long)tag);
    CHECK(d->e.data == data, "%s: data %#llx, not %#llx", what, (unsigned long long)d->e.data,
          (unsigned long long)data);
    CHECK(d->src == addr[1], "%s: source %llu, not %llu", what, (unsigned long long)d->src,
          (unsigned long long)addr[1]);
}

/* Rank 1: sends, then drives its queue until every send is acknowledged. */
static void send_all(int n, const size_t *len, const uint64_t *tag, const int *k) {
    struct fi_context c[8];
    for (int i = 0; i < n; i++) {
        fill(sbuf[i], len[i], k[i]);
        CALL(fi_tsenddata(ep, sbuf[i], len[i], NULL, 0xD0 + (uint64_t)k[i], addr[0], tag[i], &c[i]));
    }
    for (int i = 0; i < n; i++) {
        struct done d = wait_for(&c[i]);
        CHECK(!d.err, "send %d completed with %s", i, fi_strerror(d.err));
    }
}

static void next_step(int s) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && step)
        printf("fi_peek: step %d: OK\n", step);
    fflush(stdout);
    step = s;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (rank == 0)
            fprintf(stderr, "fi_peek: run it on 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->caps = FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("deposit");
    CALL(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    CHECK(info->caps & FI_DIRECTED_RECV, "no FI_DIRECTED_RECV");
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    CALL(fi_fabric(info->fabric_attr, &fabric, NULL));
    CALL(fi_domain(fabric, info, &domain, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    CALL(fi_cq_open(domain, &ca, &cq, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    CALL(fi_av_open(domain, &aa, &av, NULL));
    CALL(fi_endpoint(domain, info, &ep, NULL));
    CALL(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CALL(fi_ep_bind(ep, &av->fid, 0));
    CALL(fi_enable(ep));
    char name[64], names[128];
    size_t len = sizeof name;
    CALL(fi_getname(&ep->fid, name, &len)); /* the provider's address size, the same for both */
    MPI_Allgather(name, (int)len, MPI_CHAR, names, (int)len, MPI_CHAR, MPI_COMM_WORLD);
    CHECK(fi_av_insert(av, names, 2, addr, 0, NULL) == 2, "fi_av_insert");
    for (int i = 0; i < 4; i++) {
        sbuf[i] = malloc(BIG);
        rbuf[i] = malloc(BIG);
        CHECK(sbuf[i] && rbuf[i], "out of memory");
    }
    if (rank == 0)
        printf("# fi_peek: 2 ranks, provider %s\n", info->fabric_attr->prov_name);
    struct fi_context c1, c2, c3;
    struct done d;

    next_step(1); /* nothing sent */
    if (rank == 0) {
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "any message");
        expect_nothing(1, 0, addr[1], "tag 1");
        CHECK(trecvmsg(rbuf[0], 100, addr[1], 0, 0, &c1, FI_CLAIM) == -FI_EINVAL,
              "FI_CLAIM with a context that claimed nothing was not refused with -FI_EINVAL");
    }

    next_step(2); /* a small message, peeked with and without a buffer */
    if (rank == 1) {
        send_all(1, (size_t[]){100}, (uint64_t[]){0x10}, (int[]){1});
    } else {
        d = peek_found(NULL, 0, 0x10, 0, &c1);
        expect_msg(&d, 100, 0x10, 0xD1, "FI_PEEK without a buffer");
        CHECK(d.e.buf == NULL, "FI_PEEK without a buffer: buf %p", d.e.buf);
        memset(rbuf[0], 0xEE, 100);
        d = peek(rbuf[0], 50, addr[1], 0x10, 0, 0);
        expect_msg(&d, 100, 0x10, 0xD1, "FI_PEEK with a buffer of 50 bytes");
        CHECK(d.e.buf == rbuf[0], "FI_PEEK with a buffer: buf %p, not %p", d.e.buf, (void *)rbuf[0]);
        check_data(rbuf[0], 50, 1, "FI_PEEK's buffer");
        CHECK(rbuf[0][50] == 0xEE, "FI_PEEK wrote past its buffer");
        expect_nothing(0x11, 0, addr[1], "another tag");
        expect_nothing(0x10, 0, addr[0], "another source");
        d = peek(NULL, 0, FI_ADDR_UNSPEC, 0x13, 0x3, 0);
        expect_msg(&d, 100, 0x10, 0xD1, "FI_PEEK with an ignore mask, any source");
        CALL(fi_trecv(ep, rbuf[1], BIG, NULL, addr[1], 0x10, 0, &c2));
        d = wait_for(&c2);
        expect_msg(&d, 100, 0x10, 0xD1, "the receive after peeks");
        check_data(rbuf[1], 100, 1, "the receive after peeks");
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after the receive");
    }

    next_step(3); /* claim A; B to a receive posted after; A to the claim */
    if (rank == 1) {
        send_all(2, (size_t[]){1000, 2000}, (uint64_t[]){0x20, 0x20}, (int[]){2, 3});
    } else {
        d = peek_found(NULL, 0, 0x20, FI_CLAIM, &c1);
        expect_msg(&d, 1000, 0x20, 0xD2, "FI_PEEK | FI_CLAIM of A");
        d = peek_found(NULL, 0, 0x20, 0, &c3);
        expect_msg(&d, 2000, 0x20, 0xD3, "FI_PEEK after A was claimed: B");
        CALL(fi_trecv(ep, rbuf[1], BIG, NULL, addr[1], 0x20, 0, &c2));
        d = wait_for(&c2);
        expect_msg(&d, 2000, 0x20, 0xD3, "a receive posted after the claim: B");
        check_data(rbuf[1], 2000, 3, "a receive posted after the claim");
        memset(rbuf[0], 0xEE, 1001);
        CALL(trecvmsg(rbuf[0], 4096, 0, 0, 0, &c1, FI_CLAIM));
        d = wait_for(&c1);
        expect_msg(&d, 1000, 0x20, 0xD2, "FI_CLAIM: A");
        CHECK(d.e.buf == rbuf[0], "FI_CLAIM: buf %p", d.e.buf);
        check_data(rbuf[0], 1000, 2, "FI_CLAIM");
        CHECK(rbuf[0][1000] == 0xEE, "FI_CLAIM wrote past the message");
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after the claim");
        CHECK(trecvmsg(rbuf[0], 100, 0, 0, 0, &c1, FI_CLAIM) == -FI_EINVAL, "a second FI_CLAIM was not refused");
    }

    next_step(4); /* discard D by peek; E to the next receive */
    if (rank == 1) {
        send_all(2, (size_t[]){5000, 10}, (uint64_t[]){0x30, 0x30}, (int[]){4, 5});
    } else {
        d = peek_found(rbuf[0], BIG, 0x30, FI_DISCARD, &c1);
        expect_msg(&d, 5000, 0x30, 0xD4, "FI_PEEK | FI_DISCARD of D");
        CALL(fi_trecv(ep, rbuf[1], BIG, NULL, addr[1], 0x30, 0, &c2));
        d = wait_for(&c2);
        expect_msg(&d, 10, 0x30, 0xD5, "the receive after a discard: E");
        check_data(rbuf[1], 10, 5, "the receive after a discard");
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after the discard");
    }

    next_step(5); /* claim, then discard the claimed message */
    if (rank == 1) {
        send_all(1, (size_t[]){300}, (uint64_t[]){0x40}, (int[]){6});
    } else {
        d = peek_found(NULL, 0, 0x40, FI_CLAIM, &c1);
        expect_msg(&d, 300, 0x40, 0xD6, "FI_PEEK | FI_CLAIM of F");
        CALL(trecvmsg(rbuf[0], BIG, 0, 0, 0, &c1, FI_CLAIM | FI_DISCARD));
        d = wait_for(&c1);
        expect_msg(&d, 0, 0x40, 0xD6, "FI_CLAIM | FI_DISCARD");
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after FI_CLAIM | FI_DISCARD");
        CHECK(trecvmsg(rbuf[0], 100, 0, 0, 0, &c1, FI_CLAIM) == -FI_EINVAL,
              "FI_CLAIM after the discard was not refused");
    }

    next_step(6); /* 1 MiB messages still arriving: claimed, discarded */
    if (rank == 1) {
        send_all(3, (size_t[]){BIG, BIG, 64}, (uint64_t[]){0x50, 0x50, 0x50}, (int[]){7, 8, 9});
    } else {
        d = peek_found(NULL, 0, 0x50, FI_CLAIM, &c1);
        expect_msg(&d, BIG, 0x50, 0xD7, "FI_PEEK | FI_CLAIM of a 1 MiB message");
        memset(rbuf[0], 0, BIG);
        CALL(trecvmsg(rbuf[0], BIG, 0, 0, 0, &c1, FI_CLAIM));
        d = peek_found(NULL, 0, 0x50, FI_DISCARD, &c3);
        expect_msg(&d, BIG, 0x50, 0xD8, "FI_PEEK | FI_DISCARD of the second 1 MiB message");
        d = wait_for(&c1);
        expect_msg(&d, BIG, 0x50, 0xD7, "FI_CLAIM of a 1 MiB message");
        check_data(rbuf[0], BIG, 7, "FI_CLAIM of a 1 MiB message");
        CALL(fi_trecv(ep, rbuf[1], BIG, NULL, addr[1], 0x50, 0, &c2));
        d = wait_for(&c2);
        expect_msg(&d, 64, 0x50, 0xD9, "the receive after a discarded 1 MiB message");
        check_data(rbuf[1], 64, 9, "the receive after a discarded 1 MiB message");
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after the 1 MiB messages");
    }

    next_step(7); /* truncation: posted, and claimed */
    if (rank == 1) {
        send_all(2, (size_t[]){3000, 9000}, (uint64_t[]){0x60, 0x61}, (int[]){10, 11});
    } else {
        CALL(fi_trecv(ep, rbuf[0], 100, NULL, addr[1], 0x60, 0, &c2));
        d = wait_for(&c2);
        CHECK(d.err == FI_ETRUNC, "a receive of 100 bytes of 3000: %s, not FI_ETRUNC", fi_strerror(d.err));
        CHECK(d.x.len == 100 && d.x.olen == 2900, "FI_ETRUNC: len %zu olen %zu, not 100 and 2900", d.x.len, d.x.olen);
        CHECK(d.x.tag == 0x60 && d.x.data == 0xDA, "FI_ETRUNC: tag %#llx data %#llx, not 0x60 and 0xda",
              (unsigned long long)d.x.tag, (unsigned long long)d.x.data);
        check_data(rbuf[0], 100, 10, "a truncated receive");
        d = peek_found(NULL, 0, 0x61, FI_CLAIM, &c1);
        expect_msg(&d, 9000, 0x61, 0xDB, "FI_PEEK | FI_CLAIM before a truncated claim");
        CALL(trecvmsg(rbuf[0], 8999, 0, 0, 0, &c1, FI_CLAIM));
        d = wait_for(&c1);
        CHECK(d.err == FI_ETRUNC && d.x.len == 8999 && d.x.olen == 1 && d.x.tag == 0x61 && d.x.data == 0xDB,
              "a claim of 8999 bytes of 9000: err %d len %zu olen %zu tag %#llx data %#llx", d.err, d.x.len, d.x.olen,
              (unsigned long long)d.x.tag, (unsigned long long)d.x.data);
        expect_nothing(0, ~0ull, FI_ADDR_UNSPEC, "after the truncations");
    }

    next_step(8); /* fi_cancel */
    if (rank == 0) {
        CALL(fi_trecv(ep, rbuf[0], 100, NULL, addr[1], 0x70, 0, &c2));
        CALL(fi_cancel(&ep->fid, &c2));
        d = wait_for(&c2);
        CHECK(d.err == FI_ECANCELED, "a cancelled receive: %s, not FI_ECANCELED", fi_strerror(d.err));
        CHECK((d.x.flags & (FI_TAGGED | FI_RECV)) == (FI_TAGGED | FI_RECV), "FI_ECANCELED: flags %#llx",
              (unsigned long long)d.x.flags);
        CHECK(fi_cancel(&ep->fid, &c2) == -FI_ENOENT, "a second fi_cancel did not answer -FI_ENOENT");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        send_all(1, (size_t[]){33}, (uint64_t[]){0x70}, (int[]){12});
    } else {
        CALL(fi_trecv(ep, rbuf[1], BIG, NULL, addr[1], 0x70, 0, &c3));
        d = wait_for(&c3);
        expect_msg(&d, 33, 0x70, 0xDC, "the receive after a cancelled one");
        check_data(rbuf[1], 33, 12, "the receive after a cancelled one");
    }

    next_step(0);
    CHECK(nstash == 0, "%d completions nobody asked for", nstash);
    if (rank == 0)
        printf("fi_peek: all checks passed\n");
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    for (int i = 0; i < 4; i++)
        free(sbuf[i]), free(rbuf[i]);
    MPI_Finalize();
    return 0;
}
