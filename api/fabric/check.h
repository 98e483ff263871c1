/* What the provider's check programs (rma_check.c, wait_check.c, cm_check.c) share:
 * CHECK counts a failure and goes on, CALL stops at a libfabric call that failed; both
 * name the program (CHECK_NAME, defined before this is included) and its side (`role`).
 * check_device points the provider at this side's end of the memif socket `sock`.
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
    snprintf(dev, sizeof dev, "memif:%s:%s", sock, server ? "server" : "client");
    setenv("DEPOSIT_FI_DEV", dev, 1);
    setenv("DEPOSIT_FI_IP", server ? "10.77.0.1" : "10.77.0.2", 1);
}
#endif
