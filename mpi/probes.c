/* probes: MPI matching checks — probes, matched probes, wildcards, ordering, truncation
 * and cancellation — a plain MPI program like ddmpi (it does not know which network
 * carries it), for 2 ranks or more. Every check failure, and a check that does not
 * finish within two minutes, aborts the job with a message naming the check.
 *
 *   probes [--no-ssend-mrecv]
 *
 * --no-ssend-mrecv leaves out MPI_Mrecv of MPI_Issend messages: Open MPI 4.1's ofi MTL
 * (pml cm) sends no synchronous-send acknowledgement from MPI_Mrecv, so the sender
 * waits forever, over any libfabric provider (its tcp;ofi_rxm too); fixed in Open MPI
 * 5 (open-mpi/ompi pull request 11327). scripts/mpi.sh passes it over pml cm.
 *
 * Pair checks run between ranks (0,1), (2,3), ...: the even rank receives and probes,
 * the odd one sends (a last odd-numbered rank out of pairs waits). Fan-in checks run
 * from every rank to rank 0. All of it on a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN (every call's result is checked); the ranks synchronise on
 * MPI_COMM_WORLD itself, so no control message is ever in the way of a probe.
 * Sizes go from 0 bytes to 384 KiB, so that a message is fragmented by a transport
 * that does (and often still arriving when it is probed). Each message's bytes are a
 * pattern of its sender and its number, checked wherever it lands.
 *
 *  - MPI_Iprobe with nothing sent: flag 0 (with and without wildcards, many times);
 *    after a send, flag 1 with the right source, tag and MPI_Get_count, and no flag
 *    for another tag; after the receive, flag 0 again.
 *  - MPI_Probe (blocking), then a receive with a larger buffer: the count.
 *  - Expected receives (posted before the send) and unexpected ones (the message
 *    there first, received in another order than sent).
 *  - MPI_Improbe + MPI_Mrecv: the matched message is invisible to later probes and
 *    receives, which see the next one with the same tag; a receive with the same tag
 *    posted after the match (before or after the next message is even sent) does not
 *    take it; MPI_Mrecv delivers it; also with MPI_Issend (the synchronous
 *    acknowledgement goes from the matched receive). MPI_Mprobe + MPI_Imrecv.
 *  - Non-overtaking order: messages from one source with the same tag arrive in send
 *    order (receive, probe, matched probe and posted receives), and so with
 *    MPI_ANY_TAG; several matched probes outstanding at once, received in reverse.
 *  - MPI_ANY_SOURCE from every other rank to rank 0: in order per source, by receive,
 *    probe and matched probe.
 *  - A receive too small for the message: MPI_ERR_TRUNCATE (posted before and after
 *    the message, fragmented, and MPI_Mrecv), with the right source and tag, and the
 *    next message intact.
 *  - MPI_Cancel of a receive that never matches: cancelled (MPI_Test_cancelled), and a
 *    later message with its tag goes to the next receive; of one whose message is
 *    already there: not cancelled, and the data delivered.
 */
#define _POSIX_C_SOURCE 200809L /* alarm, write, _exit */
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXMSG (384 * 1024)
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static int rank, nranks, peer, receiver, active, ssend_mrecv = 1;
static MPI_Comm comm;
static const char *current = "MPI_Init";
static uint8_t *sbuf[32], *rbuf[32];

/* 0 bytes to 384 KiB: around what one 8 KiB ring slot of the deposit provider carries
 * eager (8128 bytes; 960 in a 1 KiB slot at MTU 1500) and far beyond (rendezvous). */
static const int sizes[] = {0, 1, 7, 100, 1000, 8128, 8129, 16300, 65536, 200000, 330000, MAXMSG};

static void fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "probes: rank %d: CHECK FAILED in %s: %s\n", rank, current, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond))                                                                     \
            fail(__VA_ARGS__);                                                           \
    } while (0)

/* An MPI call on `comm` (MPI_ERRORS_RETURN) that must succeed. */
#define E(call)                                                                          \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != MPI_SUCCESS) {                                                        \
            char s_[MPI_MAX_ERROR_STRING];                                               \
            int n_;                                                                      \
            MPI_Error_string(rc_, s_, &n_);                                              \
            fail("%s returned %s", #call, s_);                                           \
        }                                                                                \
    } while (0)

static void on_alarm(int sig) {
    (void)sig;
    char msg[200];
    int n = snprintf(msg, sizeof msg, "probes: rank %d: TIMED OUT (120 s) in %s\n", rank, current);
    if (write(2, msg, (size_t)n) < 0) {
    }
    _exit(3); /* mpirun takes the whole job down */
}

static void begin(const char *name) {
    current = name;
    alarm(120);
}

static void passed(void) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("probes: %s: OK\n", current);
    fflush(stdout);
}

static uint8_t pattern(size_t i, int from, int k) { return (uint8_t)(i * 131 + from * 17 + k * 7 + 1); }

static void fill(uint8_t *b, size_t n, int from, int k) {
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, from, k);
}

static void check_data(const uint8_t *b, size_t n, int from, int k, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, from, k))
            fail("%s: message %d from rank %d, %zu bytes: byte %zu is %u, not %u", what, k, from, n, i, b[i],
                 pattern(i, from, k));
}

static void check_status(const MPI_Status *st, int source, int tag, int count, const char *what) {
    int n;
    MPI_Get_count(st, MPI_BYTE, &n);
    CHECK(st->MPI_SOURCE == source, "%s: source %d, not %d", what, st->MPI_SOURCE, source);
    CHECK(st->MPI_TAG == tag, "%s: tag %d, not %d", what, st->MPI_TAG, tag);
    CHECK(n == count, "%s: count %d, not %d (source %d, tag %d)", what, n, count, source, tag);
}

/* Between the two ranks of a pair, on MPI_COMM_WORLD (never in the way of `comm`). */
static void pair_sync(void) {
    if (!active)
        return;
    char x = 0, y;
    MPI_Sendrecv(&x, 1, MPI_CHAR, peer, 999, &y, 1, MPI_CHAR, peer, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* Iprobe until a match (the message may still be on its way). */
static void iprobe_wait(int source, int tag, MPI_Status *st) {
    int flag = 0;
    while (!flag)
        E(MPI_Iprobe(source, tag, comm, &flag, st));
}

static void improbe_wait(int source, int tag, MPI_Message *m, MPI_Status *st) {
    int flag = 0;
    while (!flag)
        E(MPI_Improbe(source, tag, comm, &flag, m, st));
    CHECK(*m != MPI_MESSAGE_NULL, "MPI_Improbe matched but gave MPI_MESSAGE_NULL");
}

/* Nothing to probe: no message is pending for this rank on `comm`. */
static void nothing_pending(int times) {
    for (int i = 0; i < times; i++) {
        int flag = 1;
        MPI_Status st;
        E(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe(ANY_SOURCE, ANY_TAG) found a message (source %d, tag %d) where none is",
              st.MPI_SOURCE, st.MPI_TAG);
        flag = 1;
        E(MPI_Iprobe(nranks > 1 ? (rank + 1) % nranks : 0, 5, comm, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "MPI_Iprobe(source, 5) found a message where none is");
        flag = 1;
        MPI_Message m = MPI_MESSAGE_NULL;
        E(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &m, MPI_STATUS_IGNORE));
        CHECK(!flag && m == MPI_MESSAGE_NULL, "MPI_Improbe(ANY_SOURCE, ANY_TAG) matched where nothing is");
    }
}

static void test_nothing(void) {
    begin("MPI_Iprobe and MPI_Improbe with nothing sent: no flag");
    MPI_Barrier(MPI_COMM_WORLD);
    nothing_pending(200);
    passed();
}

/* Iprobe after a send (unexpected), every size: flag, source, tag, count; then the
 * receive; then no flag. */
static void test_iprobe(void) {
    begin("MPI_Iprobe after a send: source, tag, count; then MPI_Recv");
    for (int s = 0; s < NSIZES; s++) {
        int tag = 10 + s, n = sizes[s];
        if (!active)
            continue;
        if (!receiver) {
            fill(sbuf[0], (size_t)n, rank, s);
            if (s % 2)
                E(MPI_Ssend(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            else
                E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            continue;
        }
        MPI_Status st;
        iprobe_wait(peer, tag, &st);
        check_status(&st, peer, tag, n, "MPI_Iprobe(peer, tag)");
        iprobe_wait(MPI_ANY_SOURCE, MPI_ANY_TAG, &st);
        check_status(&st, peer, tag, n, "MPI_Iprobe(ANY_SOURCE, ANY_TAG)");
        iprobe_wait(peer, MPI_ANY_TAG, &st);
        check_status(&st, peer, tag, n, "MPI_Iprobe(peer, ANY_TAG)");
        int flag = 1;
        E(MPI_Iprobe(peer, tag + 1000, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe of another tag found a message (tag %d)", st.MPI_TAG);
        E(MPI_Iprobe(rank, tag, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe of another source (self) found a message");
        memset(rbuf[0], 0xEE, (size_t)n + 1);
        E(MPI_Recv(rbuf[0], n, MPI_BYTE, peer, tag, comm, &st));
        check_status(&st, peer, tag, n, "MPI_Recv after MPI_Iprobe");
        check_data(rbuf[0], (size_t)n, peer, s, "MPI_Recv after MPI_Iprobe");
        CHECK(rbuf[0][n] == 0xEE, "MPI_Recv wrote past %d bytes", n);
        E(MPI_Iprobe(peer, tag, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe still finds a received message (%d bytes)", n);
    }
    passed();
}

static void test_probe(void) {
    begin("MPI_Probe (blocking), then MPI_Recv with a larger buffer");
    for (int s = 0; s < NSIZES; s++) {
        int tag = 30 + s, n = sizes[s];
        if (!active)
            continue;
        if (!receiver) {
            fill(sbuf[0], (size_t)n, rank, s);
            E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            continue;
        }
        MPI_Status st;
        E(MPI_Probe(s % 2 ? MPI_ANY_SOURCE : peer, s % 3 ? tag : MPI_ANY_TAG, comm, &st));
        check_status(&st, peer, tag, n, "MPI_Probe");
        E(MPI_Recv(rbuf[0], MAXMSG, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, &st));
        check_status(&st, peer, tag, n, "MPI_Recv after MPI_Probe");
        check_data(rbuf[0], (size_t)n, peer, s, "MPI_Recv after MPI_Probe");
    }
    passed();
}

/* Expected: every receive posted before anything is sent; unexpected: everything sent
 * before the receives, received in reverse. */
static void test_expected_unexpected(void) {
    begin("expected receives (posted first) and unexpected ones (message first)");
    MPI_Request req[NSIZES];
    MPI_Status st[NSIZES];
    if (active && receiver) {
        for (int s = 0; s < NSIZES; s++)
            E(MPI_Irecv(rbuf[s], sizes[s] + 16, MPI_BYTE, s % 2 ? MPI_ANY_SOURCE : peer, 100 + s, comm, &req[s]));
        pair_sync();
        E(MPI_Waitall(NSIZES, req, st));
        for (int s = 0; s < NSIZES; s++) {
            check_status(&st[s], peer, 100 + s, sizes[s], "expected MPI_Irecv");
            check_data(rbuf[s], (size_t)sizes[s], peer, s, "expected MPI_Irecv");
        }
    } else if (active) {
        pair_sync();
        for (int s = NSIZES - 1; s >= 0; s--) {
            fill(sbuf[s], (size_t)sizes[s], rank, s);
            E(MPI_Send(sbuf[s], sizes[s], MPI_BYTE, peer, 100 + s, comm));
        }
    }
    /* Unexpected. */
    if (active && !receiver) {
        for (int s = 0; s < NSIZES; s++) {
            fill(sbuf[s], (size_t)sizes[s], rank, s + 50);
            E(MPI_Isend(sbuf[s], sizes[s], MPI_BYTE, peer, 200 + s, comm, &req[s]));
        }
        pair_sync();
        E(MPI_Waitall(NSIZES, req, MPI_STATUSES_IGNORE));
    } else if (active) {
        pair_sync();
        MPI_Status one;
        E(MPI_Probe(peer, 200 + NSIZES - 1, comm, &one)); /* the last one sent is there */
        for (int s = NSIZES - 1; s >= 0; s--) {
            E(MPI_Recv(rbuf[s], sizes[s], MPI_BYTE, peer, 200 + s, comm, &one));
            check_status(&one, peer, 200 + s, sizes[s], "unexpected MPI_Recv");
            check_data(rbuf[s], (size_t)sizes[s], peer, s + 50, "unexpected MPI_Recv");
        }
    }
    passed();
}

/* Improbe + Mrecv: message A (a bytes) then B (b bytes), the same tag. */
static void improbe_pair(int a, int b, int sync_send, int b_later, int k) {
    const int tag = 40;
    if (!active)
        return;
    if (!receiver) {
        MPI_Request r[2];
        fill(sbuf[0], (size_t)a, rank, k);
        fill(sbuf[1], (size_t)b, rank, k + 1);
        if (sync_send)
            E(MPI_Issend(sbuf[0], a, MPI_BYTE, peer, tag, comm, &r[0]));
        else
            E(MPI_Isend(sbuf[0], a, MPI_BYTE, peer, tag, comm, &r[0]));
        if (b_later)
            pair_sync(); /* the receiver has matched A and posted its receive */
        E(MPI_Isend(sbuf[1], b, MPI_BYTE, peer, tag, comm, &r[1]));
        E(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        return;
    }
    MPI_Message m;
    MPI_Status st;
    MPI_Request rb;
    improbe_wait(k % 2 ? MPI_ANY_SOURCE : peer, k % 4 < 2 ? tag : MPI_ANY_TAG, &m, &st);
    check_status(&st, peer, tag, a, "MPI_Improbe (the first message)");
    if (!b_later) {
        /* A is matched: probes see B. */
        E(MPI_Probe(peer, tag, comm, &st));
        check_status(&st, peer, tag, b, "MPI_Probe after MPI_Improbe (must see the second message)");
        iprobe_wait(MPI_ANY_SOURCE, MPI_ANY_TAG, &st);
        check_status(&st, peer, tag, b, "MPI_Iprobe(ANY, ANY) after MPI_Improbe");
    } else {
        int flag = 1;
        E(MPI_Iprobe(peer, tag, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe finds a message after MPI_Improbe matched the only one (tag %d)", st.MPI_TAG);
    }
    memset(rbuf[1], 0xEE, (size_t)b + 1);
    E(MPI_Irecv(rbuf[1], MAXMSG, MPI_BYTE, peer, tag, comm, &rb));
    if (b_later) {
        pair_sync();
        /* Let B come while A is still matched and unreceived. */
        for (int i = 0; i < 200; i++) {
            int done;
            E(MPI_Iprobe(peer, 12345, comm, &done, MPI_STATUS_IGNORE));
        }
    }
    memset(rbuf[0], 0xEE, (size_t)a + 1);
    if (k % 3 == 0) {
        MPI_Request ra;
        E(MPI_Imrecv(rbuf[0], a, MPI_BYTE, &m, &ra));
        CHECK(m == MPI_MESSAGE_NULL, "MPI_Imrecv did not set the message to MPI_MESSAGE_NULL");
        E(MPI_Wait(&ra, &st));
    } else {
        E(MPI_Mrecv(rbuf[0], a, MPI_BYTE, &m, &st));
    }
    check_status(&st, peer, tag, a, "MPI_Mrecv of the matched message");
    check_data(rbuf[0], (size_t)a, peer, k, "MPI_Mrecv of the matched message");
    CHECK(rbuf[0][a] == 0xEE, "MPI_Mrecv wrote past %d bytes", a);
    E(MPI_Wait(&rb, &st));
    check_status(&st, peer, tag, b, "MPI_Irecv posted after MPI_Improbe (must get the second message)");
    check_data(rbuf[1], (size_t)b, peer, k + 1, "MPI_Irecv posted after MPI_Improbe");
}

static void test_improbe(void) {
    begin("MPI_Improbe + MPI_Mrecv (the matched message is nobody else's)");
    static const int ab[][2] = {{100, 200}, {0, 5}, {5, 0}, {8145, 100}, {200000, 30000}, {30000, 330000},
                                {MAXMSG, 1}, {1, MAXMSG}};
    int k = 0;
    for (int i = 0; i < (int)(sizeof ab / sizeof ab[0]); i++)
        for (int later = 0; later < 2; later++, k += 2)
            improbe_pair(ab[i][0], ab[i][1], 0, later, k);
    passed();
    begin("MPI_Improbe + MPI_Mrecv of MPI_Issend messages");
    if (ssend_mrecv) {
        for (int i = 0; i < (int)(sizeof ab / sizeof ab[0]); i++, k += 2)
            improbe_pair(ab[i][0], ab[i][1], 1, i % 2, k);
        passed();
    } else if (rank == 0) {
        printf("probes: %s: skipped (--no-ssend-mrecv)\n", current);
    }
    begin("MPI_Mprobe (blocking) + MPI_Mrecv / MPI_Imrecv");
    for (int s = 0; s < NSIZES; s++) {
        int tag = 300 + s, n = sizes[s];
        if (!active)
            continue;
        if (!receiver) {
            fill(sbuf[0], (size_t)n, rank, s);
            E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            continue;
        }
        MPI_Message m;
        MPI_Status st;
        E(MPI_Mprobe(s % 2 ? MPI_ANY_SOURCE : peer, s % 3 ? MPI_ANY_TAG : tag, comm, &m, &st));
        check_status(&st, peer, tag, n, "MPI_Mprobe");
        if (s % 2) {
            MPI_Request r;
            E(MPI_Imrecv(rbuf[0], MAXMSG, MPI_BYTE, &m, &r));
            E(MPI_Wait(&r, &st));
        } else {
            E(MPI_Mrecv(rbuf[0], MAXMSG, MPI_BYTE, &m, &st));
        }
        check_status(&st, peer, tag, n, "MPI_Mrecv after MPI_Mprobe");
        check_data(rbuf[0], (size_t)n, peer, s, "MPI_Mrecv after MPI_Mprobe");
    }
    passed();
}

/* Non-overtaking: N messages of distinct sizes (the count says which one it is). */
#define NORD 14
static const int ord_sizes[NORD] = {0, 1, 9000, 3, 200000, 17, 8144, 65536, 2, 100, 330000, 8145, 5, 1000};

static void send_series(int tag0, int same_tag, int k0) {
    MPI_Request r[NORD];
    for (int i = 0; i < NORD; i++) {
        fill(sbuf[i], (size_t)ord_sizes[i], rank, k0 + i);
        E(MPI_Isend(sbuf[i], ord_sizes[i], MPI_BYTE, peer, same_tag ? tag0 : tag0 + i, comm, &r[i]));
    }
    E(MPI_Waitall(NORD, r, MPI_STATUSES_IGNORE));
}

static void expect(const MPI_Status *st, const uint8_t *b, int i, int tag, int k0, const char *what) {
    check_status(st, peer, tag, ord_sizes[i], what);
    if (b)
        check_data(b, (size_t)ord_sizes[i], peer, k0 + i, what);
}

static void test_order(void) {
    MPI_Status st;
    begin("non-overtaking: one source, one tag, MPI_Recv in send order");
    if (active && !receiver)
        send_series(400, 1, 0);
    else if (active)
        for (int i = 0; i < NORD; i++) {
            E(MPI_Recv(rbuf[0], MAXMSG, MPI_BYTE, i % 2 ? MPI_ANY_SOURCE : peer, 400, comm, &st));
            expect(&st, rbuf[0], i, 400, 0, "MPI_Recv (one tag) in order");
        }
    passed();

    begin("non-overtaking: MPI_ANY_TAG receives get the tags in send order");
    if (active && !receiver)
        send_series(410, 0, 20);
    else if (active)
        for (int i = 0; i < NORD; i++) {
            E(MPI_Recv(rbuf[0], MAXMSG, MPI_BYTE, i % 2 ? MPI_ANY_SOURCE : peer, MPI_ANY_TAG, comm, &st));
            expect(&st, rbuf[0], i, 410 + i, 20, "MPI_Recv(ANY_TAG) in order");
        }
    passed();

    begin("non-overtaking: MPI_Probe(ANY_SOURCE, ANY_TAG) then MPI_Recv of what it found");
    if (active && !receiver)
        send_series(430, 0, 40);
    else if (active)
        for (int i = 0; i < NORD; i++) {
            E(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
            expect(&st, NULL, i, 430 + i, 40, "MPI_Probe(ANY, ANY) in order");
            E(MPI_Recv(rbuf[0], ord_sizes[i], MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, &st));
            expect(&st, rbuf[0], i, 430 + i, 40, "MPI_Recv after MPI_Probe(ANY, ANY)");
        }
    passed();

    begin("non-overtaking: MPI_Improbe x N (one tag), then MPI_Mrecv in reverse");
    if (active && !receiver)
        send_series(450, 1, 60);
    else if (active) {
        MPI_Message m[NORD];
        for (int i = 0; i < NORD; i++) {
            improbe_wait(peer, i % 2 ? 450 : MPI_ANY_TAG, &m[i], &st);
            expect(&st, NULL, i, 450, 60, "MPI_Improbe in order");
        }
        int flag = 1;
        E(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st));
        CHECK(!flag, "MPI_Iprobe finds a message when every one is matched (tag %d)", st.MPI_TAG);
        for (int i = NORD - 1; i >= 0; i--) {
            E(MPI_Mrecv(rbuf[i], ord_sizes[i], MPI_BYTE, &m[i], &st));
            expect(&st, rbuf[i], i, 450, 60, "MPI_Mrecv in reverse");
        }
    }
    passed();

    begin("non-overtaking: receives posted first (one tag and MPI_ANY_TAG) complete in send order");
    if (active && !receiver) {
        pair_sync();
        send_series(470, 1, 80);
        pair_sync();
        send_series(490, 0, 100);
    } else if (active) {
        MPI_Request r[NORD];
        MPI_Status sts[NORD];
        for (int round = 0; round < 2; round++) {
            int tag0 = round ? 490 : 470, k0 = round ? 100 : 80;
            for (int i = 0; i < NORD; i++)
                E(MPI_Irecv(rbuf[i], MAXMSG, MPI_BYTE, i % 3 ? peer : MPI_ANY_SOURCE, round ? MPI_ANY_TAG : tag0,
                            comm, &r[i]));
            pair_sync();
            E(MPI_Waitall(NORD, r, sts));
            for (int i = 0; i < NORD; i++)
                expect(&sts[i], rbuf[i], i, round ? tag0 + i : tag0, k0, "posted MPI_Irecv in order");
        }
    }
    passed();
}

/* Every rank but 0 sends M messages to rank 0; rank 0 takes them with MPI_ANY_SOURCE. */
#define FAN 10
static void test_fan_in(void) {
    static const char *names[] = {"MPI_ANY_SOURCE fan-in to rank 0: MPI_Recv, in order per source",
                                  "MPI_ANY_SOURCE fan-in to rank 0: MPI_Probe(ANY, ANY) + MPI_Recv",
                                  "MPI_ANY_SOURCE fan-in to rank 0: MPI_Improbe(ANY, ANY), MPI_Mrecv in reverse"};
    for (int mode = 0; mode < 3; mode++) {
        begin(names[mode]);
        int tag = 500 + mode;
        if (rank != 0) {
            MPI_Request r[FAN];
            for (int i = 0; i < FAN; i++) {
                int n = ord_sizes[(i + rank) % NORD];
                fill(sbuf[i], (size_t)n, rank, i);
                E(MPI_Isend(sbuf[i], n, MPI_BYTE, 0, mode == 0 ? tag : tag + 10 * i, comm, &r[i]));
            }
            E(MPI_Waitall(FAN, r, MPI_STATUSES_IGNORE));
        } else {
            int next[256] = {0}, total = (nranks - 1) * FAN;
            MPI_Message *m = calloc((size_t)total, sizeof *m);
            int *from = calloc((size_t)total, sizeof *from), *idx = calloc((size_t)total, sizeof *idx);
            uint8_t *b = malloc(MAXMSG);
            for (int j = 0; j < total; j++) {
                MPI_Status st;
                if (mode == 0)
                    E(MPI_Recv(b, MAXMSG, MPI_BYTE, MPI_ANY_SOURCE, tag, comm, &st));
                else if (mode == 1)
                    E(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
                else
                    improbe_wait(MPI_ANY_SOURCE, MPI_ANY_TAG, &m[j], &st);
                int src = st.MPI_SOURCE;
                CHECK(src > 0 && src < nranks && next[src] < FAN, "a message from rank %d (tag %d)", src, st.MPI_TAG);
                int i = next[src]++, n = ord_sizes[(i + src) % NORD], want_tag = mode == 0 ? tag : tag + 10 * i;
                int cnt;
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                CHECK(st.MPI_TAG == want_tag && cnt == n,
                      "from rank %d: tag %d count %d, expected message %d (tag %d, count %d): out of order", src,
                      st.MPI_TAG, cnt, i, want_tag, n);
                if (mode == 1) {
                    E(MPI_Recv(b, n, MPI_BYTE, src, st.MPI_TAG, comm, &st));
                    CHECK(st.MPI_SOURCE == src && st.MPI_TAG == want_tag, "MPI_Recv after MPI_Probe(ANY, ANY)");
                }
                if (mode < 2)
                    check_data(b, (size_t)n, src, i, names[mode]);
                from[j] = src, idx[j] = i;
            }
            for (int j = total - 1; mode == 2 && j >= 0; j--) {
                MPI_Status st;
                int n = ord_sizes[(idx[j] + from[j]) % NORD];
                E(MPI_Mrecv(b, n, MPI_BYTE, &m[j], &st));
                CHECK(st.MPI_SOURCE == from[j], "MPI_Mrecv: source %d, not %d", st.MPI_SOURCE, from[j]);
                check_data(b, (size_t)n, from[j], idx[j], names[mode]);
            }
            free(m), free(from), free(idx), free(b);
        }
        passed();
    }
}

static void expect_truncate(int rc, const MPI_Status *st, int tag, const char *what) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "%s: error class %d, not MPI_ERR_TRUNCATE (%d)", what, cls, MPI_ERR_TRUNCATE);
    if (st) {
        CHECK(st->MPI_SOURCE == peer, "%s: source %d, not %d", what, st->MPI_SOURCE, peer);
        CHECK(st->MPI_TAG == tag, "%s: tag %d, not %d", what, st->MPI_TAG, tag);
    }
}

static void test_truncate(void) {
    begin("a receive too small: MPI_ERR_TRUNCATE (unexpected, expected, fragmented, MPI_Mrecv)");
    static const int cases[][2] = {{1000, 100}, {8145, 8144}, {200000, 1000}, {MAXMSG, 0}, {1, 0}};
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int c = 0; c < nc; c++) {
        int n = cases[c][0], small = cases[c][1], tag = 600 + c;
        if (!active)
            continue;
        if (!receiver) {
            /* 1: unexpected; 2: expected; 3: MPI_Mrecv; then an intact message each time. */
            for (int round = 0; round < 3; round++) {
                if (round == 1)
                    pair_sync();
                fill(sbuf[0], (size_t)n, rank, round);
                E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
                fill(sbuf[1], 77, rank, 10 + round);
                E(MPI_Send(sbuf[1], 77, MPI_BYTE, peer, tag, comm));
            }
            continue;
        }
        MPI_Status st;
        /* Unexpected. */
        E(MPI_Probe(peer, tag, comm, &st));
        int rc = MPI_Recv(rbuf[0], small, MPI_BYTE, peer, tag, comm, &st);
        expect_truncate(rc, &st, tag, "MPI_Recv (unexpected) too small");
        E(MPI_Recv(rbuf[1], 1000, MPI_BYTE, peer, tag, comm, &st));
        check_status(&st, peer, tag, 77, "the message after a truncated one");
        check_data(rbuf[1], 77, peer, 10, "the message after a truncated one");
        /* Expected. */
        MPI_Request r;
        E(MPI_Irecv(rbuf[0], small, MPI_BYTE, peer, tag, comm, &r));
        pair_sync();
        rc = MPI_Wait(&r, &st);
        expect_truncate(rc, &st, tag, "MPI_Irecv (expected) too small");
        E(MPI_Recv(rbuf[1], 1000, MPI_BYTE, peer, tag, comm, &st));
        check_status(&st, peer, tag, 77, "the message after a truncated one");
        check_data(rbuf[1], 77, peer, 11, "the message after a truncated one");
        /* Matched probe. */
        MPI_Message m;
        improbe_wait(peer, tag, &m, &st);
        check_status(&st, peer, tag, n, "MPI_Improbe before a truncated MPI_Mrecv");
        rc = MPI_Mrecv(rbuf[0], small, MPI_BYTE, &m, &st);
        expect_truncate(rc, NULL, tag, "MPI_Mrecv too small");
        E(MPI_Recv(rbuf[1], 1000, MPI_BYTE, peer, tag, comm, &st));
        check_status(&st, peer, tag, 77, "the message after a truncated MPI_Mrecv");
        check_data(rbuf[1], 77, peer, 12, "the message after a truncated MPI_Mrecv");
    }
    passed();
}

static void test_cancel(void) {
    begin("MPI_Cancel of a receive that never matches: cancelled; its tag goes to the next receive");
    MPI_Status st;
    int cancelled;
    for (int i = 0; i < 4; i++) {
        MPI_Request r;
        int src = i % 2 ? MPI_ANY_SOURCE : (nranks > 1 ? (rank + 1) % nranks : 0);
        E(MPI_Irecv(rbuf[0], 100, MPI_BYTE, src, i < 2 ? 700 : MPI_ANY_TAG, comm, &r));
        E(MPI_Cancel(&r));
        E(MPI_Wait(&r, &st));
        E(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled, "a receive that cannot match (source %d) was not cancelled", src);
        CHECK(r == MPI_REQUEST_NULL, "the cancelled request is not MPI_REQUEST_NULL after MPI_Wait");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 0; s < NSIZES; s += 3) {
        int n = sizes[s], tag = 710 + s;
        if (!active)
            continue;
        if (!receiver) {
            pair_sync();
            fill(sbuf[0], (size_t)n, rank, s);
            E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            continue;
        }
        MPI_Request r;
        E(MPI_Irecv(rbuf[1], MAXMSG, MPI_BYTE, peer, tag, comm, &r));
        E(MPI_Cancel(&r));
        E(MPI_Wait(&r, &st));
        E(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled, "a receive posted before its message was sent was not cancelled");
        pair_sync();
        E(MPI_Recv(rbuf[0], MAXMSG, MPI_BYTE, peer, tag, comm, &st));
        check_status(&st, peer, tag, n, "MPI_Recv after a cancelled receive of the same tag");
        check_data(rbuf[0], (size_t)n, peer, s, "MPI_Recv after a cancelled receive of the same tag");
    }
    passed();

    begin("MPI_Cancel of a receive whose message is already there: not cancelled, data delivered");
    for (int s = 0; s < NSIZES; s++) {
        int n = sizes[s], tag = 730 + s;
        if (!active)
            continue;
        if (!receiver) {
            fill(sbuf[0], (size_t)n, rank, s);
            E(MPI_Send(sbuf[0], n, MPI_BYTE, peer, tag, comm));
            continue;
        }
        MPI_Request r;
        E(MPI_Probe(peer, tag, comm, &st)); /* here (at least its beginning) */
        memset(rbuf[0], 0xEE, (size_t)n);
        E(MPI_Irecv(rbuf[0], MAXMSG, MPI_BYTE, peer, tag, comm, &r));
        E(MPI_Cancel(&r));
        E(MPI_Wait(&r, &st));
        E(MPI_Test_cancelled(&st, &cancelled));
        CHECK(!cancelled, "a receive whose message had arrived (%d bytes) was cancelled", n);
        check_status(&st, peer, tag, n, "a receive that could not be cancelled");
        check_data(rbuf[0], (size_t)n, peer, s, "a receive that could not be cancelled");
    }
    passed();
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-ssend-mrecv")) {
            ssend_mrecv = 0;
        } else {
            if (rank == 0)
                fprintf(stderr, "usage: probes [--no-ssend-mrecv]\n");
            MPI_Finalize();
            return 1;
        }
    }
    if (nranks < 2 || nranks > 256) {
        if (rank == 0)
            fprintf(stderr, "probes: run it on 2 to 256 ranks\n");
        MPI_Finalize();
        return 1;
    }
    signal(SIGALRM, on_alarm);
    peer = rank ^ 1;
    receiver = rank % 2 == 0;
    active = peer < nranks;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (int i = 0; i < 32; i++) {
        sbuf[i] = malloc(MAXMSG + 1);
        rbuf[i] = malloc(MAXMSG + 1);
        if (!sbuf[i] || !rbuf[i])
            fail("out of memory");
    }
    if (rank == 0)
        printf("# probes: %d ranks\n", nranks);
    test_nothing();
    test_iprobe();
    test_probe();
    test_expected_unexpected();
    test_improbe();
    test_order();
    test_fan_in();
    test_truncate();
    test_cancel();
    begin("nothing left over: no flag for MPI_Iprobe(ANY_SOURCE, ANY_TAG)");
    MPI_Barrier(MPI_COMM_WORLD);
    nothing_pending(20);
    passed();
    alarm(0);
    if (rank == 0)
        printf("probes: all checks passed (%d ranks)\n", nranks);
    MPI_Comm_free(&comm);
    for (int i = 0; i < 32; i++)
        free(sbuf[i]), free(rbuf[i]);
    MPI_Finalize();
    return 0;
}
