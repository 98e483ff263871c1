/* The domain: one deposit device per process, opened from the environment (so that
 * mpirun needs no wrapper; "%r" in a value is the rank): DEPOSIT_FI_DEV, DEPOSIT_FI_IP
 * (ADDR or ADDR/PREFIX, IPv4 or IPv6: the node then runs over IPv6; default 10.77.x.y
 * from the rank), DEPOSIT_FI_GATEWAY (of the address's family), DEPOSIT_FI_VLAN, DEPOSIT_FI_NODES (a node table file of static
 * `IP [MAC] UDP-PORT` lines), DEPOSIT_FI_IDENTITY, DEPOSIT_FI_KNOWN_PEERS,
 * DEPOSIT_FI_CC, DEPOSIT_FI_CC_TARGET_US, DEPOSIT_FI_CC_PATHS, DEPOSIT_FI_LINE_MBPS
 * (congestion control), DEPOSIT_FI_STATS (counters and each peer's congestion state
 * at the close; docs/design.md §12).
 * Also here: progress of every endpoint, with a guard thread that takes a turn when
 * no call came for 1 ms (a mailbox may owe its peers a FIN, or a credit read, after
 * the application saw its completion and stopped calling: fi_pingpong blocks in its
 * control socket after its last receive); memory regions (the targets of RMA): the
 * application's buffer exposed by a mailbox of the domain's (dd_mailbox_expose), whose
 * key (FI_MR_PROV_KEY) is the library's, a random service and secret: only its holders
 * reach the region. Its bounds and rights are this device's.
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include "dfi.h"
#include <arpa/inet.h>
#include <time.h>

struct dd_device *dfi_dev;
uint8_t dfi_ip[16];
struct dfi_ep *dfi_eps;
int dfi_virt_addr, dfi_next_service;
uint64_t dfi_events;
pthread_mutex_t dfi_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
unsigned dfi_calls;
static int refs, guard_run;
/* The memory regions are exposed by one mailbox of the domain's own (a ring of two
 * small slots: nothing is sent to it), so that they outlive any endpoint. */
static struct dd_mailbox *regions;
static pthread_t guard;

static void *guard_main(void *arg) {
    (void)arg;
    for (unsigned seen = 0, now; __atomic_load_n(&guard_run, __ATOMIC_RELAXED); seen = now) {
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
        now = __atomic_load_n(&dfi_calls, __ATOMIC_RELAXED);
        if (now == seen && pthread_mutex_trylock(&dfi_lock) == 0) {
            dfi_progress();
            now = dfi_calls;
            pthread_mutex_unlock(&dfi_lock);
        }
    }
    return NULL;
}

static int env_int(const char *const *names, int n, int dflt) {
    for (int i = 0; i < n; i++)
        if (getenv(names[i]))
            return atoi(getenv(names[i]));
    return dflt;
}
static int rank_of(void) { return env_int((const char *[]){"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}, 3, 0); }
static int job_size(void) { return env_int((const char *[]){"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}, 3, 1); }

/* A mailbox's ring slots: DEPOSIT_FI_SLOTS, else 4 per rank, a power of two >= 1024. */
int dfi_slots(void) {
    int s = 1024;
    while (s < 4 * job_size())
        s *= 2;
    return env_int((const char *[]){"DEPOSIT_FI_SLOTS"}, 1, s);
}

/* `s` with every "%r" replaced by the rank. */
static void subst(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 12 < n; s++) {
        if (s[0] == '%' && s[1] == 'r')
            k += (size_t)snprintf(out + k, n - k, "%d", rank_of()), s++;
        else
            out[k++] = *s;
    }
    out[k] = 0;
}

/* `s` as an address of either family: its bytes (4 or 16) into `out`, the family's
 * length returned (an IPv4-mapped IPv6 address is IPv4); 0 when it is neither, or ::
 * (which names no node). */
static int parse_ip(const char *s, uint8_t out[16]) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, zero[16] = {0};
    if (inet_pton(AF_INET, s, out) == 1)
        return 4;
    if (inet_pton(AF_INET6, s, out) != 1 || !memcmp(out, zero, 16))
        return 0;
    if (!memcmp(out, mapped, 12))
        return memmove(out, out + 12, 4), 4;
    return 16;
}

/* Congestion control from DEPOSIT_FI_CC (words, comma-separated: on, off, delay,
 * keep-hold), DEPOSIT_FI_CC_TARGET_US, DEPOSIT_FI_CC_PATHS, DEPOSIT_FI_LINE_MBPS (the
 * device's dd_device_config fields of those names; unset: the defaults). Non-zero,
 * with a message, when one is not what it may be. */
static int cc_settings(struct dd_device_config *cfg) {
    const char *cc = getenv("DEPOSIT_FI_CC");
    if (cc) {
        char words[128];
        snprintf(words, sizeof words, "%s", cc);
        for (char *save = NULL, *w = strtok_r(words, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            if (!strcmp(w, "on"))
                cfg->cc_flags &= ~(uint32_t)DD_CC_OFF;
            else if (!strcmp(w, "off"))
                cfg->cc_flags |= DD_CC_OFF;
            else if (!strcmp(w, "delay"))
                cfg->cc_flags |= DD_CC_DELAY;
            else if (!strcmp(w, "keep-hold"))
                cfg->cc_flags |= DD_CC_KEEP_HOLD;
            else {
                fprintf(stderr, "deposit-fi: DEPOSIT_FI_CC %s: '%s' is none of on, off, delay, keep-hold\n", cc, w);
                return -1;
            }
        }
    }
    static const char *const names[] = {"DEPOSIT_FI_CC_TARGET_US", "DEPOSIT_FI_CC_PATHS", "DEPOSIT_FI_LINE_MBPS"};
    uint32_t *fields[] = {&cfg->cc_target_us, &cfg->cc_paths, &cfg->line_rate_mbps};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (!v)
            continue;
        char *end = NULL;
        unsigned long n = strtoul(v, &end, 10);
        if (end == v || *end || n == 0 || n > UINT32_MAX) {
            fprintf(stderr, "deposit-fi: %s %s is not a positive number\n", names[i], v);
            return -1;
        }
        *fields[i] = (uint32_t)n;
    }
    return 0;
}

int dfi_device_get(void) {
    if (dfi_dev) {
        refs++;
        return 0;
    }
    char port[256], ip[64], identity[256], nodes[256];
    const char *p = getenv("DEPOSIT_FI_DEV"), *i = getenv("DEPOSIT_FI_IP"), *id = getenv("DEPOSIT_FI_IDENTITY");
    subst(p ? p : "memif:/tmp/deposit-fi.sock:%r", port, sizeof port);
    /* memif's role by rank: 0 serves, 1 connects (two ranks). */
    char *role = strrchr(port, ':');
    if (!strncmp(port, "memif:", 6) && role && (!strcmp(role, ":0") || !strcmp(role, ":1")))
        strcpy(role + 1, role[1] == '0' ? "server" : "client");
    int r = rank_of();
    if (i)
        subst(i, ip, sizeof ip);
    else
        snprintf(ip, sizeof ip, "10.77.%d.%d", (r + 1) >> 8, (r + 1) & 255);
    /* ADDR[/PREFIX], IPv4 or IPv6. */
    uint8_t addr[16], g[16] = {0};
    char *slash = strchr(ip, '/'), *end = NULL;
    unsigned long prefix = 0;
    if (slash)
        *slash = 0, prefix = strtoul(slash + 1, &end, 10);
    int fam = parse_ip(ip, addr);
    if (!fam || (slash && (end == slash + 1 || *end || prefix > (fam == 4 ? 32u : 128u)))) {
        if (slash)
            *slash = '/';
        fprintf(stderr, "deposit-fi: DEPOSIT_FI_IP %s is not an IPv4 or IPv6 address[/prefix]\n", ip);
        return -FI_EINVAL;
    }
    const char *gw = getenv("DEPOSIT_FI_GATEWAY"), *nt = getenv("DEPOSIT_FI_NODES");
    if (gw && parse_ip(gw, g) != fam) {
        fprintf(stderr, "deposit-fi: DEPOSIT_FI_GATEWAY %s is not an %s address (DEPOSIT_FI_IP is %s)\n", gw,
                fam == 4 ? "IPv4" : "IPv6", ip);
        return -FI_EINVAL;
    }
    struct dd_device_config cfg;
    dd_device_config_init(&cfg);
    cfg.port = port;
    if (id)
        subst(id, identity, sizeof identity), cfg.identity_path = identity;
    cfg.known_peers_path = getenv("DEPOSIT_FI_KNOWN_PEERS");
    if (fam == 4)
        memcpy(cfg.ip, addr, 4), memcpy(cfg.gateway, g, 4);
    else
        memcpy(cfg.ip6, addr, 16), memcpy(cfg.gateway6, g, 16);
    cfg.prefix_len = (uint32_t)prefix;
    if (getenv("DEPOSIT_FI_VLAN"))
        cfg.vlan = (uint32_t)atoi(getenv("DEPOSIT_FI_VLAN"));
    if (nt)
        subst(nt, nodes, sizeof nodes), cfg.nodes_path = nodes;
    if (cc_settings(&cfg))
        return -FI_EINVAL;
    cfg.max_connections = 4 * (uint32_t)job_size() > 4096 ? 4 * (uint32_t)job_size() : 4096;
    cfg.progress_guard_us = 1000; /* acknowledgements owed while the application calls not */
    /* A memif client whose server (another rank) has not created its socket yet fails
     * at once, and so, now and then, does af_packet on a veth made a moment ago: it
     * tries again for up to 10 s (a port that fails gives back what it created). */
    for (int tries = 0; dd_device_open(&cfg, &dfi_dev) < 0; tries++) {
        if (tries == 200) {
            fprintf(stderr, "deposit-fi: cannot open %s: %s\n", port, dd_last_error());
            dfi_dev = NULL;
            return -FI_ENODEV;
        }
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    /* Endpoint names carry 16 bytes: an IPv4 address IPv4-mapped. */
    if (fam == 4)
        memset(dfi_ip, 0, 10), dfi_ip[10] = dfi_ip[11] = 0xff, memcpy(dfi_ip + 12, addr, 4);
    else
        memcpy(dfi_ip, addr, 16);
    refs = guard_run = 1;
    if (pthread_create(&guard, NULL, guard_main, NULL))
        guard_run = 0;
    return 0;
}

/* Stops the guard thread (at the domain's close, or libfabric's at exit). */
void dfi_cleanup(void) {
    if (guard_run && !(guard_run = 0))
        pthread_join(guard, NULL);
}

static void stat_line(const char *name, uint64_t value, void *arg) {
    if (value)
        fprintf(stderr, "deposit-fi: rank %d %s %llu\n", *(int *)arg, name, (unsigned long long)value);
}

/* Every endpoint's progress, and the regions' mailbox's (it keeps their initiators'
 * connections). */
void dfi_progress(void) {
    LOCK;
    for (struct dfi_ep *ep = dfi_eps; ep; ep = ep->next)
        dfi_ep_progress(ep);
    if (regions)
        dd_mailbox_progress(regions);
}

/* ---- memory regions -------------------------------------------------------------- */

struct mr {
    struct fid_mr fid;
    int exposed;
};

static int mr_close(struct fid *f) {
    LOCK;
    struct mr *m = (struct mr *)f;
    if (m->exposed)
        dd_mailbox_unexpose(regions, m->fid.key);
    free(m);
    return 0;
}

static struct fi_ops mr_fi_ops = FI_OPS(mr_close, dfi_nosys, dfi_nosys);

static int mr_reg(struct fid *dom, const void *buf, size_t len, uint64_t access, uint64_t offset,
                  uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *ctx) {
    (void)dom, (void)offset, (void)requested_key;
    LOCK;
    if (flags)
        return -FI_EBADFLAGS;
    struct mr *m = calloc(1, sizeof *m);
    if (!m)
        return -FI_ENOMEM;
    m->fid.fid.fclass = FI_CLASS_MR, m->fid.fid.context = ctx, m->fid.fid.ops = &mr_fi_ops, m->fid.mem_desc = m;
    uint32_t rights = ((access & FI_REMOTE_READ) ? DD_REMOTE_READ : 0) |
                      ((access & FI_REMOTE_WRITE) ? DD_REMOTE_WRITE | DD_REMOTE_ATOMIC : 0);
    *out = &m->fid;
    if (!rights || !len || !buf) /* local use only: nothing for peers to reach */
        return 0;
    for (uint32_t s = 0x7fff0000u; !regions && s < 0x7fff0010u; s++) {
        struct dd_mailbox_config c;
        dd_mailbox_config_init(&c, s);
        c.slot = 128, c.slots = 2, c.stage = 1, c.burst = 1;
        if (dd_mailbox_open(dfi_dev, &c, &regions) < 0)
            regions = NULL; /* that service is taken: the next */
    }
    if (regions && dd_mailbox_expose(regions, (void *)buf, len, rights, dfi_virt_addr, &m->fid.key) == DD_OK)
        return m->exposed = 1, 0;
    fprintf(stderr, "deposit-fi: memory registration: %s\n", dd_last_error());
    free(m);
    return -FI_ENOMEM;
}

static int mr_regv(struct fid *dom, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
                   uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *ctx) {
    if (count > 1)
        return -FI_EINVAL;
    return mr_reg(dom, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, access, offset, requested_key,
                  flags, out, ctx);
}

static int mr_regattr(struct fid *dom, const struct fi_mr_attr *a, uint64_t flags, struct fid_mr **out) {
    return mr_regv(dom, a->mr_iov, a->iov_count, a->access, a->offset, a->requested_key, flags, out, a->context);
}

/* ---- the domain object ------------------------------------------------------------ */

/* Each peer's congestion state, a line each (DEPOSIT_FI_STATS). */
static void peer_lines(int r) {
    struct dd_peer_info p[64];
    int n = dd_device_peers(dfi_dev, p, 64);
    for (int i = 0; i < n && i < 64; i++) {
        char ip[INET6_ADDRSTRLEN];
        static const uint8_t zero[16];
        if (memcmp(p[i].ip6, zero, 16))
            inet_ntop(AF_INET6, p[i].ip6, ip, sizeof ip);
        else
            inet_ntop(AF_INET, p[i].ip, ip, sizeof ip);
        fprintf(stderr,
                "deposit-fi: rank %d peer %s shard %u window %llu rtt base/smoothed %llu/%llu ns hold %llu ns "
                "marks %llu decreases %llu paths %u (%u in use)\n",
                r, ip, p[i].shard, (unsigned long long)p[i].window, (unsigned long long)p[i].base_rtt_ns,
                (unsigned long long)p[i].srtt_ns, (unsigned long long)p[i].hold_ns, (unsigned long long)p[i].marks,
                (unsigned long long)p[i].decreases, p[i].paths, p[i].paths_in_use);
    }
    if (n > 64)
        fprintf(stderr, "deposit-fi: rank %d and %d peers more\n", r, n - 64);
}

/* Lets go of the device (a domain's or a passive endpoint's hold); the last closes it. */
void dfi_device_put(void) {
    if (dfi_dev && --refs == 0) {
        dfi_cleanup();
        if (getenv("DEPOSIT_FI_STATS")) {
            int r = rank_of();
            dd_device_stats(dfi_dev, stat_line, &r);
            peer_lines(r);
        }
        dd_mailbox_close(regions);
        regions = NULL;
        dd_device_close(dfi_dev);
        dfi_dev = NULL;
    }
}

static int dom_close(struct fid *f) {
    free(f);
    dfi_device_put();
    return 0;
}

static struct fi_ops dom_fi_ops = FI_OPS(dom_close, dfi_nosys, dfi_nosys);
static struct fi_ops_domain dom_ops = {
    .size = sizeof(struct fi_ops_domain), .av_open = dfi_av_open, .cq_open = dfi_cq_open,
    .endpoint = dfi_endpoint, .scalable_ep = (void *)dfi_nosys, .cntr_open = dfi_cntr_open,
    .poll_open = (void *)dfi_nosys, .stx_ctx = (void *)dfi_nosys, .srx_ctx = (void *)dfi_nosys,
    .query_atomic = dfi_query_atomic, .query_collective = (void *)dfi_nosys,
};
static struct fi_ops_mr mr_ops = {sizeof(struct fi_ops_mr), mr_reg, mr_regv, mr_regattr};

int dfi_fabric_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **out, void *ctx) {
    (void)fab;
    dfi_virt_addr = info && info->domain_attr && (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR);
    int rc = dfi_device_get();
    if (rc)
        return rc;
    struct fid_domain *d = calloc(1, sizeof *d);
    if (!d) {
        dom_close(NULL);
        return -FI_ENOMEM;
    }
    d->fid.fclass = FI_CLASS_DOMAIN, d->fid.context = ctx, d->fid.ops = &dom_fi_ops;
    d->ops = &dom_ops, d->mr = &mr_ops;
    *out = d;
    return 0;
}
