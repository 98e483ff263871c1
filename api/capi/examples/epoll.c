/* epoll.c: deposit in a program's own epoll loop. Two nodes in one process (the two
 * sides of an in-process ring pair), both with inline progress; the program sleeps in
 * epoll_wait on the devices' wait fds (dd_device_fd) and:
 *
 *   - is not woken while nothing comes, and uses next to no CPU meanwhile (measured
 *     with getrusage over a second: it fails above 5 % of a core);
 *   - is woken when the completion of its write is queued, and checks it;
 *   - sees that arming with a completion already queued makes the fd readable at once.
 *
 *   scripts/capi.sh        # builds libdeposit and this example, and runs it
 *   gcc epoll.c $(pkg-config --cflags --libs deposit) -o epoll
 *
 * The protocol (dd_device_fd's documentation in deposit.h): drain the queues, arm
 * (dd_device_arm_fd: 1 means something is ready already — drain again), sleep on the
 * fd, and after a wake drain and arm again. It is the verbs completion channel's
 * (ibv_req_notify_cq, then sleep on the channel's fd) and libfabric's FI_WAIT_FD with
 * fi_trywait. While an inline device's fd is armed, a helper thread of the device
 * drives it: nothing else has to.
 */
#define _GNU_SOURCE /* getrusage, clock_gettime */
#include <deposit.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define LEN 4096
#define SERVICE 1
#define T_MS 5000
#define CLIENT 1
#define SERVER 2

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ < 0) {                                                               \
            fprintf(stderr, "epoll.c: %s failed (%d): %s\n", #call, rc_, dd_last_error()); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "epoll.c: FAILED: %s\n", what);
    exit(1);
}

/* CPU time of the whole process (every thread: the devices' helpers too), seconds. */
static double process_cpu(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        fail("getrusage");
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void watch(int ep, struct dd_device *dev, uint64_t token) {
    int fd = dd_device_fd(dev);
    CHECK(fd);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = token};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        fail("epoll_ctl");
}

/* Posts a signaled write of `len` bytes from the client's offset 0 to the server's. */
static void post_write(struct dd_conn *conn, struct dd_endpoint *cep, uint64_t wr_id, uint32_t len) {
    struct dd_wr wr = {0};
    wr.wr_id = wr_id;
    wr.opcode = DD_OP_WRITE;
    wr.flags = DD_WR_SIGNALED;
    wr.local = cep;
    wr.length = len;
    CHECK(dd_post(conn, &wr));
}

int main(void) {
    struct dd_device_config cfg;
    struct dd_device *server, *client;
    CHECK(dd_device_config_init(&cfg));
    cfg.port = "ring:cepoll:a";
    memcpy(cfg.ip, (uint8_t[4]){10, 0, 0, 1}, 4);
    CHECK(dd_device_open(&cfg, &server));
    cfg.port = "ring:cepoll:b";
    cfg.ip[3] = 2;
    CHECK(dd_device_open(&cfg, &client));

    struct dd_endpoint *sep, *cep;
    struct dd_cq *scq, *ccq;
    struct dd_listener *listener;
    struct dd_conn *conn, *accepted;
    CHECK(dd_endpoint_alloc(server, LEN, DD_REMOTE_WRITE, &sep));
    CHECK(dd_cq_create(server, 16, &scq));
    CHECK(dd_listen(server, SERVICE, sep, scq, NULL, &listener));
    CHECK(dd_endpoint_alloc(client, LEN, 0, &cep));
    CHECK(dd_cq_create(client, 16, &ccq));
    const uint8_t server_ip[4] = {10, 0, 0, 1};
    CHECK(dd_connect(client, server_ip, SERVICE, cep, ccq, NULL, &conn));
    CHECK(dd_accept(listener, T_MS, &accepted));

    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        fail("epoll_create1");
    watch(ep, client, CLIENT);
    watch(ep, server, SERVER);
    struct epoll_event evs[4];

    /* Both devices armed (their queues are empty: 0), nothing coming: a second asleep
     * in epoll_wait. The armed server's helper thread drives it, so it will answer the
     * write below although no call of this program goes to it. */
    if (dd_device_arm_fd(server) != 0 || dd_device_arm_fd(client) != 0)
        fail("an arm found something ready on empty queues");
    double t0 = now(), cpu0 = process_cpu();
    int n = epoll_wait(ep, evs, 4, 1000);
    double took = now() - t0, cpu = process_cpu() - cpu0;
    if (n != 0)
        fail("a wait fd was readable while nothing came");
    printf("epoll.c: idle in epoll_wait %.3f s: process CPU %.2f ms (%.2f %% of a core)\n", took,
           cpu * 1e3, 100 * cpu / took);
    if (cpu / took >= 0.05)
        fail("the idle process used 5 % of a core or more");

    /* A 4 KiB write: its completion wakes the client's fd. */
    uint8_t data[LEN], got[LEN];
    for (int i = 0; i < LEN; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    CHECK(dd_endpoint_write(cep, 0, data, LEN));
    t0 = now();
    post_write(conn, cep, 1, LEN);
    struct dd_completion wc;
    int have = 0;
    while (!have) {
        n = epoll_wait(ep, evs, 4, T_MS);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "epoll.c: epoll_wait gave %d after %.0f ms\n", n, (now() - t0) * 1e3);
            fail("not woken for the completion");
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 != CLIENT)
                fail("the server's fd woke: nothing was queued for it");
        }
        /* Drain; arm again if the wake found nothing (then sleep again). */
        int k = dd_cq_poll(ccq, &wc, 1);
        CHECK(k);
        if (k == 1)
            have = 1;
        else
            CHECK(dd_device_arm_fd(client));
    }
    printf("epoll.c: woken %.0f us after the post\n", (now() - t0) * 1e6);
    if (wc.wr_id != 1 || wc.status != DD_WC_SUCCESS) {
        fprintf(stderr, "epoll.c: request %llu completed with %s\n", (unsigned long long)wc.wr_id,
                dd_wc_status_str(wc.status));
        exit(1);
    }
    CHECK(dd_endpoint_read(sep, 0, got, LEN));
    if (memcmp(got, data, LEN) != 0)
        fail("the server's memory does not hold the written bytes");

    /* Drained: an arm finds nothing (0) and empties the fd. */
    if (dd_device_arm_fd(client) != 0)
        fail("an arm found something ready after the drain");
    if (epoll_wait(ep, evs, 4, 0) != 0)
        fail("the arm did not empty the fd");

    /* Arming with a completion already queued: 1, and the fd is readable at once. */
    post_write(conn, cep, 2, 64);
    n = epoll_wait(ep, evs, 4, T_MS);
    if (n != 1 || evs[0].data.u64 != CLIENT)
        fail("not woken for the second completion");
    if (dd_device_arm_fd(client) != 1)
        fail("an arm with a completion queued did not say so");
    if (epoll_wait(ep, evs, 4, 0) != 1)
        fail("an arm with a completion queued did not make the fd readable");
    if (dd_cq_poll(ccq, &wc, 1) != 1 || wc.wr_id != 2 || wc.status != DD_WC_SUCCESS)
        fail("the second completion");
    printf("epoll.c: an arm with a completion queued makes the fd readable at once\n");

    close(ep);
    dd_conn_close(accepted);
    dd_conn_close(conn);
    dd_listener_close(listener);
    dd_cq_destroy(ccq);
    dd_cq_destroy(scq);
    dd_endpoint_free(cep);
    dd_endpoint_free(sep);
    dd_device_close(client);
    dd_device_close(server);
    printf("epoll.c: ok\n");
    return 0;
}
