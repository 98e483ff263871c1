#include <rte_config.h>
#include <rte_cycles.h>
#include <errno.h>
#include <rte_errno.h>
#include <rte_interrupts.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <string.h>
#include "shim.h"

uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{ return rte_eth_rx_burst(port, queue, pkts, n); }
uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{ return rte_eth_tx_burst(port, queue, pkts, n); }
struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count)
{ return rte_pktmbuf_alloc_bulk(mp, mbufs, count); }
void shim_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count) { rte_pktmbuf_free_bulk(mbufs, count); }
uint8_t *shim_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, uint8_t *); }
uint16_t shim_pktmbuf_data_len(const struct rte_mbuf *m) { return m->data_len; }
uint32_t shim_pktmbuf_pkt_len(const struct rte_mbuf *m) { return m->pkt_len; }
uint16_t shim_pktmbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }
void shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len) { m->data_len = len; m->pkt_len = len; }
uint16_t shim_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
uint8_t *shim_pktmbuf_data(struct rte_mbuf *m, uint16_t *len, uint8_t *single)
{
	*len = m->data_len;
	*single = m->nb_segs == 1;
	return rte_pktmbuf_mtod(m, uint8_t *);
}
uint8_t *shim_pktmbuf_room(struct rte_mbuf *m, uint16_t *room)
{
	*room = m->data_len + rte_pktmbuf_tailroom(m);
	return rte_pktmbuf_mtod(m, uint8_t *);
}
uint32_t shim_pktmbuf_copy_out(const struct rte_mbuf *m, uint8_t *dst, uint32_t cap)
{
	uint32_t done = 0;
	for (; m != NULL && done < cap; m = m->next) {
		uint32_t n = m->data_len;
		if (n > cap - done)
			n = cap - done;
		rte_memcpy(dst + done, rte_pktmbuf_mtod(m, const uint8_t *), n);
		done += n;
	}
	return done;
}
int shim_pktmbuf_chain_external(struct rte_mbuf *m, uint16_t len, uint16_t at, uint8_t *ext,
				uint16_t ext_len, void (*free_cb)(void *, void *), void *opaque)
{
	struct rte_mbuf *seg[2];
	uint16_t tail = len - at - ext_len;

	if (at > len || ext_len > len - at || len > m->data_len + rte_pktmbuf_tailroom(m))
		return -1;
	if (rte_pktmbuf_alloc_bulk(m->pool, seg, 2) != 0)
		return -1;
	struct rte_mbuf *x = seg[0], *t = seg[1];
	/* x's own data room is unused while the payload is attached, and still x's when
	 * the callback runs (as x is freed): its shared info goes there. */
	struct rte_mbuf_ext_shared_info *sh = rte_pktmbuf_mtod(x, struct rte_mbuf_ext_shared_info *);
	sh->free_cb = free_cb;
	sh->fcb_opaque = opaque;
	rte_mbuf_ext_refcnt_set(sh, 1);
	rte_pktmbuf_attach_extbuf(x, ext, (rte_iova_t)(uintptr_t)ext, ext_len, sh);
	x->data_len = ext_len;
	rte_memcpy(rte_pktmbuf_mtod(t, uint8_t *), rte_pktmbuf_mtod(m, uint8_t *) + at + ext_len, tail);
	t->data_len = tail;
	m->data_len = at;
	m->pkt_len = len;
	m->next = x;
	x->next = t;
	m->nb_segs = 3;
	return 0;
}
uint64_t shim_rdtsc(void) { return rte_rdtsc(); }
uint64_t shim_get_tsc_hz(void) { return rte_get_tsc_hz(); }
unsigned shim_lcore_id(void) { return rte_lcore_id(); }
int shim_errno(void) { return rte_errno; }
void shim_pause(void) { rte_pause(); }

/* Registers `cb(arg)` as an EAL interrupt-thread callback for the readable file
 * descriptor `fd` (an external source: the EAL never reads it). The handle lives for
 * the process. Returns 0 or a negative errno. */
int shim_intr_register_ext(int fd, void (*cb)(void *), void *arg)
{
	struct rte_intr_handle *h = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
	if (h == NULL)
		return -ENOMEM;
	if (rte_intr_fd_set(h, fd) != 0 || rte_intr_type_set(h, RTE_INTR_HANDLE_EXT) != 0) {
		rte_intr_instance_free(h);
		return -EINVAL;
	}
	int rc = rte_intr_callback_register(h, cb, arg);
	if (rc != 0)
		rte_intr_instance_free(h);
	return rc;
}
