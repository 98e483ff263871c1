/* The provider, fi_getinfo's answer, the fabric and its event queue.
 *
 * Two answers, as the hints allow: FI_EP_RDM with FI_MSG, FI_TAGGED (FI_DIRECTED_RECV,
 * FI_SOURCE, FI_REMOTE_CQ_DATA), and where the application takes the provider's memory
 * keys (FI_MR_PROV_KEY) FI_RMA and FI_ATOMIC; and FI_EP_MSG with the same but source
 * addresses and directed receives (dfi_cm.c connects it). Manual progress; sends
 * complete as the mailbox completes them (FI_TRANSMIT_COMPLETE: an eager message is in
 * the receiver's ring, a rendezvous one read into the receive's buffer).
 */
#include "dfi.h"

int dfi_nosys() { return -FI_ENOSYS; }
ssize_t dfi_nosys_ssize() { return -FI_ENOSYS; }

int dfi_close_free(struct fid *f) {
    free(f);
    return 0;
}

static struct fi_ops fab_fi_ops = FI_OPS(dfi_close_free, dfi_nosys, dfi_nosys);
static struct fi_ops_fabric fab_ops = {
    .size = sizeof(struct fi_ops_fabric), .domain = dfi_fabric_domain, .passive_ep = dfi_passive_ep,
    .eq_open = dfi_eq_open, .wait_open = (void *)dfi_nosys, .trywait = dfi_trywait,
};

static int prov_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *ctx) {
    (void)attr;
    struct fid_fabric *f = calloc(1, sizeof *f);
    if (!f)
        return -FI_ENOMEM;
    f->fid.fclass = FI_CLASS_FABRIC, f->fid.context = ctx, f->fid.ops = &fab_fi_ops;
    f->ops = &fab_ops, f->api_version = API_VERSION;
    *out = f;
    return 0;
}

#define ONE_SIDED (FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define CAPS                                                                                       \
    (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV | FI_REMOTE_CQ_DATA |   \
     FI_LOCAL_COMM | FI_REMOTE_COMM | ONE_SIDED)

/* One answer of endpoint type `type` (FI_EP_RDM or FI_EP_MSG). */
static int one_info(enum fi_ep_type type, const struct fi_info *hints, struct fi_info **info) {
    if (hints) {
        if ((hints->caps & ~CAPS) ||
            (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != type) ||
            (hints->fabric_attr && hints->fabric_attr->prov_name &&
             !strstr(hints->fabric_attr->prov_name, PROV_NAME)) ||
            (hints->domain_attr && hints->domain_attr->mr_mode & FI_MR_BASIC))
            return -FI_ENODATA;
    }
    /* One-sided operations need the application to take our keys (FI_MR_PROV_KEY);
     * addresses are virtual addresses where it asks for that, offsets otherwise. */
    uint64_t app_mr = hints && hints->domain_attr ? (uint64_t)hints->domain_attr->mr_mode : ~0ull;
    /* A connected endpoint has one peer: no source addresses, no directed receives. */
    uint64_t all = type == FI_EP_MSG ? CAPS & ~(uint64_t)(FI_SOURCE | FI_DIRECTED_RECV) : CAPS;
    uint64_t caps = hints && hints->caps ? hints->caps & all : all;
    if ((caps & ONE_SIDED) && !(app_mr & FI_MR_PROV_KEY)) {
        if (hints && hints->caps)
            return -FI_ENODATA;
        caps &= ~(uint64_t)ONE_SIDED;
    }
    struct fi_info *fi = fi_allocinfo();
    if (!fi)
        return -FI_ENOMEM;
    fi->caps = caps, fi->mode = 0, fi->addr_format = FI_FORMAT_UNSPEC;
    struct fi_tx_attr *t = fi->tx_attr;
    t->caps = caps, t->msg_order = FI_ORDER_SAS, t->comp_order = FI_ORDER_NONE, t->op_flags = FI_TRANSMIT_COMPLETE;
    t->inject_size = 8192 - 64, t->size = 4096, t->iov_limit = IOV_LIMIT, t->rma_iov_limit = 1;
    struct fi_rx_attr *r = fi->rx_attr;
    r->caps = caps, r->msg_order = FI_ORDER_SAS, r->comp_order = FI_ORDER_NONE, r->size = 4096;
    r->iov_limit = IOV_LIMIT;
    struct fi_ep_attr *e = fi->ep_attr;
    e->type = type, e->protocol = FI_PROTO_UNSPEC, e->max_msg_size = MAX_MSG, e->tx_ctx_cnt = 1;
    /* FI_TAG_GENERIC; MSG endpoints keep the top bit for connection management. */
    e->rx_ctx_cnt = 1, e->mem_tag_format = type == FI_EP_MSG ? 0x2AAAAAAAAAAAAAAAull : 0xAAAAAAAAAAAAAAAAull;
    if (type == FI_EP_MSG && hints && hints->dest_addr && hints->dest_addrlen == sizeof(struct dfi_addr) &&
        (fi->dest_addr = malloc(sizeof(struct dfi_addr)))) {
        memcpy(fi->dest_addr, hints->dest_addr, sizeof(struct dfi_addr));
        fi->dest_addrlen = sizeof(struct dfi_addr);
    }
    struct fi_domain_attr *d = fi->domain_attr;
    d->name = strdup(PROV_NAME), d->threading = FI_THREAD_DOMAIN, d->resource_mgmt = FI_RM_ENABLED;
    d->control_progress = FI_PROGRESS_MANUAL, d->data_progress = FI_PROGRESS_MANUAL, d->av_type = FI_AV_UNSPEC;
    d->mr_mode = (caps & ONE_SIDED) ? (int)(FI_MR_PROV_KEY | (app_mr & FI_MR_VIRT_ADDR)) : 0;
    d->mr_key_size = 8, d->cq_data_size = 8, d->cq_cnt = 64, d->ep_cnt = 8, d->tx_ctx_cnt = 8, d->rx_ctx_cnt = 8;
    d->max_ep_tx_ctx = 1, d->max_ep_rx_ctx = 1, d->mr_iov_limit = 1, d->cntr_cnt = 64;
    fi->fabric_attr->name = strdup(PROV_NAME);
    fi->fabric_attr->prov_version = PROV_VERSION, fi->fabric_attr->api_version = API_VERSION;
    *info = fi;
    return 0;
}

/* FI_EP_RDM, then FI_EP_MSG, as the hints allow. */
static int prov_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                        const struct fi_info *hints, struct fi_info **info) {
    (void)version, (void)node, (void)service;
    struct fi_info *rdm = NULL, *msg = NULL;
    /* A utility provider (ofi_rxm) asking for a core to layer its RDM over (libfabric's
     * internal OFI_CORE_PROV_ONLY) gets no MSG endpoint: ours is native RDM, and Open
     * MPI, matching provider names by prefix, would take "deposit;ofi_rxm" first. */
    int layering = !!(flags & (1ULL << 59));
    int a = one_info(FI_EP_RDM, hints, &rdm), b = layering ? -FI_ENODATA : one_info(FI_EP_MSG, hints, &msg);
    if (a && b)
        return a == -FI_ENODATA ? b : a;
    if (rdm)
        rdm->next = msg;
    *info = rdm ? rdm : msg;
    return 0;
}


static struct fi_provider provider = {
    .version = PROV_VERSION, .fi_version = API_VERSION, .name = PROV_NAME, .getinfo = prov_getinfo,
    .fabric = prov_fabric, .cleanup = dfi_cleanup,
};

FI_EXT_INI { return &provider; }
