/* Address vectors: a table of endpoint names (an IPv6 or IPv4-mapped address and a
 * service number, struct dfi_addr, 20 bytes); fi_addr_t is the index. Entries stay valid until the AV
 * closes (fi_av_remove forgets nothing). Each endpoint maps indices to its mailbox's
 * peer numbers as it first needs them (dfi_ep.c).
 */
#include "dfi.h"
#include <arpa/inet.h>

static int av_insert(struct fid_av *f, const void *addr, size_t count, fi_addr_t *out, uint64_t flags, void *ctx) {
    (void)flags, (void)ctx;
    LOCK;
    struct dfi_av *av = (struct dfi_av *)f;
    for (size_t i = 0; i < count; i++) {
        if (av->n == av->cap) {
            size_t cap = av->cap ? 2 * av->cap : 64;
            struct dfi_addr *t = realloc(av->table, cap * sizeof *t);
            if (!t)
                return (int)i;
            av->table = t, av->cap = cap;
        }
        av->table[av->n] = ((const struct dfi_addr *)addr)[i];
        if (out)
            out[i] = av->n;
        av->n++;
    }
    return (int)count;
}

static int av_remove(struct fid_av *f, fi_addr_t *a, size_t count, uint64_t flags) {
    (void)f, (void)a, (void)count, (void)flags;
    return 0;
}

static int av_lookup(struct fid_av *f, fi_addr_t a, void *addr, size_t *len) {
    struct dfi_av *av = (struct dfi_av *)f;
    if (a >= av->n)
        return -FI_EINVAL;
    size_t have = *len;
    *len = sizeof(struct dfi_addr);
    memcpy(addr, &av->table[a], have < *len ? have : *len);
    return 0;
}

static const char *av_straddr(struct fid_av *f, const void *addr, char *buf, size_t *len) {
    (void)f;
    const struct dfi_addr *a = addr;
    /* deposit://a.b.c.d:SERVICE for an IPv4(-mapped) address, deposit://[v6]:SERVICE */
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char ip[INET6_ADDRSTRLEN], s[96];
    int v4 = !memcmp(a->ip, mapped, sizeof mapped);
    if (!inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? a->ip + 12 : a->ip, ip, sizeof ip))
        strcpy(ip, "?");
    int n = snprintf(s, sizeof s, v4 ? "deposit://%s:%u" : "deposit://[%s]:%u", ip, a->service);
    if (buf && *len)
        snprintf(buf, *len, "%s", s);
    *len = (size_t)n + 1;
    return buf;
}

static int av_close(struct fid *f) {
    free(((struct dfi_av *)f)->table);
    free(f);
    return 0;
}

static struct fi_ops av_fi_ops = FI_OPS(av_close, dfi_nosys, dfi_nosys);
static struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av), .insert = av_insert, .insertsvc = (void *)dfi_nosys,
    .insertsym = (void *)dfi_nosys, .remove = av_remove, .lookup = av_lookup, .straddr = av_straddr,
    .av_set = (void *)dfi_nosys,
};

int dfi_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx) {
    (void)d;
    if (attr && attr->flags & FI_EVENT)
        return -FI_ENOSYS;
    struct dfi_av *av = calloc(1, sizeof *av);
    if (!av)
        return -FI_ENOMEM;
    av->fid.fid.fclass = FI_CLASS_AV, av->fid.fid.context = ctx, av->fid.fid.ops = &av_fi_ops;
    av->fid.ops = &av_ops;
    *out = &av->fid;
    return 0;
}
