/* ddmpi: the project's MPI benchmark and check (OSU's osu_latency, osu_bw and
 * osu_mbw_mr are not packaged on Debian 12; this measures the same things). It is a
 * plain MPI program: it does not know which network carries it.
 *
 *   ddmpi [-n ITERS] [-m MAX_BYTES] [--no-bench]
 *
 * Checks (every rank; any failure aborts with a non-zero status):
 *   - ping-pong payloads: every byte of every size, both directions;
 *   - MPI_Allreduce: sums of doubles and of 64-bit integers against the closed form,
 *     for counts 1 .. 1 Mi;
 *   - MPI_Alltoall: every element from every rank where it belongs;
 *   - a halo exchange: a 1-D domain split over the ranks, 100 steps of a 3-point
 *     stencil with ghost cells exchanged by MPI_Sendrecv, equal to the same stencil
 *     computed serially.
 * Benchmarks (ranks 0 and 1; the others wait):
 *   - latency: RTT/2 of a blocking ping-pong, sizes 0, 1, 2, 4, ... MAX (osu_latency);
 *   - bandwidth: windows of 64 MPI_Isend, then a 4-byte acknowledgement (osu_bw);
 *   - with 4 ranks or more, the aggregate bandwidth and message rate of pairs
 *     (0,n/2), (1,n/2+1), ... sending at once (osu_mbw_mr).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int rank, nranks;

static void fail(const char *what, long a, long b) {
    fprintf(stderr, "ddmpi: rank %d: CHECK FAILED: %s (%ld, %ld)\n", rank, what, a, b);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static uint8_t pattern(size_t i, int from, int k) { return (uint8_t)(i * 131 + from * 17 + k * 7 + 1); }

static void fill(uint8_t *b, size_t n, int from, int k) {
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, from, k);
}

static void check_buf(const uint8_t *b, size_t n, int from, int k, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, from, k))
            fail(what, (long)n, (long)i);
}

/* Iterations for a size: fewer for large messages (as OSU does). */
static int iters_for(size_t size, int iters) {
    return size > 65536 ? (iters / 10 > 10 ? iters / 10 : 10) : iters;
}

static void latency(size_t max, int iters, uint8_t *sbuf, uint8_t *rbuf) {
    if (rank == 0)
        printf("# latency (RTT/2, blocking ping-pong between ranks 0 and 1)\n# %-10s %12s\n", "bytes",
               "usec");
    for (size_t size = 0; size <= max; size = size ? size * 2 : 1) {
        int n = iters_for(size, iters), warm = n / 10 + 10;
        double t0 = 0;
        if (rank <= 1) {
            fill(sbuf, size, rank, (int)size);
            for (int i = 0; i < n + warm; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(sbuf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            check_buf(rbuf, size, 1 - rank, (int)size, "ping-pong payload");
            if (rank == 0)
                printf("  %-10zu %12.2f\n", size, (MPI_Wtime() - t0) * 1e6 / (2.0 * n));
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void bandwidth(size_t max, int iters, uint8_t *sbuf, uint8_t *rbuf) {
    if (rank == 0)
        printf("# bandwidth (windows of %d MPI_Isend from rank 0 to rank 1)\n# %-10s %12s %12s\n",
               WINDOW, "bytes", "MB/s", "Mmsg/s");
    MPI_Request req[WINDOW];
    for (size_t size = 1; size <= max; size *= 2) {
        int n = iters_for(size, iters) / 10 + 2;
        double t0 = 0;
        if (rank <= 1) {
            for (int i = 0; i < n + 1; i++) {
                if (i == 1)
                    t0 = MPI_Wtime();
                for (int w = 0; w < WINDOW; w++) {
                    if (rank == 0)
                        MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
                    else
                        MPI_Irecv(rbuf, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
                }
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                int ack = 0;
                if (rank == 0)
                    MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
            }
            if (rank == 0) {
                double s = MPI_Wtime() - t0, msgs = (double)n * WINDOW;
                printf("  %-10zu %12.2f %12.3f\n", size, msgs * size / s / 1e6, msgs / s / 1e6);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void multi_bw(size_t max, int iters, uint8_t *sbuf, uint8_t *rbuf) {
    int pairs = nranks / 2, peer = rank < pairs ? rank + pairs : rank - pairs;
    if (rank == 0)
        printf("# multi-pair bandwidth (%d pairs at once, windows of %d)\n# %-10s %12s %12s\n", pairs,
               WINDOW, "bytes", "MB/s", "Mmsg/s");
    MPI_Request req[WINDOW];
    for (size_t size = 1; size <= max; size *= 4) {
        int n = iters_for(size, iters) / 10 + 2;
        double t0 = 0;
        if (rank < 2 * pairs) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            for (int i = 0; i < n; i++) {
                for (int w = 0; w < WINDOW; w++) {
                    if (rank < pairs)
                        MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[w]);
                    else
                        MPI_Irecv(rbuf, (int)size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[w]);
                }
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                int ack = 0;
                if (rank < pairs)
                    MPI_Recv(&ack, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Send(&ack, 1, MPI_INT, peer, 5, MPI_COMM_WORLD);
            }
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double mine = MPI_Wtime() - t0, slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double msgs = (double)n * WINDOW * pairs;
            printf("  %-10zu %12.2f %12.3f\n", size, msgs * size / slowest / 1e6, msgs / slowest / 1e6);
        }
    }
}

static void check_allreduce(void) {
    for (int count = 1; count <= (1 << 20); count *= 16) {
        double *d = malloc(sizeof(double) * count), *dr = malloc(sizeof(double) * count);
        int64_t *l = malloc(sizeof(int64_t) * count), *lr = malloc(sizeof(int64_t) * count);
        for (int i = 0; i < count; i++) {
            d[i] = (double)(rank + 1) * (i % 1000 + 1);
            l[i] = (int64_t)(rank + 1) * i - rank;
        }
        MPI_Allreduce(d, dr, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(l, lr, count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        double ranks_sum = (double)nranks * (nranks + 1) / 2;
        for (int i = 0; i < count; i++) {
            if (dr[i] != ranks_sum * (i % 1000 + 1))
                fail("MPI_Allreduce of doubles", count, i);
            if (lr[i] != (int64_t)ranks_sum * i - (int64_t)nranks * (nranks - 1) / 2)
                fail("MPI_Allreduce of int64", count, i);
        }
        free(d), free(dr), free(l), free(lr);
    }
    if (rank == 0)
        printf("check MPI_Allreduce (double and int64 sums, counts 1 .. 1M): OK\n");
}

static void check_alltoall(void) {
    for (int per = 1; per <= 4096; per *= 8) {
        int32_t *s = malloc(sizeof(int32_t) * per * nranks), *r = malloc(sizeof(int32_t) * per * nranks);
        for (int to = 0; to < nranks; to++)
            for (int j = 0; j < per; j++)
                s[to * per + j] = rank * 1000003 + to * 1009 + j;
        MPI_Alltoall(s, per, MPI_INT32_T, r, per, MPI_INT32_T, MPI_COMM_WORLD);
        for (int from = 0; from < nranks; from++)
            for (int j = 0; j < per; j++)
                if (r[from * per + j] != from * 1000003 + rank * 1009 + j)
                    fail("MPI_Alltoall element", from, j);
        free(s), free(r);
    }
    if (rank == 0)
        printf("check MPI_Alltoall (1 .. 4096 int32 per pair, every element): OK\n");
}

/* One step of the stencil on cells 1..n of u (0 and n+1 are ghosts) into v. */
static void stencil(const double *u, double *v, int n) {
    for (int i = 1; i <= n; i++)
        v[i] = 0.25 * u[i - 1] + 0.5 * u[i] + 0.25 * u[i + 1];
}

static double initial(long g) { return (double)((g * 7919) % 1000) / 10.0; }

static void check_halo(void) {
    const int local = 4096, steps = 100;
    long total = (long)local * nranks, first = (long)local * rank;
    double *u = calloc(local + 2, sizeof(double)), *v = calloc(local + 2, sizeof(double));
    for (int i = 1; i <= local; i++)
        u[i] = initial(first + i - 1);
    int left = rank > 0 ? rank - 1 : MPI_PROC_NULL, right = rank < nranks - 1 ? rank + 1 : MPI_PROC_NULL;
    for (int s = 0; s < steps; s++) {
        /* Fixed boundaries (0) at the ends of the whole domain. */
        u[0] = 0, u[local + 1] = 0;
        MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 6, &u[local + 1], 1, MPI_DOUBLE, right, 6, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&u[local], 1, MPI_DOUBLE, right, 7, &u[0], 1, MPI_DOUBLE, left, 7, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        stencil(u, v, local);
        double *t = u;
        u = v, v = t;
    }
    /* The same computation serially, on rank 0, over the whole domain. */
    double *all = rank == 0 ? malloc(sizeof(double) * total) : NULL;
    MPI_Gather(&u[1], local, MPI_DOUBLE, all, local, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double *a = calloc(total + 2, sizeof(double)), *b = calloc(total + 2, sizeof(double));
        for (long g = 0; g < total; g++)
            a[g + 1] = initial(g);
        for (int s = 0; s < steps; s++) {
            a[0] = 0, a[total + 1] = 0;
            stencil(a, b, (int)total);
            double *t = a;
            a = b, b = t;
        }
        for (long g = 0; g < total; g++)
            if (all[g] != a[g + 1])
                fail("halo exchange: a cell differs from the serial stencil", g, steps);
        printf("check halo exchange (%d ranks x %d cells, %d steps, equal to the serial stencil): OK\n",
               nranks, local, steps);
        free(a), free(b), free(all);
    }
    free(u), free(v);
}

int main(int argc, char **argv) {
    int iters = 1000, bench = 1;
    size_t max = 1 << 20;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            max = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-bench"))
            bench = 0;
        else {
            if (rank == 0)
                fprintf(stderr, "usage: ddmpi [-n ITERS] [-m MAX_BYTES] [--no-bench]\n");
            MPI_Finalize();
            return 1;
        }
    }
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "ddmpi: run it on 2 ranks or more\n");
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("# ddmpi: %d ranks\n", nranks);
    check_allreduce();
    check_alltoall();
    check_halo();
    if (bench) {
        uint8_t *sbuf = malloc(max + 1), *rbuf = malloc(max + 1);
        fill(sbuf, max, rank, 0);
        latency(max, iters, sbuf, rbuf);
        bandwidth(max, iters, sbuf, rbuf);
        if (nranks >= 4)
            multi_bw(max, iters, sbuf, rbuf);
        free(sbuf), free(rbuf);
    }
    MPI_Finalize();
    return 0;
}
