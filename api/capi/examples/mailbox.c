/* mailbox.c: tagged messaging from C. Two nodes in one process (an in-process ring
 * pair), a mailbox on each: a small tagged message (eager, through the receiver's
 * ring) and a 1 MiB one (rendezvous: the receiver reads it straight from the sender's
 * buffer into the posted one), a probe that leaves a message waiting, a claim and a
 * matched receive, an any-source any-tag receive, a cancelled receive; every byte
 * checked. Then the same small and big messages between mailboxes of two IPv6
 * devices, named with the 16-byte functions (dd_mailbox_addr6, dd_mailbox_peer6,
 * dd_mailbox_peer_addr6), which give IPv4 nodes as IPv4-mapped addresses.
 *
 *   scripts/capi.sh        # builds libdeposit and this example, and runs it
 *
 * If you know libfabric or MPI: dd_mailbox_send/recv are fi_tsend/fi_trecv
 * (MPI_Isend/MPI_Irecv) with a tag and an ignore mask, dd_mailbox_peek/claim are
 * FI_PEEK and FI_CLAIM (MPI_Iprobe, MPI_Improbe), DD_MB_ANY_SOURCE is FI_ADDR_UNSPEC
 * (MPI_ANY_SOURCE), and completions come from dd_mailbox_poll.
 */
#include <deposit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (1u << 20)

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ < 0) {                                                                 \
            fprintf(stderr, "mailbox.c: %s failed (%d): %s\n", #call, rc_, dd_last_error()); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "mailbox.c: FAILED: %s\n", what);
    exit(1);
}

static struct dd_mailbox *a, *b;

/* Polls both mailboxes until `m` yields the completion of `op` with `context`. */
static struct dd_tag_completion wait_for(struct dd_mailbox *m, uint32_t op, uint64_t context) {
    struct dd_tag_completion c[8];
    for (long spins = 0; spins < 50L * 1000 * 1000; spins++) {
        CHECK(dd_mailbox_progress(m == a ? b : a));
        int n = dd_mailbox_poll(m, c, 8);
        CHECK(n);
        for (int i = 0; i < n; i++)
            if (c[i].op == op && c[i].context == context)
                return c[i];
    }
    fail("a completion never came");
    return c[0];
}

static void fill(uint8_t *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 13 + seed);
}

static void check(const uint8_t *p, size_t n, int seed, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(i * 13 + seed)) {
            fprintf(stderr, "mailbox.c: %s: byte %zu wrong\n", what, i);
            exit(1);
        }
}

int main(void) {
    struct dd_device *da, *db;
    struct dd_device_config cfg;
    CHECK(dd_device_config_init(&cfg));
    cfg.port = "ring:mbox-c:a";
    cfg.ip[0] = 10, cfg.ip[1] = 0, cfg.ip[2] = 0, cfg.ip[3] = 1;
    CHECK(dd_device_open(&cfg, &da));
    cfg.port = "ring:mbox-c:b";
    cfg.ip[3] = 2;
    CHECK(dd_device_open(&cfg, &db));

    struct dd_mailbox_config mc;
    CHECK(dd_mailbox_config_init(&mc, 9));
    CHECK(dd_mailbox_open(da, &mc, &a));
    CHECK(dd_mailbox_open(db, &mc, &b));
    uint8_t ip[4];
    uint32_t service, to_b;
    CHECK(dd_mailbox_addr(b, ip, &service));
    CHECK(dd_mailbox_peer(a, ip, service, &to_b));
    printf("mailbox.c: eager up to %u bytes, rendezvous beyond\n", dd_mailbox_eager_max(a));

    /* 1. Small and big, tagged, the receives posted first. */
    uint8_t small[100], got_small[100];
    uint8_t *big = malloc(BIG), *got_big = malloc(BIG);
    if (!big || !got_big)
        fail("malloc");
    fill(small, sizeof small, 1);
    fill(big, BIG, 2);
    CHECK(dd_mailbox_recv(b, DD_MB_ANY_SOURCE, 7, 0, got_small, sizeof got_small, 1, DD_MB_TAGGED));
    CHECK(dd_mailbox_recv(b, DD_MB_ANY_SOURCE, 8, 0, got_big, BIG, 2, DD_MB_TAGGED));
    CHECK(dd_mailbox_send(a, to_b, 7, 0, small, sizeof small, 11, DD_MB_TAGGED | DD_MB_INJECT));
    CHECK(dd_mailbox_send(a, to_b, 8, 42, big, BIG, 12, DD_MB_TAGGED | DD_MB_DATA)); /* zero copy */
    struct dd_tag_completion c = wait_for(b, DD_MB_OP_RECV, 1);
    if (c.status != DD_MB_SUCCESS || c.len != sizeof small || c.tag != 7)
        fail("the small message");
    check(got_small, sizeof small, 1, "small");
    c = wait_for(b, DD_MB_OP_RECV, 2);
    if (c.status != DD_MB_SUCCESS || c.len != BIG || !(c.flags & DD_MB_DATA) || c.data != 42)
        fail("the big message");
    check(got_big, BIG, 2, "big");
    if (wait_for(a, DD_MB_OP_SEND, 12).status != DD_MB_SUCCESS) /* `big` is free again */
        fail("the big send");
    printf("mailbox.c: 100 B eager and 1 MiB rendezvous received whole\n");

    /* 2. The message first: a probe sees it and leaves it, a claim takes it. */
    CHECK(dd_mailbox_send(a, to_b, 0x105, 0, small, sizeof small, 13, DD_MB_TAGGED | DD_MB_INJECT));
    struct dd_msg_info info;
    int found = 0;
    for (long i = 0; i < 10L * 1000 * 1000 && !found; i++) {
        CHECK(dd_mailbox_progress(a));
        found = dd_mailbox_peek(b, DD_MB_ANY_SOURCE, 0x100, 0xff, DD_MB_TAGGED, &info);
        CHECK(found);
    }
    if (!found || info.len != sizeof small || info.tag != 0x105 || info.src != 0)
        fail("the probe");
    if (dd_mailbox_claim(b, info.src, 0x105, 0, DD_MB_TAGGED, 99, &info) != 1)
        fail("the claim");
    if (dd_mailbox_peek(b, DD_MB_ANY_SOURCE, 0, ~0ull, DD_MB_TAGGED, &info) != 0)
        fail("a claimed message is hidden from probes");
    memset(got_small, 0, sizeof got_small);
    CHECK(dd_mailbox_recv_claimed(b, 99, got_small, sizeof got_small));
    if (wait_for(b, DD_MB_OP_RECV, 99).len != sizeof small)
        fail("the claimed message");
    check(got_small, sizeof small, 1, "claimed");
    printf("mailbox.c: peeked, claimed and received\n");

    /* 3. A receive nothing matches, cancelled. */
    CHECK(dd_mailbox_recv(b, DD_MB_ANY_SOURCE, 1234, 0, got_small, sizeof got_small, 77, DD_MB_TAGGED));
    if (dd_mailbox_cancel(b, 77) != 1 || wait_for(b, DD_MB_OP_RECV, 77).status != DD_MB_CANCELLED)
        fail("the cancel");

    /* 4. The same peer by its IPv4-mapped address (the 16-byte functions). */
    uint8_t ip6[16], mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(mapped + 12, ip, 4);
    uint32_t service6, again;
    CHECK(dd_mailbox_addr6(b, ip6, &service6));
    if (memcmp(ip6, mapped, 16) || service6 != service)
        fail("dd_mailbox_addr6 of an IPv4 mailbox is its IPv4-mapped address");
    CHECK(dd_mailbox_peer6(a, mapped, service, &again));
    if (again != to_b)
        fail("an IPv4-mapped address names the IPv4 peer");
    memset(ip6, 0, sizeof ip6);
    CHECK(dd_mailbox_peer_addr6(a, to_b, ip6, &service6));
    if (memcmp(ip6, mapped, 16) || service6 != service)
        fail("dd_mailbox_peer_addr6 of an IPv4 peer");
    printf("mailbox.c: the IPv4 peer as ::ffff:%u.%u.%u.%u\n", ip[0], ip[1], ip[2], ip[3]);

    struct dd_mailbox_stats s;
    CHECK(dd_mailbox_stats(b, &s));
    printf("mailbox.c: receiver: %llu eager, %llu rendezvous, %llu refused slots\n",
           (unsigned long long)s.eager_rx, (unsigned long long)s.rndv_rx,
           (unsigned long long)(s.bad_header + s.bad_source + s.bad_sequence));
    dd_mailbox_close(a);
    dd_mailbox_close(b);
    dd_device_close(da);
    dd_device_close(db);

    /* 5. IPv6: devices at fd00::1 and fd00::2, mailboxes named by 16 bytes. */
    static const uint8_t fd00_1[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    CHECK(dd_device_config_init(&cfg));
    cfg.port = "ring:mbox-c6:a";
    memcpy(cfg.ip6, fd00_1, 16);
    CHECK(dd_device_open(&cfg, &da));
    cfg.port = "ring:mbox-c6:b";
    cfg.ip6[15] = 2;
    CHECK(dd_device_open(&cfg, &db));
    CHECK(dd_mailbox_open(da, &mc, &a));
    CHECK(dd_mailbox_open(db, &mc, &b));
    if (dd_mailbox_addr(b, ip, &service) != DD_ERR_INVALID || !strstr(dd_last_error(), "dd_mailbox_addr6"))
        fail("dd_mailbox_addr of an IPv6 mailbox says to use dd_mailbox_addr6");
    CHECK(dd_mailbox_addr6(b, ip6, &service));
    if (memcmp(ip6, cfg.ip6, 16))
        fail("dd_mailbox_addr6 of an IPv6 mailbox is its device's address");
    CHECK(dd_mailbox_peer6(a, ip6, service, &to_b));
    fill(small, sizeof small, 3);
    fill(big, BIG, 4);
    memset(got_big, 0, BIG);
    CHECK(dd_mailbox_recv(b, DD_MB_ANY_SOURCE, 7, 0, got_small, sizeof got_small, 1, DD_MB_TAGGED));
    CHECK(dd_mailbox_recv(b, DD_MB_ANY_SOURCE, 8, 0, got_big, BIG, 2, DD_MB_TAGGED));
    CHECK(dd_mailbox_send(a, to_b, 7, 0, small, sizeof small, 11, DD_MB_TAGGED | DD_MB_INJECT));
    CHECK(dd_mailbox_send(a, to_b, 8, 0, big, BIG, 12, DD_MB_TAGGED));
    c = wait_for(b, DD_MB_OP_RECV, 1);
    if (c.status != DD_MB_SUCCESS || c.len != sizeof small)
        fail("the small message over IPv6");
    check(got_small, sizeof small, 3, "small over IPv6");
    uint32_t from = c.src;
    c = wait_for(b, DD_MB_OP_RECV, 2);
    if (c.status != DD_MB_SUCCESS || c.len != BIG)
        fail("the big message over IPv6");
    check(got_big, BIG, 4, "big over IPv6");
    if (wait_for(a, DD_MB_OP_SEND, 12).status != DD_MB_SUCCESS)
        fail("the big send over IPv6");
    /* The receiver names its sender by the sender's IPv6 address. */
    CHECK(dd_mailbox_peer_addr6(b, from, ip6, &service6));
    if (memcmp(ip6, fd00_1, 16) || service6 != service)
        fail("dd_mailbox_peer_addr6 of the IPv6 sender");
    if (dd_mailbox_peer_addr(b, from, ip, &service6) != DD_ERR_INVALID)
        fail("dd_mailbox_peer_addr of an IPv6 peer fails");
    printf("mailbox.c: 100 B eager and 1 MiB rendezvous between fd00::1 and fd00::2\n");
    dd_mailbox_close(a);
    dd_mailbox_close(b);
    dd_device_close(da);
    dd_device_close(db);
    free(big);
    free(got_big);
    printf("mailbox.c: ok\n");
    return 0;
}
