/* Exported wrappers around DPDK's static-inline fast-path functions, which bindgen
 * cannot bind. Each is a one-line forwarder; the compiler inlines DPDK's body here. */
#ifndef DEPOSIT_SHIM_H
#define DEPOSIT_SHIM_H
#include <stdint.h>
struct rte_mbuf;
struct rte_mempool;

uint16_t shim_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t shim_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp);
int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count);
void shim_pktmbuf_free(struct rte_mbuf *m);
void shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned count);
/* Data pointer and length of a single-segment mbuf. */
uint8_t *shim_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t shim_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t shim_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t shim_pktmbuf_nb_segs(const struct rte_mbuf *m);
/* Sets data_len and pkt_len of a single-segment mbuf. */
void shim_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
uint16_t shim_pktmbuf_tailroom(const struct rte_mbuf *m);
/* One call for the fast path: data pointer and data length of the first segment,
 * and whether the mbuf is a single segment (*single = 1). */
uint8_t *shim_pktmbuf_data(struct rte_mbuf *m, uint16_t *len, uint8_t *single);
/* Data pointer and writable room (data length + tailroom) of a fresh mbuf. */
uint8_t *shim_pktmbuf_room(struct rte_mbuf *m, uint16_t *room);
/* Copies a possibly multi-segment mbuf's bytes into dst; returns bytes copied. */
uint32_t shim_pktmbuf_copy_out(const struct rte_mbuf *m, uint8_t *dst, uint32_t cap);
/* Makes the single-segment frame m — `len` bytes written in its room, except bytes
 * [at, at + ext_len), which are the `ext_len` bytes at `ext` outside any mempool — a
 * chain of three: m's first `at` bytes; an mbuf from m's pool attached to `ext`, on
 * whose release free_cb(ext, opaque) runs; one from m's pool holding the bytes after
 * the hole, copied from m's room. For PMDs that copy frames on transmit (no IOVA is
 * set). 0, or -1 with nothing changed (pool empty, or the ranges do not fit m's
 * room). */
int shim_pktmbuf_chain_external(struct rte_mbuf *m, uint16_t len, uint16_t at, uint8_t *ext,
				uint16_t ext_len, void (*free_cb)(void *, void *), void *opaque);
uint64_t shim_rdtsc(void);
uint64_t shim_get_tsc_hz(void);
unsigned shim_lcore_id(void);
int shim_errno(void);
void shim_pause(void);
/* Registers cb(arg) on the EAL interrupt thread for readable fd (an external source the
 * EAL never reads); 0 or a negative errno. */
int shim_intr_register_ext(int fd, void (*cb)(void *), void *arg);
#endif
