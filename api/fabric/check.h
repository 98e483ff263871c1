/* What the provider's check programs (rma_check.c, wait_check.c, cm_check.c) share:
 * CHECK counts a failure and goes on, CALL stops at a libfabric call that failed; both
 * name the program (CHECK_NAME, defined before this is included) and its side (`role`).
 * check_device points the provider at this side's end of the memif socket `sock`, at
 * 10.77.0.1 (the server) or 10.77.0.2, or with DFI_CHECK_IPV6 set in the environment
 * fd77::1/64 or fd77::2/64 (the node then runs over IPv6); check_peer_straddr is what
 * fi_av_straddr gives for the other side's name, less its service.
 */
#ifndef DFI_CHECK_H
#define DFI_CHECK_H
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>

static const char *role;
static int failures;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, CHECK_NAME " %s: line %d: ", role, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

#define CALL(expr)                                                                       \
    do {                                                                                 \
        int rc_ = (int)(expr);                                                           \
        if (rc_) {                                                                       \
            fprintf(stderr, CHECK_NAME " %s: %s: %s\n", role, #expr, fi_strerror(-rc_)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static void check_device(const char *sock, int server) {
    char dev[512];
    int v6 = getenv("DFI_CHECK_IPV6") != NULL;
    snprintf(dev, sizeof dev, "memif:%s:%s", sock, server ? "server" : "client");
    setenv("DEPOSIT_FI_DEV", dev, 1);
    setenv("DEPOSIT_FI_IP", v6 ? (server ? "fd77::1/64" : "fd77::2/64") : (server ? "10.77.0.1" : "10.77.0.2"), 1);
}

static inline const char *check_peer_straddr(int server) {
    if (getenv("DFI_CHECK_IPV6"))
        return server ? "deposit://[fd77::2]:" : "deposit://[fd77::1]:";
    return server ? "deposit://10.77.0.2:" : "deposit://10.77.0.1:";
}
#endif
