/* hello.c: deposit from C. Two nodes in one process (the two sides of an in-process
 * ring pair, no setup), then: a 4 KiB write checked at the receiver, a read of it
 * back, a fetch-and-add, a write the receiver refuses (its completion names the
 * receiver's reason), a secure connection to the server's pinned identity key, and the
 * device counters.
 *
 *   scripts/capi.sh        # builds libdeposit and this example, and runs it
 *   gcc hello.c $(pkg-config --cflags --libs deposit) -o hello
 *
 * If you know verbs: a dd_device is an opened device plus its protection domain, a
 * dd_endpoint a registered memory region (addressed by offset), a dd_conn a connected
 * queue pair, DD_OP_WRITE IBV_WR_RDMA_WRITE; dd_listen/dd_accept/dd_connect play
 * rdma_cm's part. Every call returns DD_OK or a negative DD_ERR_* code, and
 * dd_last_error() says why.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir */
#include <deposit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 4096
#define SERVICE 1
#define T_MS 5000

/* Fails the example with the library's message. */
#define CHECK(call)                                                                 \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ < 0) {                                                              \
            fprintf(stderr, "hello.c: %s failed (%d): %s\n", #call, rc_, dd_last_error()); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "hello.c: FAILED: %s\n", what);
    exit(1);
}

/* Waits for the completion of `wr_id` and checks it succeeded. */
static struct dd_completion complete(struct dd_cq *cq, uint64_t wr_id) {
    struct dd_completion wc;
    CHECK(dd_cq_wait(cq, &wc, T_MS));
    if (wc.wr_id != wr_id || wc.status != DD_WC_SUCCESS) {
        fprintf(stderr, "hello.c: request %llu completed with %s\n",
                (unsigned long long)wc.wr_id, dd_wc_status_str(wc.status));
        exit(1);
    }
    return wc;
}

static void print_counter(const char *name, uint64_t value, void *arg) {
    int *shown = arg;
    if (value != 0 && (*shown)++ < 6)
        printf("hello.c:   %s = %llu\n", name, (unsigned long long)value);
}

/* Prints a device's identity key as its operator would hand it out. */
static void print_identity(const char *who, const uint8_t key[DD_KEY_LEN]) {
    char text[DD_KEY_BASE64_LEN];
    CHECK(dd_key_to_base64(key, text, sizeof text));
    printf("hello.c: %s identity key %s\n", who, text);
}

int main(void) {
    /* The server keeps its identity key pair in a file (made, mode 0600, when
     * missing), as a node whose key clients pin does; the client gets a fresh one. */
    char dir[] = "/tmp/deposit-hello.XXXXXX", key_file[64];
    if (!mkdtemp(dir))
        fail("mkdtemp");
    snprintf(key_file, sizeof key_file, "%s/identity", dir);
    struct dd_device_config cfg;
    struct dd_device *server, *client;
    CHECK(dd_device_config_init(&cfg));
    cfg.port = "ring:chello:a";
    memcpy(cfg.ip, (uint8_t[4]){10, 0, 0, 1}, 4);
    cfg.identity_path = key_file;
    CHECK(dd_device_open(&cfg, &server));
    cfg.port = "ring:chello:b";
    cfg.ip[3] = 2;
    cfg.identity_path = NULL;
    CHECK(dd_device_open(&cfg, &client));
    uint8_t server_key[DD_KEY_LEN], client_key[DD_KEY_LEN], key[DD_KEY_LEN];
    CHECK(dd_device_identity(server, server_key));
    CHECK(dd_device_identity(client, client_key));
    print_identity("server", server_key);
    print_identity("client", client_key);
    /* Text and back (what a configuration file or command line gives). */
    char text[DD_KEY_BASE64_LEN];
    CHECK(dd_key_to_base64(server_key, text, sizeof text));
    CHECK(dd_key_from_base64(text, key));
    if (memcmp(key, server_key, DD_KEY_LEN) != 0)
        fail("the server's key does not come back from its base64");

    /* Server: an endpoint peers may write, read and run atomics on. */
    struct dd_endpoint *sep, *cep, *ro;
    struct dd_cq *scq, *ccq;
    struct dd_listener *listener;
    CHECK(dd_endpoint_alloc(server, 2 * LEN, DD_REMOTE_READ | DD_REMOTE_WRITE | DD_REMOTE_ATOMIC, &sep));
    CHECK(dd_cq_create(server, 16, &scq));
    CHECK(dd_listen(server, SERVICE, sep, scq, NULL, &listener));
    /* Client: local memory (a source needs no remote right) and a completion queue. */
    CHECK(dd_endpoint_alloc(client, 2 * LEN, 0, &cep));
    CHECK(dd_cq_create(client, 16, &ccq));
    struct dd_conn *conn, *accepted;
    const uint8_t server_ip[4] = {10, 0, 0, 1};
    CHECK(dd_connect(client, server_ip, SERVICE, cep, ccq, NULL, &conn));
    CHECK(dd_accept(listener, T_MS, &accepted));
    uint32_t local, remote;
    CHECK(dd_conn_numbers(conn, &local, &remote));
    printf("hello.c: connected (client connection %u, server's %u)\n", local, remote);

    /* A 4 KiB write from the client's offset 0 to the server's offset 0. */
    uint8_t data[LEN], got[LEN];
    for (int i = 0; i < LEN; i++)
        data[i] = (uint8_t)((i % 251) ^ 0x5a);
    CHECK(dd_endpoint_write(cep, 0, data, LEN));
    struct dd_wr wr = {0};
    wr.wr_id = 7;
    wr.opcode = DD_OP_WRITE;
    wr.flags = DD_WR_SIGNALED;
    wr.local = cep;
    wr.length = LEN;
    CHECK(dd_post(conn, &wr));
    complete(ccq, 7);
    CHECK(dd_endpoint_read(sep, 0, got, LEN));
    if (memcmp(got, data, LEN) != 0)
        fail("the server's memory does not hold the written bytes");
    printf("hello.c: %d bytes written and found at the receiver\n", LEN);

    /* Read them back into the client's second half. */
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 8;
    wr.opcode = DD_OP_READ;
    wr.flags = DD_WR_SIGNALED;
    wr.local = cep;
    wr.local_offset = LEN;
    wr.length = LEN;
    CHECK(dd_post(conn, &wr));
    complete(ccq, 8);
    CHECK(dd_endpoint_read(cep, LEN, got, LEN));
    if (memcmp(got, data, LEN) != 0)
        fail("the read brought other bytes");
    printf("hello.c: read back %d bytes\n", LEN);

    /* Fetch-and-add 5 on the server's word at 4096 (8-aligned), twice. */
    for (int k = 0; k < 2; k++) {
        memset(&wr, 0, sizeof wr);
        wr.wr_id = 9 + k;
        wr.opcode = DD_OP_FETCH_ADD;
        wr.flags = DD_WR_SIGNALED;
        wr.local = cep;
        wr.local_offset = 0;
        wr.remote_offset = LEN;
        wr.add = 5;
        CHECK(dd_post(conn, &wr));
        complete(ccq, 9 + k);
        uint64_t old;
        CHECK(dd_endpoint_load_u64(cep, 0, &old));
        if (old != (uint64_t)(5 * k))
            fail("the fetch-and-add returned another old value");
    }
    uint64_t word;
    CHECK(dd_endpoint_load_u64(sep, LEN, &word));
    if (word != 10)
        fail("the server's word is not 10");
    printf("hello.c: fetch-and-add twice: the server's word is %llu\n", (unsigned long long)word);

    /* A second connection into a read-only endpoint: the write is refused, and the
     * completion names the receiver's reason. */
    struct dd_listener *rl;
    struct dd_conn *rconn, *raccepted;
    CHECK(dd_endpoint_alloc(server, LEN, DD_REMOTE_READ, &ro));
    CHECK(dd_listen(server, SERVICE + 1, ro, scq, NULL, &rl));
    CHECK(dd_connect(client, server_ip, SERVICE + 1, cep, ccq, NULL, &rconn));
    CHECK(dd_accept(rl, T_MS, &raccepted));
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 11;
    wr.opcode = DD_OP_WRITE;
    wr.flags = DD_WR_SIGNALED;
    wr.local = cep;
    wr.length = 64;
    CHECK(dd_post(rconn, &wr));
    struct dd_completion wc;
    CHECK(dd_cq_wait(ccq, &wc, T_MS));
    if (wc.status == DD_WC_SUCCESS || wc.remote_reason < 0)
        fail("a write into a read-only endpoint was not refused with a reason");
    printf("hello.c: a write into a read-only endpoint: %s (%s)\n", dd_wc_status_str(wc.status),
           dd_drop_reason_str(wc.remote_reason));

    /* A bad argument is a code and a message, never a crash. */
    if (dd_endpoint_write(sep, 2 * LEN, data, 1) != DD_ERR_INVALID)
        fail("a write past the endpoint's end was not DD_ERR_INVALID");
    printf("hello.c: past the end: %s\n", dd_last_error());

    /* A secure connection: every frame sealed (AES-256-GCM), keys agreed at connect
     * with a pre-shared key both sides hold, and the server's identity key pinned by
     * the client (as an operator hands it out: here, from the same process). */
    uint8_t psk[DD_PSK_LEN], other[DD_PSK_LEN];
    for (int i = 0; i < (int)DD_PSK_LEN; i++) {
        psk[i] = (uint8_t)(i * 7 + 1);
        other[i] = (uint8_t)(i * 7 + 2);
    }
    struct dd_conn_options sopts = {0};
    sopts.secure = true;
    sopts.psk = psk;
    struct dd_listener *sl;
    struct dd_conn *sconn, *saccepted, *bad;
    CHECK(dd_listen(server, SERVICE + 2, sep, scq, &sopts, &sl));
    /* Without the server's key (pinned, in a known-peers file, or taken on first
     * use) a secure connect is refused at once: nothing would prove who answered. */
    if (dd_connect(client, server_ip, SERVICE + 2, cep, ccq, &sopts, &bad) != DD_ERR_INVALID)
        fail("a secure connect without the server's key was not DD_ERR_INVALID");
    printf("hello.c: a secure connect without the server's key: %s\n", dd_last_error());
    sopts.peer_key = server_key;
    CHECK(dd_connect(client, server_ip, SERVICE + 2, cep, ccq, &sopts, &sconn));
    CHECK(dd_accept(sl, T_MS, &saccepted));
    if (!dd_conn_is_secure(sconn) || !dd_conn_is_secure(saccepted))
        fail("the connection is not sealed");
    CHECK(dd_conn_peer_key(sconn, key));
    if (memcmp(key, server_key, DD_KEY_LEN) != 0 || !dd_conn_peer_key_verified(sconn))
        fail("the client's connection does not hold the server's verified key");
    CHECK(dd_conn_peer_key(saccepted, key));
    if (memcmp(key, client_key, DD_KEY_LEN) != 0)
        fail("the server's connection does not hold the client's key");
    printf("hello.c: the handshake proved the server's pinned key, and the client's\n");
    for (int i = 0; i < LEN; i++)
        data[i] = (uint8_t)(i * 13 + 3);
    CHECK(dd_endpoint_write(cep, 0, data, LEN));
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 30;
    wr.opcode = DD_OP_WRITE;
    wr.flags = DD_WR_SIGNALED;
    wr.local = cep;
    wr.remote_offset = LEN;
    wr.length = LEN;
    CHECK(dd_post(sconn, &wr));
    complete(ccq, 30);
    CHECK(dd_endpoint_read(sep, LEN, got, LEN));
    if (memcmp(got, data, LEN) != 0)
        fail("the sealed write brought other bytes");
    printf("hello.c: %d bytes written over a secure connection\n", LEN);
    sopts.psk = other;
    if (dd_connect(client, server_ip, SERVICE + 2, cep, ccq, &sopts, &bad) != DD_ERR_REJECTED)
        fail("a connect with another pre-shared key was not refused");
    printf("hello.c: another pre-shared key: %s\n", dd_last_error());
    dd_conn_close(sconn);
    dd_conn_close(saccepted);
    dd_listener_close(sl);

    int shown = 0;
    printf("hello.c: some of the server's counters:\n");
    CHECK(dd_device_stats(server, print_counter, &shown));

    dd_conn_close(rconn);
    dd_conn_close(raccepted);
    dd_listener_close(rl);
    dd_conn_close(conn);
    dd_conn_close(accepted);
    dd_listener_close(listener);
    dd_cq_destroy(scq);
    dd_cq_destroy(ccq);
    dd_endpoint_free(ro);
    dd_endpoint_free(sep);
    dd_endpoint_free(cep);
    dd_device_close(client);
    dd_device_close(server);
    remove(key_file);
    rmdir(dir);
    printf("hello.c: OK\n");
    return 0;
}
