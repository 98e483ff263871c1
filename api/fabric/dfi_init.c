/* The provider, fi_getinfo's answer, the fabric and its event queue.
 *
 * One answer: FI_EP_RDM with FI_MSG, FI_TAGGED (FI_DIRECTED_RECV, FI_SOURCE,
 * FI_REMOTE_CQ_DATA), and where the application takes the provider's memory keys
 * (FI_MR_PROV_KEY) FI_RMA and FI_ATOMIC; manual progress; sends complete as the
 * mailbox completes them (FI_TRANSMIT_COMPLETE: an eager message is in the receiver's
 * ring, a rendezvous one read into the receive's buffer). Event queues stay empty (an
 * RDM endpoint reports no connection events; fi_pingpong opens one anyway).
 */
#include "dfi.h"
#include <time.h>

int dfi_nosys() { return -FI_ENOSYS; }
ssize_t dfi_nosys_ssize() { return -FI_ENOSYS; }

int dfi_close_free(struct fid *f) {
    free(f);
    return 0;
}

static ssize_t eq_empty() { return -FI_EAGAIN; }
static ssize_t eq_sread(struct fid_eq *eq, uint32_t *ev, void *buf, size_t len, int timeout, uint64_t flags) {
    (void)eq, (void)ev, (void)buf, (void)len, (void)flags;
    if (timeout > 0)
        nanosleep(&(struct timespec){timeout / 1000, (long)(timeout % 1000) * 1000000}, NULL);
    return -FI_EAGAIN;
}
static struct fi_ops eq_fi_ops = FI_OPS(dfi_close_free, dfi_nosys, dfi_nosys);
static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq), .read = (void *)eq_empty, .readerr = (void *)eq_empty,
    .write = (void *)dfi_nosys_ssize,
    .sread = eq_sread, .strerror = (void *)dfi_strerror,
};

static int fab_eq_open(struct fid_fabric *fab, struct fi_eq_attr *attr, struct fid_eq **out, void *ctx) {
    (void)fab, (void)attr;
    struct fid_eq *eq = calloc(1, sizeof *eq);
    if (!eq)
        return -FI_ENOMEM;
    eq->fid.fclass = FI_CLASS_EQ, eq->fid.context = ctx, eq->fid.ops = &eq_fi_ops, eq->ops = &eq_ops;
    *out = eq;
    return 0;
}

static struct fi_ops fab_fi_ops = FI_OPS(dfi_close_free, dfi_nosys, dfi_nosys);
static struct fi_ops_fabric fab_ops = {
    .size = sizeof(struct fi_ops_fabric), .domain = dfi_fabric_domain, .passive_ep = (void *)dfi_nosys,
    .eq_open = fab_eq_open, .wait_open = (void *)dfi_nosys, .trywait = dfi_trywait,
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

static int prov_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                        const struct fi_info *hints, struct fi_info **info) {
    (void)version, (void)node, (void)service, (void)flags;
    if (hints) {
        if ((hints->caps & ~CAPS) ||
            (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM) ||
            (hints->fabric_attr && hints->fabric_attr->prov_name &&
             !strstr(hints->fabric_attr->prov_name, PROV_NAME)) ||
            (hints->domain_attr && hints->domain_attr->mr_mode & FI_MR_BASIC))
            return -FI_ENODATA;
    }
    /* One-sided operations need the application to take our keys (FI_MR_PROV_KEY);
     * addresses are virtual addresses where it asks for that, offsets otherwise. */
    uint64_t app_mr = hints && hints->domain_attr ? (uint64_t)hints->domain_attr->mr_mode : ~0ull;
    uint64_t caps = hints && hints->caps ? hints->caps : CAPS;
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
    e->type = FI_EP_RDM, e->protocol = FI_PROTO_UNSPEC, e->max_msg_size = MAX_MSG, e->tx_ctx_cnt = 1;
    e->rx_ctx_cnt = 1, e->mem_tag_format = 0xAAAAAAAAAAAAAAAAull; /* FI_TAG_GENERIC */
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


static struct fi_provider provider = {
    .version = PROV_VERSION, .fi_version = API_VERSION, .name = PROV_NAME, .getinfo = prov_getinfo,
    .fabric = prov_fabric, .cleanup = dfi_cleanup,
};

FI_EXT_INI { return &provider; }
