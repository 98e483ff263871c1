/* RMA and atomics through libfabric, checked byte for byte: a libfabric program that
 * knows nothing of deposit but its provider name. It forks into a target and an
 * initiator joined by memif (DEPOSIT_FI_DEV); they exchange endpoint names, and the
 * target's region (address, key), over a socketpair.
 *
 * The target registers 64 KiB of its own memory (8 bytes into a malloc'ed block with
 * guard bytes around it) for remote reads and writes and keeps its completion queue
 * polled (manual progress) until the initiator is done; then it checks every byte of
 * the region and the guards against what the initiator's operations must have left.
 * The initiator writes and reads the region whole (in several staging slots) and in
 * odd places, injects, does fetch-and-add, compare-and-swap, atomic read and write
 * (one word and two), and checks that a write past the region's end and a read with
 * a wrong key complete with FI_EACCES and that unsupported atomics are refused.
 *
 * Usage: rma_check MEMIF_SOCKET [--offsets]   (--offsets: addresses are offsets into
 * the region, FI_MR_VIRT_ADDR off; otherwise virtual addresses).
 */
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_NAME "rma_check"
#include "check.h"

#define LEN 65536
#define GUARD 64
#define AT_WORD 8192 /* the atomics' words */

static uint8_t first(size_t i) { return (uint8_t)(i * 7 + 1); }
static uint8_t second(size_t i) { return (uint8_t)(i * 13 + 5); }

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static fi_addr_t peer;

/* Waits for one completion: 0, or the error it completed with (FI_E*). */
static int wait_one(void) {
    struct fi_cq_data_entry e;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n == 1)
            return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(cq, &err, 0);
            return err.err;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 20) {
            fprintf(stderr, "rma_check %s: no completion in 20 s\n", role);
            exit(1);
        }
    }
}

static void open_all(const char *sock, int server, int offsets) {
    check_device(sock, server);
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_PROV_KEY | (offsets ? 0 : FI_MR_VIRT_ADDR);
    hints->fabric_attr->prov_name = strdup("deposit");
    CALL(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    CHECK(info->domain_attr->mr_mode & FI_MR_PROV_KEY, "mr_mode %#x lacks FI_MR_PROV_KEY",
          info->domain_attr->mr_mode);
    CHECK(!(info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) == !!offsets, "mr_mode %#x",
          info->domain_attr->mr_mode);
    CALL(fi_fabric(info->fabric_attr, &fabric, NULL));
    CALL(fi_domain(fabric, info, &domain, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 256};
    CALL(fi_cq_open(domain, &ca, &cq, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    CALL(fi_av_open(domain, &aa, &av, NULL));
    CALL(fi_endpoint(domain, info, &ep, NULL));
    CALL(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CALL(fi_ep_bind(ep, &av->fid, 0));
    CALL(fi_enable(ep));
    fi_freeinfo(hints);
    fi_freeinfo(info);
}

/* What the target tells the initiator. */
struct region {
    uint64_t addr, key, len;
};

static void xfer(int fd, void *p, size_t n, int out) {
    for (size_t k = 0; k < n;) {
        ssize_t r = out ? write(fd, (char *)p + k, n - k) : read(fd, (char *)p + k, n - k);
        if (r <= 0) {
            fprintf(stderr, "rma_check %s: the other side went away\n", role);
            exit(1);
        }
        k += (size_t)r;
    }
}

static void exchange_names(int fd) {
    char mine[64], theirs[64];
    size_t len = sizeof mine;
    CALL(fi_getname(&ep->fid, mine, &len));
    xfer(fd, &len, sizeof len, 1);
    xfer(fd, mine, len, 1);
    size_t tlen;
    xfer(fd, &tlen, sizeof tlen, 0);
    xfer(fd, theirs, tlen, 0);
    CHECK(fi_av_insert(av, theirs, 1, &peer, 0, NULL) == 1, "fi_av_insert");
}

static void target(int fd, int offsets) {
    uint8_t *block = malloc(LEN + 2 * GUARD);
    memset(block, 0xEE, LEN + 2 * GUARD);
    uint8_t *region = block + 8; /* word- but not page-aligned, like any malloc'ed buffer */
    for (size_t i = 0; i < LEN; i++)
        region[i] = first(i);
    struct fid_mr *mr;
    CALL(fi_mr_reg(domain, region, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    struct region r = {offsets ? 0 : (uint64_t)(uintptr_t)region, fi_mr_key(mr), LEN};
    xfer(fd, &r, sizeof r, 1);
    /* Progress (manual) until the initiator says it is done. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct fi_cq_data_entry e;
    while (poll(&p, 1, 0) == 0)
        (void)fi_cq_read(cq, &e, 1);
    char done;
    xfer(fd, &done, 1, 0);
    /* What the initiator's operations must have left, and nothing else. */
    uint8_t *want = malloc(LEN);
    for (size_t i = 0; i < LEN; i++)
        want[i] = second(i);
    memset(want + 4097, 0xAB, 100);
    memset(want + 60001, 0xCD, 16);
    uint64_t words[4] = {99, 1234, 1, 2};
    memcpy(want + AT_WORD, words, sizeof words);
    size_t bad = 0;
    for (size_t i = 0; i < LEN; i++)
        if (region[i] != want[i] && bad++ < 5)
            CHECK(0, "region byte %zu is %#x, not %#x", i, region[i], want[i]);
    for (size_t i = 0; i < 8; i++)
        CHECK(block[i] == 0xEE, "guard byte %zu before the region changed", i);
    for (size_t i = 8 + LEN; i < LEN + 2 * GUARD; i++)
        CHECK(block[i] == 0xEE, "guard byte %zu after the region changed", i - 8 - LEN);
    CHECK(bad == 0, "%zu bytes of the region differ", bad);
    printf("rma_check: target: %d bytes of the region as the operations left them, guards intact\n", LEN);
    char verdict = failures ? 1 : 0;
    xfer(fd, &verdict, 1, 1);
    CALL(fi_close(&mr->fid));
    free(want);
    free(block);
}

static void initiator(int fd) {
    struct region r;
    xfer(fd, &r, sizeof r, 0);
    uint8_t *buf = malloc(LEN), *back = malloc(LEN);
    for (size_t i = 0; i < LEN; i++)
        buf[i] = second(i);
    /* The whole region, written and read back (eight staging slots each way). */
    CALL(fi_write(ep, buf, LEN, NULL, peer, r.addr, r.key, NULL));
    CHECK(wait_one() == 0, "write of %d bytes", LEN);
    memset(back, 0, LEN);
    CALL(fi_read(ep, back, LEN, NULL, peer, r.addr, r.key, NULL));
    CHECK(wait_one() == 0, "read of %d bytes", LEN);
    CHECK(!memcmp(back, buf, LEN), "the region read back differs from what was written");
    /* Odd places; an inject (no completion), then a read that sees it. */
    memset(buf, 0xAB, 100);
    CALL(fi_write(ep, buf, 100, NULL, peer, r.addr + 4097, r.key, NULL));
    CHECK(wait_one() == 0, "write of 100 bytes at 4097");
    memset(buf, 0xCD, 16);
    CALL(fi_inject_write(ep, buf, 16, peer, r.addr + 60001, r.key));
    memset(buf, 0, 16); /* the inject's buffer is ours again at once */
    CALL(fi_read(ep, back, 200, NULL, peer, r.addr + 4050, r.key, NULL));
    CHECK(wait_one() == 0, "read of 200 bytes at 4050");
    for (size_t i = 0; i < 200; i++) {
        uint8_t w = (4050 + i >= 4097 && 4050 + i < 4197) ? 0xAB : second(4050 + i);
        CHECK(back[i] == w, "byte %zu read back is %#x, not %#x", 4050 + i, back[i], w);
    }
    CALL(fi_read(ep, back, 18, NULL, peer, r.addr + 60000, r.key, NULL));
    CHECK(wait_one() == 0, "read at 60000");
    CHECK(back[0] == second(60000) && back[1] == 0xCD && back[16] == 0xCD && back[17] == second(60017),
          "the injected bytes read back as %#x %#x .. %#x %#x", back[0], back[1], back[16], back[17]);
    /* Atomics on 64-bit words. */
    uint64_t zero[4] = {0}, v, res = 0, cmp;
    CALL(fi_write(ep, zero, sizeof zero, NULL, peer, r.addr + AT_WORD, r.key, NULL));
    CHECK(wait_one() == 0, "zeroing the words");
    for (int i = 0; i < 3; i++) {
        v = 5;
        CALL(fi_atomic(ep, &v, 1, NULL, peer, r.addr + AT_WORD, r.key, FI_UINT64, FI_SUM, NULL));
        CHECK(wait_one() == 0, "fi_atomic FI_SUM");
    }
    v = 1;
    CALL(fi_fetch_atomic(ep, &v, 1, NULL, &res, NULL, peer, r.addr + AT_WORD, r.key, FI_UINT64, FI_SUM, NULL));
    CHECK(wait_one() == 0 && res == 15, "fetch-and-add returned %llu, not 15", (unsigned long long)res);
    cmp = 16, v = 99;
    CALL(fi_compare_atomic(ep, &v, 1, NULL, &cmp, NULL, &res, NULL, peer, r.addr + AT_WORD, r.key, FI_UINT64,
                           FI_CSWAP, NULL));
    CHECK(wait_one() == 0 && res == 16, "compare-and-swap returned %llu, not 16", (unsigned long long)res);
    cmp = 16, v = 7;
    CALL(fi_compare_atomic(ep, &v, 1, NULL, &cmp, NULL, &res, NULL, peer, r.addr + AT_WORD, r.key, FI_UINT64,
                           FI_CSWAP, NULL));
    CHECK(wait_one() == 0 && res == 99, "a failing compare-and-swap returned %llu, not 99", (unsigned long long)res);
    v = 1234;
    CALL(fi_atomic(ep, &v, 1, NULL, peer, r.addr + AT_WORD + 8, r.key, FI_UINT64, FI_ATOMIC_WRITE, NULL));
    CHECK(wait_one() == 0, "atomic write");
    CALL(fi_fetch_atomic(ep, NULL, 1, NULL, &res, NULL, peer, r.addr + AT_WORD + 8, r.key, FI_UINT64,
                         FI_ATOMIC_READ, NULL));
    CHECK(wait_one() == 0 && res == 1234, "atomic read returned %llu, not 1234", (unsigned long long)res);
    uint64_t two[2] = {1, 2}, got[2] = {0};
    CALL(fi_fetch_atomic(ep, two, 2, NULL, got, NULL, peer, r.addr + AT_WORD + 16, r.key, FI_INT64, FI_SUM, NULL));
    CHECK(wait_one() == 0 && got[0] == 0 && got[1] == 0, "two-word fetch-and-add returned %llu %llu",
          (unsigned long long)got[0], (unsigned long long)got[1]);
    /* Refusals: past the end, a wrong key, operations it cannot do. */
    memset(buf, 0x11, 16);
    CALL(fi_write(ep, buf, 16, NULL, peer, r.addr + LEN - 8, r.key, NULL));
    int err = wait_one();
    CHECK(err == FI_EACCES, "a write past the region's end completed with %d (%s)", err, fi_strerror(err));
    CALL(fi_read(ep, back, 8, NULL, peer, r.addr, r.key ^ (1ull << 40), NULL));
    err = wait_one();
    CHECK(err == FI_EACCES, "a read with a wrong key completed with %d (%s)", err, fi_strerror(err));
    v = 1;
    CHECK(fi_atomic(ep, &v, 1, NULL, peer, r.addr + AT_WORD, r.key, FI_UINT64, FI_MIN, NULL) == -FI_EOPNOTSUPP,
          "FI_MIN accepted");
    CHECK(fi_atomic(ep, &v, 1, NULL, peer, r.addr + AT_WORD + 4, r.key, FI_UINT64, FI_SUM, NULL) == -FI_EINVAL,
          "a misaligned atomic accepted");
    struct fi_atomic_attr attr;
    CHECK(fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0 && attr.size == 8,
          "fi_query_atomic FI_SUM");
    CHECK(fi_query_atomic(domain, FI_DOUBLE, FI_SUM, &attr, 0) == -FI_EOPNOTSUPP, "FI_DOUBLE accepted");
    printf("rma_check: initiator: writes, reads, inject, fetch-and-add, compare-and-swap, atomic read/write "
           "checked; past-the-end and wrong-key refused (FI_EACCES)\n");
    char done = 1, verdict;
    xfer(fd, &done, 1, 1);
    xfer(fd, &verdict, 1, 0);
    CHECK(verdict == 0, "the target found its region wrong");
    free(buf);
    free(back);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rma_check MEMIF_SOCKET [--offsets]\n");
        return 2;
    }
    int offsets = argc > 2 && !strcmp(argv[2], "--offsets");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        perror("socketpair");
        return 1;
    }
    pid_t pid = fork();
    int server = pid != 0;
    role = server ? "target" : "initiator";
    int fd = sv[server ? 0 : 1];
    close(sv[server ? 1 : 0]);
    if (!server)
        usleep(200 * 1000); /* the target's memif socket first */
    open_all(argv[1], server, offsets);
    exchange_names(fd);
    if (server)
        target(fd, offsets);
    else
        initiator(fd);
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    if (server) {
        int status = 1;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
            failures++;
        printf("rma_check (%s): %s\n", offsets ? "offsets" : "virtual addresses", failures ? "FAILED" : "OK");
    }
    return failures ? 1 : 0;
}
