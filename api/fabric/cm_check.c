/* Connected endpoints (FI_EP_MSG) through libfabric, checked: a libfabric program that
 * knows nothing of deposit but its provider name. It forks into a server and a client
 * joined by memif (DEPOSIT_FI_DEV); the server's passive endpoint name goes over a
 * socketpair, everything else over the fabric:
 *
 *  1. A connect request carries its private data to the server's FI_CONNREQ (with a
 *     handle, the client's address as dest_addr); fi_reject reaches the client as an
 *     FI_ECONNREFUSED error event for its endpoint.
 *  2. A second endpoint's request is accepted: FI_CONNECTED on both sides for the
 *     right endpoints, the accept's private data at the client; fi_getpeer on each side
 *     names the other's endpoint.
 *  3. Messages both ways, untagged and tagged (a receive ignoring every tag bit does
 *     not take connection management's messages); the top tag bit is refused to the
 *     application.
 *  4. fi_shutdown: FI_SHUTDOWN at the peer; sending after it: -FI_ENOTCONN.
 *
 * Usage: cm_check MEMIF_SOCKET
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
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK_NAME "cm_check"
#include "check.h"

static int fd;

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_cq *cq;

struct cm_event {
    struct fi_eq_cm_entry e;
    char data[64];
};

/* The next event (10 s at most): its type, or -FI_EAVAIL with the error in *err. */
static int event(struct cm_event *ev, struct fi_eq_err_entry *err) {
    uint32_t type;
    memset(ev, 0, sizeof *ev);
    ssize_t n = fi_eq_sread(eq, &type, ev, sizeof *ev, 10000, 0);
    if (n == -FI_EAVAIL) {
        CHECK(fi_eq_readerr(eq, err, 0) == sizeof *err, "fi_eq_readerr");
        return -FI_EAVAIL;
    }
    if (n < (ssize_t)sizeof ev->e) {
        fprintf(stderr, "cm_check %s: no event in 10 s (%zd)\n", role, n);
        exit(1);
    }
    return (int)type;
}

static void open_fabric(const char *sock, int server) {
    check_device(sock, server);
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_TAGGED;
    hints->ep_attr->type = FI_EP_MSG;
    hints->fabric_attr->prov_name = strdup("deposit");
    CALL(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    CHECK(info->ep_attr->type == FI_EP_MSG && !(info->ep_attr->mem_tag_format >> 63), "MSG info");
    CALL(fi_fabric(info->fabric_attr, &fabric, NULL));
    struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
    CALL(fi_eq_open(fabric, &ea, &eq, NULL));
    fi_freeinfo(hints);
}

static void open_ep(struct fi_info *fi, struct fid_ep **ep) {
    if (!domain) {
        CALL(fi_domain(fabric, fi, &domain, NULL));
        struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
        CALL(fi_cq_open(domain, &ca, &cq, NULL));
    }
    CALL(fi_endpoint(domain, fi, ep, NULL));
    CALL(fi_ep_bind(*ep, &eq->fid, 0));
    CALL(fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CALL(fi_enable(*ep));
}

/* The completion for `ctx` (10 s at most); others are kept until asked for. */
static struct fi_cq_tagged_entry stash[8];
static int nstash;

static struct fi_cq_tagged_entry wait_for(void *ctx) {
    struct fi_cq_tagged_entry e = {0};
    for (int i = 0; i < nstash; i++)
        if (stash[i].op_context == ctx)
            return e = stash[i], stash[i] = stash[--nstash], e;
    for (int i = 0; i < 1000000; i++) {
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n == 1 && e.op_context == ctx)
            return e;
        if (n == 1 && nstash < 8)
            stash[nstash++] = e;
        CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_read: %s", fi_strerror((int)-n));
        usleep(10);
    }
    fprintf(stderr, "cm_check %s: no completion\n", role);
    exit(1);
}

static void server(void) {
    struct fid_pep *pep;
    struct fid_ep *ep;
    struct cm_event ev;
    struct fi_eq_err_entry err;
    char name[64], peer[64], mine[64];
    size_t len = sizeof name, plen = sizeof peer, mlen = sizeof mine;
    CALL(fi_passive_ep(fabric, info, &pep, NULL));
    CALL(fi_pep_bind(pep, &eq->fid, 0));
    CALL(fi_listen(pep));
    CALL(fi_getname(&pep->fid, name, &len));
    CHECK(write(fd, &len, sizeof len) == sizeof len && write(fd, name, len) == (ssize_t)len, "name");
    /* 1 */
    CHECK(event(&ev, &err) == FI_CONNREQ, "not FI_CONNREQ");
    CHECK(ev.e.fid == &pep->fid && ev.e.info && ev.e.info->handle, "FI_CONNREQ's fid or handle");
    CHECK(!strcmp(ev.data, "first"), "the request's private data: %s", ev.data);
    CHECK(ev.e.info->dest_addr && ev.e.info->dest_addrlen > 0, "the requester's address");
    CALL(fi_reject(pep, ev.e.info->handle, "no", 3));
    fi_freeinfo(ev.e.info);
    /* 2 */
    CHECK(event(&ev, &err) == FI_CONNREQ, "not FI_CONNREQ");
    CHECK(!strcmp(ev.data, "second"), "the request's private data: %s", ev.data);
    open_ep(ev.e.info, &ep);
    CALL(fi_accept(ep, "welcome", 8));
    CHECK(event(&ev, &err) == FI_CONNECTED && ev.e.fid == &ep->fid, "not FI_CONNECTED for the endpoint");
    CALL(fi_getpeer(ep, peer, &plen));
    CALL(fi_getname(&ep->fid, mine, &mlen));
    CHECK(write(fd, peer, plen) == (ssize_t)plen && write(fd, mine, mlen) == (ssize_t)mlen, "names");
    /* 3 */
    char buf[100] = {0}, msg[100];
    struct fi_context c[2];
    for (int i = 0; i < 100; i++)
        msg[i] = (char)(i * 7 + 1);
    CALL(fi_recv(ep, buf, sizeof buf, NULL, 0, &c[0]));
    struct fi_cq_tagged_entry e = wait_for(&c[0]);
    CHECK(e.len == 100 && !memcmp(buf, msg, 100), "the client's message: %zu bytes", e.len);
    CALL(fi_tsend(ep, msg, 50, NULL, 0, 7, &c[1]));
    wait_for(&c[1]);
    CHECK(fi_tsend(ep, msg, 10, NULL, 0, 1ull << 63, &c[1]) == -FI_EINVAL, "the top tag bit was taken");
    /* 4 */
    char go;
    CHECK(read(fd, &go, 1) == 1, "the client's go");
    CALL(fi_shutdown(ep, 0));
    CHECK(fi_send(ep, msg, 1, NULL, 0, &c[1]) == -FI_ENOTCONN, "a send after fi_shutdown");
    CHECK(read(fd, &go, 1) == 1, "the client's end");
    fi_close(&ep->fid);
    fi_close(&pep->fid);
    fi_freeinfo(ev.e.info);
}

static void client(void) {
    struct fid_ep *ep1, *ep2;
    struct cm_event ev;
    struct fi_eq_err_entry err;
    char name[64], peer[64], theirs[64], theirpeer[64], mine[64];
    size_t len, plen = sizeof peer, mlen = sizeof mine;
    CHECK(read(fd, &len, sizeof len) == sizeof len && len <= sizeof name && read(fd, name, len) == (ssize_t)len,
          "the server's name");
    /* 1 */
    open_ep(info, &ep1);
    CALL(fi_connect(ep1, name, "first", 6));
    CHECK(event(&ev, &err) == -FI_EAVAIL, "no error event for the rejected request");
    CHECK(err.err == FI_ECONNREFUSED && err.fid == &ep1->fid, "the rejection: %s", fi_strerror(err.err));
    /* 2 */
    open_ep(info, &ep2);
    char buf[100] = {0}, msg[100];
    struct fi_context c[2];
    CALL(fi_trecv(ep2, buf, sizeof buf, NULL, 0, 7, ~0ull, &c[0])); /* every tag, from before */
    CALL(fi_connect(ep2, name, "second", 7));
    CHECK(event(&ev, &err) == FI_CONNECTED && ev.e.fid == &ep2->fid, "not FI_CONNECTED for the endpoint");
    CHECK(!strcmp(ev.data, "welcome"), "the accept's private data: %s", ev.data);
    CALL(fi_getpeer(ep2, peer, &plen));
    CALL(fi_getname(&ep2->fid, mine, &mlen));
    CHECK(read(fd, theirpeer, mlen) == (ssize_t)mlen && read(fd, theirs, plen) == (ssize_t)plen, "names");
    CHECK(!memcmp(peer, theirs, plen) && !memcmp(mine, theirpeer, mlen), "fi_getpeer does not name the other");
    /* 3 */
    for (int i = 0; i < 100; i++)
        msg[i] = (char)(i * 7 + 1);
    CALL(fi_send(ep2, msg, 100, NULL, 0, &c[1]));
    wait_for(&c[1]);
    struct fi_cq_tagged_entry e = wait_for(&c[0]);
    CHECK(e.len == 50 && e.tag == 7 && !memcmp(buf, msg, 50), "the server's message: %zu bytes tag %llu",
          e.len, (unsigned long long)e.tag);
    /* 4 */
    CHECK(write(fd, "g", 1) == 1, "go");
    CHECK(event(&ev, &err) == FI_SHUTDOWN && ev.e.fid == &ep2->fid, "not FI_SHUTDOWN for the endpoint");
    CHECK(write(fd, "e", 1) == 1, "end");
    fi_close(&ep1->fid);
    fi_close(&ep2->fid);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: cm_check MEMIF_SOCKET\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 1;
    pid_t pid = fork();
    int srv = pid != 0;
    role = srv ? "server" : "client";
    fd = sv[srv ? 0 : 1];
    if (!srv)
        usleep(200000); /* the memif server first */
    open_fabric(argv[1], srv);
    srv ? server() : client();
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&eq->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    if (!srv)
        return failures ? 1 : 0;
    int st = 0;
    waitpid(pid, &st, 0);
    int ok = !failures && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("cm_check: reject (FI_ECONNREFUSED), accept (FI_CONNECTED both sides, private data, fi_getpeer), "
           "messages both ways, the CM tag bit kept, fi_shutdown (FI_SHUTDOWN, -FI_ENOTCONN): %s\n",
           ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
