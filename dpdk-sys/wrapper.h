/* Headers bindgen reads. Only the APIs deposit uses are allow-listed in build.rs. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_eth_ring.h>
#include <rte_bus_vdev.h>
#include <rte_thread.h>
#include <rte_telemetry.h>
#include "shim/shim.h"
