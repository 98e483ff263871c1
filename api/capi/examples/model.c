/* model.c: the hybrid deposit model from C — what verbs cannot express.
 *
 *  1. A receive queue the receiver manages: three SENDs (one dd_post_list call) land
 *     in consecutive slots by post-increment of the receiver's register r0, which the
 *     sender may use but never read (DD_REG_INDIRECT). Each also adds 1 to the
 *     receiver's counter r2, and the receiver is interrupted only when r2 reaches
 *     its level r3 (a conditional): one event for three messages.
 *  2. An instruction pointer on an isolated connection: the sender names only the
 *     receiver's entry point and brings 8 bytes; the instruction decides where they
 *     land. A plain write on that connection is refused.
 *  3. A payload token: the receiver hands out a single-use, keyed token for 64 bytes
 *     of its memory; the deposit with it raises a token event, a second one is
 *     refused.
 *
 *   scripts/capi.sh        # builds libdeposit and the examples, and runs them
 */
#include <deposit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_MS 5000
#define QUEUE 0    /* the receive queue's base in the server's endpoint */
#define STRIDE 64
#define LANDING 4096 /* where the instruction writes */
#define TOKEN_AT 8192

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ < 0) {                                                               \
            fprintf(stderr, "model.c: %s failed (%d): %s\n", #call, rc_, dd_last_error()); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void fail(const char *what) {
    fprintf(stderr, "model.c: FAILED: %s\n", what);
    exit(1);
}

static struct dd_completion wait_wc(struct dd_cq *cq) {
    struct dd_completion wc;
    CHECK(dd_cq_wait(cq, &wc, T_MS));
    return wc;
}

int main(void) {
    struct dd_device_config cfg;
    struct dd_device *server, *client;
    CHECK(dd_device_config_init(&cfg));
    cfg.port = "ring:cmodel:a";
    memcpy(cfg.ip, (uint8_t[4]){10, 0, 0, 1}, 4);
    CHECK(dd_device_open(&cfg, &server));
    cfg.port = "ring:cmodel:b";
    cfg.ip[3] = 2;
    CHECK(dd_device_open(&cfg, &client));
    const uint8_t server_ip[4] = {10, 0, 0, 1};

    struct dd_endpoint *sep, *cep;
    struct dd_cq *scq, *ccq;
    CHECK(dd_endpoint_alloc(server, 16384, DD_REMOTE_WRITE, &sep));
    CHECK(dd_endpoint_alloc(client, 4096, 0, &cep));
    CHECK(dd_cq_create(server, 16, &scq));
    CHECK(dd_cq_create(client, 64, &ccq));
    struct dd_eventq *events;
    CHECK(dd_endpoint_events(sep, false, &events));

    /* 1. The receiver's registers: r0 queue pointer, r1 stride, r2 counter, r3 level. */
    struct dd_regwin regs;
    CHECK(dd_alloc_registers(sep, 4, &regs));
    CHECK(dd_write_register(server, regs, 0, QUEUE));
    CHECK(dd_write_register(server, regs, 1, STRIDE));
    CHECK(dd_write_register(server, regs, 3, 3));
    CHECK(dd_set_register_protection(server, regs, 0, DD_REG_INDIRECT));
    CHECK(dd_set_register_protection(server, regs, 2, DD_REG_WRITE));
    struct dd_conn_options opts = {0};
    opts.registers = regs;
    struct dd_listener *l1;
    struct dd_conn *c1, *a1;
    CHECK(dd_listen(server, 1, sep, scq, &opts, &l1));
    CHECK(dd_connect(client, server_ip, 1, cep, ccq, NULL, &c1));
    CHECK(dd_accept(l1, T_MS, &a1));

    struct dd_wr sends[3];
    memset(sends, 0, sizeof sends);
    for (int i = 0; i < 3; i++) {
        char msg[16] = {0};
        snprintf(msg, sizeof msg, "message %d", i);
        CHECK(dd_endpoint_write(cep, 16 * i, msg, sizeof msg));
        struct dd_wr *w = &sends[i];
        w->wr_id = 100 + i;
        w->opcode = DD_OP_SEND;
        w->flags = DD_WR_SIGNALED | DD_WR_OPERAND;
        w->local = cep;
        w->local_offset = 16 * i;
        w->length = 16;
        w->queue = 0;
        w->addr.operand = 1;
        w->addr.op1 = (struct dd_regop){.op = 4 /* ADD */, .dst = 2, .src_is_reg = false};
        w->addr.cond = (struct dd_cond){.cond = 6 /* GE */, .reg = 2, .rhs_is_reg = true, .rhs_reg = 3};
        w->addr.order = 2; /* the conditional after the register operations */
    }
    CHECK(dd_post_list(c1, sends, 3));
    for (int i = 0; i < 3; i++) {
        struct dd_completion wc = wait_wc(ccq);
        if (wc.status != DD_WC_SUCCESS)
            fail("a SEND did not succeed");
    }
    for (int i = 0; i < 3; i++) {
        char got[16], want[16] = {0};
        snprintf(want, sizeof want, "message %d", i);
        CHECK(dd_endpoint_read(sep, QUEUE + STRIDE * i, got, sizeof got));
        if (memcmp(got, want, sizeof want) != 0)
            fail("a SEND is not in its queue slot");
    }
    uint64_t ptr, count;
    CHECK(dd_read_register(server, regs, 0, &ptr));
    CHECK(dd_read_register(server, regs, 2, &count));
    struct dd_event ev;
    CHECK(dd_eventq_wait(events, &ev, T_MS));
    if (ev.kind != DD_EVENT_INTERRUPT || ev.regs[3] != 3)
        fail("the third SEND raised no interrupt with r2 = 3");
    if (dd_eventq_poll(events, &ev) != 0)
        fail("more than one interrupt for three SENDs");
    printf("model.c: 3 SENDs in slots 0..2 (r0 now %llu), counter %llu, one interrupt\n",
           (unsigned long long)ptr, (unsigned long long)count);

    /* 2. An entry point: WRITE at LANDING, every operand the instruction's. */
    struct dd_instr_window *code;
    struct dd_instr ins = {0};
    uint32_t ip;
    ins.opcode = DD_OP_WRITE;
    ins.remote_offset = LANDING;
    CHECK(dd_alloc_instructions(server, sep, 1, &code));
    CHECK(dd_program(server, code, 0, &ins, 1, &ip));
    struct dd_conn_options iso = {0};
    iso.instructions = code;
    iso.isolated = true;
    struct dd_listener *l2;
    struct dd_conn *c2, *a2;
    CHECK(dd_listen(server, 2, sep, scq, &iso, &l2));
    CHECK(dd_connect(client, server_ip, 2, cep, ccq, NULL, &c2));
    CHECK(dd_accept(l2, T_MS, &a2));
    struct dd_wr inv = {0};
    inv.wr_id = 200;
    inv.opcode = DD_OP_INVOKE_INLINE;
    inv.flags = DD_WR_SIGNALED;
    inv.ip = ip;
    inv.inline_data = "invoked";
    inv.inline_len = 8;
    CHECK(dd_post(c2, &inv));
    if (wait_wc(ccq).status != DD_WC_SUCCESS)
        fail("the invoke did not succeed");
    char landed[8];
    CHECK(dd_endpoint_read(sep, LANDING, landed, sizeof landed));
    if (strcmp(landed, "invoked") != 0)
        fail("the instruction did not write at its offset");
    struct dd_wr plain = {0};
    plain.wr_id = 201;
    plain.opcode = DD_OP_WRITE_INLINE;
    plain.flags = DD_WR_SIGNALED;
    plain.inline_data = "no";
    plain.inline_len = 3;
    plain.remote_offset = LANDING;
    CHECK(dd_post(c2, &plain));
    struct dd_completion wc = wait_wc(ccq);
    if (wc.status == DD_WC_SUCCESS)
        fail("a plain write on an isolated connection was not refused");
    printf("model.c: invoke of entry point %u wrote \"%s\"; a plain write: %s (%s)\n", ip, landed,
           dd_wc_status_str(wc.status), dd_drop_reason_str(wc.remote_reason));

    /* 3. A payload token for 64 bytes at TOKEN_AT, used once. */
    uint64_t token;
    CHECK(dd_create_token(server, sep, TOKEN_AT, 64, &token));
    CHECK(dd_endpoint_write(cep, 0, "with a token", 13));
    struct dd_wr dep = {0};
    dep.wr_id = 300;
    dep.opcode = DD_OP_WRITE_TOKEN;
    dep.flags = DD_WR_SIGNALED;
    dep.local = cep;
    dep.length = 13;
    dep.token = token;
    CHECK(dd_post(c1, &dep));
    if (wait_wc(ccq).status != DD_WC_SUCCESS)
        fail("the token deposit did not succeed");
    CHECK(dd_eventq_wait(events, &ev, T_MS));
    if (ev.kind != DD_EVENT_TOKEN || !ev.key_ok || ev.ea != TOKEN_AT || ev.len != 13)
        fail("no token event for the deposit");
    char tok[13];
    CHECK(dd_endpoint_read(sep, TOKEN_AT, tok, sizeof tok));
    if (strcmp(tok, "with a token") != 0)
        fail("the token's deposit is not where the token points");
    printf("model.c: token deposit of %u bytes at %llu (event, key accepted)\n", ev.len,
           (unsigned long long)ev.ea);

    dd_conn_close(c2);
    dd_conn_close(a2);
    dd_listener_close(l2);
    dd_instr_window_release(code);
    dd_conn_close(c1);
    dd_conn_close(a1);
    dd_listener_close(l1);
    dd_eventq_release(events);
    dd_cq_destroy(scq);
    dd_cq_destroy(ccq);
    dd_endpoint_free(sep);
    dd_endpoint_free(cep);
    dd_device_close(client);
    dd_device_close(server);
    printf("model.c: OK\n");
    return 0;
}
