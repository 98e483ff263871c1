/* Wait objects, counters and iovecs through libfabric, checked: a libfabric program
 * that knows nothing of deposit but its provider name. It forks into a waiter and a
 * sender joined by memif (DEPOSIT_FI_DEV); they exchange endpoint names and say when
 * each step may go over a socketpair. The waiter's CQ and counters are FI_WAIT_FD:
 *
 *  1. fi_cq_sread with nothing to come returns -FI_EAGAIN after its timeout.
 *  2. fi_cq_sread blocks until a message the sender sends 300 ms later arrives, asleep
 *     in the device's wait fd meanwhile (its CPU time is checked: well under the
 *     wait), and returns its completion (context, length, tag, CQ data, bytes).
 *  3. The FI_GETWAIT fd in the waiter's own epoll: fi_trywait, epoll_wait until the
 *     fd is readable, fi_cq_read; the message the sender sends 200 ms later comes so.
 *  4. Counters: a receive counter (FI_RECV) counted every receive; fi_cntr_wait for
 *     three injected messages; fi_cntr_wait's timeout (-FI_ETIMEDOUT); add, set,
 *     adderr, seterr, readerr; the sender's FI_SEND counter counted its injects too.
 *  5. Several iovecs: fi_sendv of 3 pieces (10000 bytes, rendezvous) into fi_recvv of
 *     3 others and fi_tsendmsg of 2 (eager) into fi_trecv, every byte checked; more
 *     iovecs than iov_limit refused (-FI_EINVAL).
 *
 * Usage: wait_check MEMIF_SOCKET
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_NAME "wait_check"
#include "check.h"

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_cntr *cntr;
static fi_addr_t peer;
static int fd; /* the socketpair */
static struct fi_info *info;

static uint8_t pattern(size_t i, int k) { return (uint8_t)(i * 131 + k * 7 + 1); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void xfer(void *p, size_t n, int out) {
    for (size_t k = 0; k < n;) {
        ssize_t r = out ? write(fd, (char *)p + k, n - k) : read(fd, (char *)p + k, n - k);
        if (r <= 0) {
            fprintf(stderr, "wait_check %s: the other side went away\n", role);
            exit(1);
        }
        k += (size_t)r;
    }
}
static void say(char c) { xfer(&c, 1, 1); }
static char hear(void) {
    char c;
    xfer(&c, 1, 0);
    return c;
}

static void open_all(const char *sock, int server) {
    check_device(sock, server);
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("deposit");
    CALL(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    CHECK(info->tx_attr->iov_limit >= 3 && info->rx_attr->iov_limit >= 3, "iov_limit %zu / %zu",
          info->tx_attr->iov_limit, info->rx_attr->iov_limit);
    CALL(fi_fabric(info->fabric_attr, &fabric, NULL));
    CALL(fi_domain(fabric, info, &domain, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
    CALL(fi_cq_open(domain, &ca, &cq, NULL));
    struct fi_cntr_attr ta = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD};
    CALL(fi_cntr_open(domain, &ta, &cntr, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    CALL(fi_av_open(domain, &aa, &av, NULL));
    CALL(fi_endpoint(domain, info, &ep, NULL));
    CALL(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CALL(fi_ep_bind(ep, &cntr->fid, server ? FI_RECV : FI_SEND));
    CALL(fi_ep_bind(ep, &av->fid, 0));
    CALL(fi_enable(ep));
    char mine[64], theirs[64];
    size_t len = sizeof mine, tlen;
    CALL(fi_getname(&ep->fid, mine, &len));
    xfer(&len, sizeof len, 1);
    xfer(mine, len, 1);
    xfer(&tlen, sizeof tlen, 0);
    xfer(theirs, tlen, 0);
    CHECK(fi_av_insert(av, theirs, 1, &peer, 0, NULL) == 1, "fi_av_insert");
    /* A name is 20 bytes (an IPv6 or IPv4-mapped address, the service), and the AV
     * spells it by its family. */
    CHECK(len == 20 && tlen == 20, "names of %zu and %zu bytes, not 20", len, tlen);
    char s[128];
    size_t slen = sizeof s;
    const char *want = check_peer_straddr(server);
    fi_av_straddr(av, theirs, s, &slen);
    CHECK(!strncmp(s, want, strlen(want)), "fi_av_straddr gives %s, not %s...", s, want);
    fi_freeinfo(hints);
}

/* A completion for `ctx` (fi_cq_sread, 10 s at most); others wait until asked for. */
static struct fi_cq_tagged_entry stash[8];
static int nstash;

static struct fi_cq_tagged_entry wait_for(void *ctx) {
    struct fi_cq_tagged_entry e = {0};
    double t0 = now();
    for (int i = 0; i < nstash; i++)
        if (stash[i].op_context == ctx)
            return e = stash[i], stash[i] = stash[--nstash], e;
    for (;;) {
        ssize_t n = fi_cq_sread(cq, &e, 1, NULL, 1000);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry x = {0};
            fi_cq_readerr(cq, &x, 0);
            CHECK(0, "an error completion: %s", fi_strerror(x.err));
            return e;
        }
        if (n == 1 && e.op_context == ctx)
            return e;
        if (n == 1 && nstash < 8)
            stash[nstash++] = e;
        CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_sread: %s", fi_strerror((int)-n));
        if (now() - t0 > 10) {
            CHECK(0, "no completion in 10 s");
            exit(1);
        }
    }
}

static void sender(void) {
    static uint8_t buf[3][10000];
    struct fi_context c[4];
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof buf[k]; i++)
            buf[k][i] = pattern(i, k);
    /* 2: in 300 ms; 3: in 200 ms. */
    for (int step = 2; step <= 3; step++) {
        hear();
        usleep(step == 2 ? 300000 : 200000);
        CALL(fi_tsenddata(ep, buf[0], 1000, NULL, 0xD0 + (uint64_t)step, peer, (uint64_t)step, &c[0]));
        wait_for(&c[0]);
    }
    /* 4: three injects, counted by the FI_SEND counter too. */
    hear();
    for (int i = 0; i < 3; i++)
        CALL(fi_tinject(ep, buf[1], 64, peer, 4));
    CHECK(fi_cntr_wait(cntr, 5, 5000) == 0, "the sender's counter: %llu, not 5",
          (unsigned long long)fi_cntr_read(cntr));
    /* 5: gathered sends. */
    hear();
    struct iovec iov[5] = {{buf[0], 100}, {buf[1] + 100, 5000}, {buf[2] + 5100, 4900}, {buf[0], 1}, {buf[0], 1}};
    CHECK(fi_sendv(ep, iov, NULL, 5, peer, &c[1]) == -FI_EINVAL, "5 iovecs were not refused");
    CALL(fi_sendv(ep, iov, NULL, 3, peer, &c[1]));
    struct iovec two[2] = {{buf[2], 10}, {buf[0] + 10, 90}};
    struct fi_msg_tagged m = {.msg_iov = two, .iov_count = 2, .addr = peer, .tag = 5, .context = &c[2]};
    CALL(fi_tsendmsg(ep, &m, FI_COMPLETION));
    wait_for(&c[1]);
    wait_for(&c[2]);
    hear();
    say('7'); /* our sends completed: the waiter may close */
}

static void waiter(void) {
    static uint8_t got[3][10000];
    struct fi_context c[4];
    struct fi_cq_tagged_entry e;
    /* 1. Nothing comes. */
    double t0 = now();
    ssize_t n = fi_cq_sread(cq, &e, 1, NULL, 50);
    double dt = now() - t0;
    CHECK(n == -FI_EAGAIN && dt >= 0.045 && dt < 1, "fi_cq_sread with nothing to come: %zd after %.3f s", n, dt);
    printf("wait_check: fi_cq_sread timed out after %.1f ms with nothing to read: OK\n", dt * 1e3);

    /* 2. Blocked in fi_cq_sread until the message comes. */
    CALL(fi_trecv(ep, got[0], sizeof got[0], NULL, peer, 2, 0, &c[0]));
    say('2');
    double c0 = cpu();
    t0 = now();
    n = fi_cq_sread(cq, &e, 1, NULL, 10000);
    dt = now() - t0;
    double used = cpu() - c0;
    CHECK(n == 1, "fi_cq_sread: %s", fi_strerror((int)-n));
    CHECK(e.op_context == &c[0] && e.len == 1000 && e.tag == 2 && e.data == 0xD2 &&
              (e.flags & (FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA)) == (FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA),
          "the completion: ctx %p len %zu tag %#llx data %#llx flags %#llx", e.op_context, e.len,
          (unsigned long long)e.tag, (unsigned long long)e.data, (unsigned long long)e.flags);
    for (size_t i = 0; i < 1000; i++)
        if (got[0][i] != pattern(i, 0)) {
            CHECK(0, "byte %zu", i);
            break;
        }
    CHECK(dt > 0.2, "fi_cq_sread returned after %.3f s, before the message was sent", dt);
    CHECK(used < 0.5 * dt, "fi_cq_sread used %.0f ms of CPU in %.0f ms (it should sleep)", used * 1e3, dt * 1e3);
    printf("wait_check: fi_cq_sread (FI_WAIT_FD) slept %.0f ms (%.0f ms of CPU, all threads) and got the "
           "message: OK\n", dt * 1e3, used * 1e3);

    /* 3. The fd in epoll. */
    int wfd = -1, ready = 0, slept = 0;
    CALL(fi_control(&cq->fid, FI_GETWAIT, &wfd));
    int cfd = -1;
    CALL(fi_control(&cntr->fid, FI_GETWAIT, &cfd));
    CHECK(wfd >= 0 && cfd == wfd, "FI_GETWAIT: %d and %d", wfd, cfd);
    int epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = wfd};
    CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, wfd, &ev) == 0, "epoll_ctl");
    CALL(fi_trecv(ep, got[1], sizeof got[1], NULL, peer, 3, 0, &c[1]));
    say('3');
    t0 = now();
    struct fid *fids[1] = {&cq->fid};
    for (n = 0; n != 1 && now() - t0 < 10;) {
        int rc = fi_trywait(fabric, fids, 1);
        if (rc == 0) {
            slept++;
            ready += epoll_wait(epfd, &ev, 1, 5000) == 1;
        } else {
            CHECK(rc == -FI_EAGAIN, "fi_trywait: %s", fi_strerror(-rc));
        }
        n = fi_cq_read(cq, &e, 1);
    }
    dt = now() - t0;
    CHECK(n == 1 && e.op_context == &c[1] && e.len == 1000 && e.tag == 3, "epoll: %zd, ctx %p len %zu", n,
          e.op_context, e.len);
    CHECK(slept >= 1 && ready >= 1 && dt > 0.15, "epoll: slept %d times, woken %d, after %.3f s", slept, ready, dt);
    printf("wait_check: FI_GETWAIT fd in epoll: fi_trywait 0, woken after %.0f ms, fi_cq_read got it: OK\n",
           dt * 1e3);
    close(epfd);

    /* 4. Counters. */
    CHECK(fi_cntr_read(cntr) == 2, "the receive counter: %llu, not 2", (unsigned long long)fi_cntr_read(cntr));
    for (int i = 0; i < 3; i++)
        CALL(fi_trecv(ep, got[2] + 64 * i, 64, NULL, peer, 4, 0, &c[2]));
    say('4');
    CHECK(fi_cntr_wait(cntr, 5, 5000) == 0, "fi_cntr_wait: %llu", (unsigned long long)fi_cntr_read(cntr));
    for (int i = 0; i < 3; i++) {
        n = fi_cq_sread(cq, &e, 1, NULL, 1000);
        CHECK(n == 1 && e.op_context == &c[2] && e.len == 64, "an injected message's receive");
    }
    CHECK(fi_cntr_wait(cntr, 6, 30) == -FI_ETIMEDOUT, "fi_cntr_wait for what never comes did not time out");
    CALL(fi_cntr_add(cntr, 10));
    CHECK(fi_cntr_read(cntr) == 15, "fi_cntr_add");
    CALL(fi_cntr_set(cntr, 3));
    CALL(fi_cntr_adderr(cntr, 2));
    CALL(fi_cntr_adderr(cntr, 2));
    CHECK(fi_cntr_read(cntr) == 3 && fi_cntr_readerr(cntr) == 4, "fi_cntr_set, fi_cntr_adderr");
    CALL(fi_cntr_seterr(cntr, 0));
    CHECK(fi_cntr_readerr(cntr) == 0, "fi_cntr_seterr");
    printf("wait_check: counters (receives, injects, wait, timeout, add, set, errors): OK\n");

    /* 5. iovecs. */
    memset(got, 0xEE, sizeof got);
    struct iovec iov[3] = {{got[0], 3000}, {got[1], 3000}, {got[2], 4000}};
    CALL(fi_recvv(ep, iov, NULL, 3, peer, &c[3]));
    say('5');
    e = wait_for(&c[3]);
    CHECK(e.len == 10000, "fi_recvv: %zu bytes", e.len);
    static const int from[3] = {0, 1, 2};
    for (size_t i = 0; i < 10000; i++) {
        int k = i < 100 ? from[0] : i < 5100 ? from[1] : from[2];
        uint8_t want = pattern(i, k), have = i < 3000 ? got[0][i] : i < 6000 ? got[1][i - 3000] : got[2][i - 6000];
        if (have != want) {
            CHECK(0, "gathered and scattered: byte %zu is %u, not %u", i, have, want);
            break;
        }
    }
    CHECK(got[2][4000] == 0xEE, "fi_recvv wrote past its last iovec");
    CALL(fi_trecv(ep, got[0], 100, NULL, peer, 5, 0, &c[0]));
    e = wait_for(&c[0]);
    CHECK(e.len == 100, "fi_tsendmsg of 2 iovecs: %zu bytes", e.len);
    for (size_t i = 0; i < 100; i++)
        if (got[0][i] != (i < 10 ? pattern(i, 2) : pattern(i, 0))) {
            CHECK(0, "fi_tsendmsg of 2 iovecs: byte %zu", i);
            break;
        }
    say('6');
    hear();
    printf("wait_check: fi_sendv/fi_recvv of 3 iovecs (10000 bytes), fi_tsendmsg of 2, every byte: OK\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: wait_check MEMIF_SOCKET\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        perror("socketpair");
        return 1;
    }
    pid_t pid = fork();
    int server = pid != 0;
    role = server ? "waiter" : "sender";
    fd = sv[server ? 0 : 1];
    close(sv[server ? 1 : 0]);
    if (!server)
        usleep(200 * 1000); /* the waiter's memif socket first */
    open_all(argv[1], server);
    if (server)
        waiter();
    else
        sender();
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&cntr->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    if (server) {
        int status = 1;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
            failures++;
        printf("wait_check: %s\n", failures ? "FAILED" : "OK");
    }
    return failures ? 1 : 0;
}
