/* What the provider's check programs (rma_check.c, wait_check.c, cm_check.c) share:
 * CHECK counts a failure and goes on, CALL stops at a libfabric call that failed; both
 * name the program (CHECK_NAME, defined before this is included) and its side (`role`).
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
#endif
