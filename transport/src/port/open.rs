//! Bringing a port up: the EAL, an ethdev for the spec, its mempool, its queues, start.
//!
//! [`open_port`] reads top to bottom as the steps DPDK needs, in order; each PMD's
//! gotchas live with the step they bend: the ethdev's creation ([`ring`] for
//! in-process ring pairs, [`vdev`] for the virtual devices and PCI ports), the frame
//! size against the device's MTU ([`device_mtu`]), the mbuf size ([`mbuf_data_room`]).
//! Nothing here runs on the burst path.

mod ring;
mod vdev;

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use dpdk_sys as sys;

pub(super) use ring::release_ring_side;

use super::eal::{eal_init, EalConfig};
use super::error::{dpdk_err, PortError};
use super::thread::register_thread;
use super::{intr_gate, Port, PortConfig, PortDev, PortSpec, HIGH_QUEUES};

/// Numbers this process's ports: names of ethdevs, vdevs and pools must be unique,
/// also when a port is reopened.
static PORT_SEQ: AtomicU32 = AtomicU32::new(0);

/// A C string of `s` (a NUL inside, which no DPDK name or devarg has, is dropped).
fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("no NUL after replace")
}

/// An ethdev created for a spec, not yet configured.
struct Ethdev {
    id: u16,
    /// Device name as DPDK knows it.
    name: String,
    /// The virtual device to uninit when the port closes (not for ring and PCI ports).
    vdev: Option<CString>,
    /// `NAME:SIDE` of a ring port, claimed in the open-rings registry.
    ring_key: Option<String>,
    /// Queue pairs it has (a ring pair's are set by its first side).
    queues: u16,
    /// A ring side's doorbells: its receive queues', the peer's (`doorbell`).
    rx_bells: Vec<std::sync::Arc<super::Doorbell>>,
    tx_bells: Vec<std::sync::Arc<super::Doorbell>>,
}

/// Initialises the EAL (defaults, if not done yet) and brings the port up.
pub(super) fn open_port(cfg: &PortConfig) -> Result<Port, PortError> {
    init_eal_for(&cfg.spec)?;
    let seq = PORT_SEQ.fetch_add(1, Ordering::Relaxed);
    let queues = queue_pairs(cfg);
    let mut max_frame = cfg.max_frame.clamp(128, 9600);
    let dev = match &cfg.spec {
        PortSpec::Ring { name, side } => {
            ring::create_ring_ethdev(&cfg.spec, name, *side, seq, queues)?
        }
        spec => {
            max_frame = vdev::clamp_to_iface_mtu(spec, max_frame);
            vdev::create_ethdev(spec, seq, max_frame, queues)?
        }
    };
    // A failure from here on gives back what was created, so that the same spec can be
    // opened again (a memif client retrying until its server is there).
    let mut pool = None;
    let up = (|| {
        let mtu = device_mtu(&dev, max_frame)?;
        if !carries_more_than_reported(&cfg.spec) {
            max_frame = max_frame.min(mtu as usize + 14);
        }
        let p = *pool.insert(create_mempool(cfg, seq, max_frame, &dev.name)?);
        let (rx_desc, tx_external) = configure_ethdev(&dev, cfg, dev.queues, mtu, p)?;
        Ok((
            rx_desc,
            tx_external,
            start_ethdev(&dev, !cfg.spec.has_own_mac())?,
        ))
    })();
    let (rx_desc, tx_external, mac) = match up {
        Ok(v) => v,
        Err(e) => {
            discard(&dev, pool);
            return Err(e);
        }
    };
    if let PortSpec::Memif {
        role: super::spec::MemifRole::Client,
        ..
    } = &cfg.spec
    {
        settle_memif_client(dev.id);
    }
    let pool = pool.expect("created when the port came up");
    let queues = dev.queues;
    Ok(Port::new(PortDev {
        id: dev.id,
        name: dev.name,
        pool,
        max_frame,
        mac,
        vdev: dev.vdev,
        ring: matches!(cfg.spec, PortSpec::Ring { .. }),
        ring_key: dev.ring_key,
        rx_desc,
        queues,
        gated: matches!(cfg.spec, PortSpec::Memif { .. }) && intr_gate::install(),
        tx_external,
        rx_bells: dev.rx_bells,
        tx_bells: dev.tx_bells,
    }))
}

/// A memif client waits a moment for its link, and reconnects while it stays down.
///
/// A server makes its socket when its port is created and takes connections only once
/// the port is started; a client that connects in between is refused ("ID not found")
/// and DPDK 22.11's client never tries again, so the link stays down for good (an MPI
/// pair over memif that never connected, 2 to 4 runs in 10). Restarting the port makes
/// the client connect again: every 200 ms while the link is down, for up to 5 s, after
/// which the port is handed over down as before (its user waits for the link).
fn settle_memif_client(id: u16) {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let retry = Instant::now() + Duration::from_millis(200);
        while Instant::now() < retry {
            if super::link_up(id) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if Instant::now() >= deadline {
            return;
        }
        // SAFETY: a started port nothing polls yet: stop and start it again (memif's
        // start connects a client).
        unsafe {
            sys::rte_eth_dev_stop(id);
            sys::rte_eth_dev_start(id);
        }
    }
}

/// Releases an ethdev that did not come up: closed, its virtual device uninitialised,
/// its pool freed (a ring's pool is kept: see `PortDev`'s drop), its ring side given
/// back.
fn discard(dev: &Ethdev, pool: Option<NonNull<sys::rte_mempool>>) {
    // SAFETY: the device was created here and nothing else holds it; it is not
    // started, so close releases its queues, and no mbuf of the pool is in use.
    unsafe {
        sys::rte_eth_dev_close(dev.id);
        if let Some(v) = &dev.vdev {
            sys::rte_vdev_uninit(v.as_ptr());
        }
        if let (Some(p), None) = (pool, &dev.ring_key) {
            sys::rte_mempool_free(p.as_ptr());
        }
    }
    if let Some(key) = &dev.ring_key {
        release_ring_side(key);
    }
}

/// Initialises the EAL with defaults (allow-listing the PCI device a PCI spec names)
/// unless it already is, and registers the calling thread for mempool caches.
fn init_eal_for(spec: &PortSpec) -> Result<(), PortError> {
    let eal_cfg = EalConfig {
        pci: match spec {
            PortSpec::Pci { addr } => Some(addr.clone()),
            _ => None,
        },
        ..EalConfig::default()
    };
    eal_init(&eal_cfg)?;
    register_thread();
    Ok(())
}

/// Queue pairs for a port. Ring ports get a second queue pair for high-priority
/// traffic (a traffic class of its own: the receiver polls it first, so urgent frames
/// never wait behind bulk ones queued in the port), or one per shard when more shards
/// share the port (the side opened second takes the count of the first: see
/// `open/ring`). Other PMDs keep one queue, its frames dispatched to their shards in
/// software: with two, DPDK 22.11's memif crashed a ddperf server as its client left
/// (seen 2 runs in 14).
fn queue_pairs(cfg: &PortConfig) -> u16 {
    match cfg.spec {
        PortSpec::Ring { .. } => HIGH_QUEUES.max(cfg.queues),
        // One socket per shard: the kernel's fanout spreads flows over them, and a
        // shard forwards what is another's (`Node::route`), as RSS on a NIC would
        // need without a flow rule per connection.
        PortSpec::AfPacket { .. } => cfg.queues.clamp(1, MAX_AF_PACKET_QUEUES),
        // af_xdp binds to the interface's own queues (a veth has one unless made
        // with more); memif's 22.11 driver crashed with two; null needs none.
        _ => 1,
    }
}

/// Most af_packet sockets of one port (each maps its own kernel ring).
const MAX_AF_PACKET_QUEUES: u16 = 16;

/// PMDs that carry frames larger than the MTU they report: the software ones (ring,
/// null, memif), and af_packet, which reports a constant 1518-byte largest frame but
/// carries whatever its ring frames hold — sized from the interface's MTU
/// (`vdev::clamp_to_iface_mtu`), jumbo on a veth of MTU 9000.
fn carries_more_than_reported(spec: &PortSpec) -> bool {
    matches!(
        spec,
        PortSpec::Ring { .. }
            | PortSpec::Null { .. }
            | PortSpec::Memif { .. }
            | PortSpec::AfPacket { .. }
    )
}

/// The MTU to configure: the one `max_frame` needs, bounded by what the device
/// reports. Software PMDs (ring, null, memif) carry larger frames than they report —
/// memif carries whatever fits its buffer size, which `vdev` sets — so for them the
/// frame size stays; for kernel and hardware ports it follows this MTU.
fn device_mtu(dev: &Ethdev, max_frame: usize) -> Result<u32, PortError> {
    let mut info: sys::rte_eth_dev_info = Default::default();
    // SAFETY: zeroed POD out-parameter, valid port id.
    let rc = unsafe { sys::rte_eth_dev_info_get(dev.id, &mut info) };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_dev_info_get", &dev.name, rc));
    }
    let mut mtu = (max_frame - 14) as u32;
    if info.max_mtu > 0 && (info.max_mtu as u32) < mtu {
        mtu = info.max_mtu as u32;
    }
    if info.max_rx_pktlen > 18 && info.max_rx_pktlen - 18 < mtu {
        mtu = info.max_rx_pktlen - 18;
    }
    Ok(mtu)
}

/// Bytes of mbuf data room (headroom included) for frames of up to `max_frame`.
fn mbuf_data_room(spec: &PortSpec, max_frame: usize) -> usize {
    let headroom = sys::RTE_PKTMBUF_HEADROOM as usize;
    match spec {
        // af_packet copies whole ring frames into mbufs.
        PortSpec::AfPacket { .. } => vdev::af_packet_framesz(max_frame) + headroom,
        // af_xdp's UMEM chunks are the mbufs: a power of two, at least 2 KiB.
        PortSpec::AfXdp { .. } => (max_frame + headroom).next_power_of_two().max(2048),
        _ => (max_frame + headroom).next_multiple_of(64),
    }
}

/// The port's own mempool, its mbufs large enough for one whole frame each (frames
/// are single-segment).
fn create_mempool(
    cfg: &PortConfig,
    seq: u32,
    max_frame: usize,
    port_name: &str,
) -> Result<NonNull<sys::rte_mempool>, PortError> {
    let pool_name = cstring(&format!("dp_pool{seq}"));
    let data_room = mbuf_data_room(&cfg.spec, max_frame);
    // SAFETY: valid name; the pool lives as long as the port.
    let pool = unsafe {
        sys::rte_pktmbuf_pool_create(
            pool_name.as_ptr(),
            cfg.mbufs,
            256,
            0,
            data_room as u16,
            sys::SOCKET_ID_ANY,
        )
    };
    NonNull::new(pool).ok_or_else(|| dpdk_err("rte_pktmbuf_pool_create", port_name, -1))
}

/// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` (a function-like macro bindgen leaves out).
const TX_OFFLOAD_MULTI_SEGS: u64 = 1 << 15;

/// Whether the PMD copies every frame it is given in its transmit burst and frees the
/// mbufs there: memif in its copying mode and af_packet, which copy each segment of a
/// chain into the shared ring. Not a zero-copy memif client: its server reads the
/// frames where they lie, which must be memory the client shares (the EAL's), not
/// endpoint memory. Frames there can take payloads by
/// reference from endpoint memory (`Port::tx_external`). Not af_xdp, whose copy takes
/// the first segment only, nor ring (it hands the mbufs to the peer, who would read
/// the payload later) or hardware (it reads by DMA, needing IOVAs).
fn copies_on_tx(spec: &PortSpec) -> bool {
    matches!(
        spec,
        PortSpec::Memif {
            zero_copy: false,
            ..
        } | PortSpec::AfPacket { .. }
    )
}

/// Configures `queues` queue pairs and the MTU, with descriptor counts adjusted to the
/// device's limits. Returns the receive descriptors per queue, and whether frames may
/// take payloads by reference: a PMD that copies on transmit and takes chained mbufs
/// (multi-segment transmit enabled then).
fn configure_ethdev(
    dev: &Ethdev,
    cfg: &PortConfig,
    queues: u16,
    mtu: u32,
    pool: NonNull<sys::rte_mempool>,
) -> Result<(u16, bool), PortError> {
    let mut conf: sys::rte_eth_conf = Default::default();
    conf.rxmode.mtu = mtu;
    let mut info: sys::rte_eth_dev_info = Default::default();
    // SAFETY: zeroed POD out-parameter, valid port id.
    let rc = unsafe { sys::rte_eth_dev_info_get(dev.id, &mut info) };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_dev_info_get", &dev.name, rc));
    }
    let external = copies_on_tx(&cfg.spec) && info.tx_offload_capa & TX_OFFLOAD_MULTI_SEGS != 0;
    if external {
        conf.txmode.offloads |= TX_OFFLOAD_MULTI_SEGS;
    }
    // SAFETY: valid port and configuration.
    let rc = unsafe { sys::rte_eth_dev_configure(dev.id, queues, queues, &conf) };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_dev_configure", &dev.name, rc));
    }
    let mut rxd = cfg.rx_desc;
    let mut txd = cfg.tx_desc;
    // SAFETY: valid port; adjusts descriptor counts to the device limits.
    unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(dev.id, &mut rxd, &mut txd) };
    for q in 0..queues {
        setup_queue_pair(dev, q, rxd, txd, pool)?;
    }
    Ok((rxd, external))
}

/// Sets up rx and tx queue `q` of a configured port, receiving into `pool`.
fn setup_queue_pair(
    dev: &Ethdev,
    q: u16,
    rxd: u16,
    txd: u16,
    pool: NonNull<sys::rte_mempool>,
) -> Result<(), PortError> {
    // SAFETY: valid port, a configured queue, the pool created above.
    let rc = unsafe {
        sys::rte_eth_rx_queue_setup(
            dev.id,
            q,
            rxd,
            sys::SOCKET_ID_ANY as u32,
            std::ptr::null(),
            pool.as_ptr(),
        )
    };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_rx_queue_setup", &dev.name, rc));
    }
    // SAFETY: valid port, a configured queue.
    let rc = unsafe {
        sys::rte_eth_tx_queue_setup(dev.id, q, txd, sys::SOCKET_ID_ANY as u32, std::ptr::null())
    };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_tx_queue_setup", &dev.name, rc));
    }
    Ok(())
}

/// Starts a configured port, promiscuous or not ([`PortSpec::has_own_mac`]: a port
/// with a MAC of its own takes only what is sent to it, and broadcasts). Returns its
/// MAC address.
fn start_ethdev(dev: &Ethdev, promiscuous: bool) -> Result<[u8; 6], PortError> {
    // SAFETY: configured port.
    let rc = unsafe { sys::rte_eth_dev_start(dev.id) };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_dev_start", &dev.name, rc));
    }
    // Not every PMD supports promiscuous mode (the node checks the destination
    // anyway); af_packet's turns the kernel interface's IFF_PROMISC on or off.
    // SAFETY: started port.
    unsafe {
        if promiscuous {
            sys::rte_eth_promiscuous_enable(dev.id);
        } else {
            sys::rte_eth_promiscuous_disable(dev.id);
        }
    };
    let mut mac: sys::rte_ether_addr = Default::default();
    // SAFETY: started port, out parameter.
    unsafe { sys::rte_eth_macaddr_get(dev.id, &mut mac) };
    Ok(mac.addr_bytes)
}
