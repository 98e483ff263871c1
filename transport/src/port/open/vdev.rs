//! Virtual devices (`net_null`, `net_memif`, `net_af_packet`, `net_af_xdp`) and PCI
//! ports: the device arguments each PMD needs to carry our frames, and the ethdev
//! behind them.

use std::ffi::CString;

use dpdk_sys as sys;

use super::{cstring, Ethdev};
use crate::port::error::{dpdk_err, PortError};
use crate::port::{MemifRole, PortSpec};

/// The MTU of a kernel interface (from sysfs of the caller's network namespace).
fn iface_mtu(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `max_frame`, no larger than the kernel interface's MTU allows (af_packet and af_xdp
/// frames go through it); unchanged for other PMDs or an unknown MTU.
pub(super) fn clamp_to_iface_mtu(spec: &PortSpec, max_frame: usize) -> usize {
    match spec {
        PortSpec::AfPacket { iface } | PortSpec::AfXdp { iface } => match iface_mtu(iface) {
            Some(mtu) => max_frame.min(mtu + 14),
            None => max_frame,
        },
        _ => max_frame,
    }
}

/// af_packet ring frame size for frames of up to `max_frame` bytes: room for the
/// TPACKET header, a power of two.
pub(super) fn af_packet_framesz(max_frame: usize) -> usize {
    (max_frame + 128).next_power_of_two().max(2048)
}

/// Creates the virtual device a spec names (a PCI port exists already) and finds its
/// ethdev.
pub(super) fn create_ethdev(
    spec: &PortSpec,
    seq: u32,
    max_frame: usize,
    queues: u16,
) -> Result<Ethdev, PortError> {
    let queues = if matches!(spec, PortSpec::AfPacket { .. }) {
        queues.max(1)
    } else {
        1
    };
    let (drv, args) = device_args(spec, seq, max_frame, queues)?;
    let cname = cstring(&drv);
    let mut vdev = None;
    if !matches!(spec, PortSpec::Pci { .. }) {
        let cargs = cstring(&args);
        // SAFETY: valid C strings; creates a virtual device after EAL init.
        let rc = unsafe { sys::rte_vdev_init(cname.as_ptr(), cargs.as_ptr()) };
        if rc < 0 {
            let mut e = dpdk_err("rte_vdev_init", format!("{drv} {args}"), rc);
            if let (PortError::Dpdk { msg, .. }, -1) = (&mut e, rc) {
                *msg = driver_refused(spec, &drv);
            }
            return Err(e);
        }
        vdev = Some(cname.clone());
    }
    let id = port_id_by_name(&cname, &drv)?;
    Ok(Ethdev {
        id,
        name: drv,
        vdev,
        ring_key: None,
        queues,
        rx_bells: Vec::new(),
        tx_bells: Vec::new(),
    })
}

/// What a virtual device's driver returning -1 from its probe means (not `EPERM`: the
/// drivers return -1 for any failure and log the step), with how to see the step.
fn driver_refused(spec: &PortSpec, drv: &str) -> String {
    let kind = drv.trim_end_matches(|c: char| c.is_ascii_digit());
    let log = kind.strip_prefix("net_").unwrap_or(kind);
    let mut why = format!(
        "the driver refused it (DEPOSIT_EAL_ARGS=--log-level=pmd.net.{log}:debug shows the step)"
    );
    match spec {
        PortSpec::AfPacket { iface } | PortSpec::AfXdp { iface } if iface_mtu(iface).is_none() => {
            why = format!("there is no interface {iface} in this network namespace");
        }
        // DPDK 22.11 rte_eth_af_packet.c: fanout id = (getpid() ^ ifindex) & 0xffff.
        PortSpec::AfPacket { .. } => why.push_str(
            "; af_packet joins its socket to PACKET_FANOUT group (pid ^ ifindex) & 0xffff, \
             which fails when another process's af_packet port in this network namespace \
             has the same number (give the interfaces indexes apart: scripts/mpi.sh)",
        ),
        _ => {}
    }
    why
}

/// The ethdev port id of device `cname` (`drv` as text, for the error).
fn port_id_by_name(cname: &CString, drv: &str) -> Result<u16, PortError> {
    let mut id: u16 = 0;
    // SAFETY: valid name and out pointer.
    let rc = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_dev_get_port_by_name", drv, rc));
    }
    Ok(id)
}

/// The device name (unique per open, from `seq`) and device arguments for a spec; a
/// PCI port is named by its address and takes no arguments.
fn device_args(
    spec: &PortSpec,
    seq: u32,
    max_frame: usize,
    queues: u16,
) -> Result<(String, String), PortError> {
    Ok(match spec {
        PortSpec::Null { rx } => (
            format!("net_null_dp{seq}"),
            format!("size=64,copy=0,no-rx={}", if *rx { 0 } else { 1 }),
        ),
        PortSpec::Memif {
            socket,
            role,
            zero_copy,
        } => memif_args(spec, socket, *role, *zero_copy, seq, max_frame)?,
        PortSpec::AfPacket { iface } => af_packet_args(iface, seq, max_frame, queues),
        PortSpec::AfXdp { iface } => (
            format!("net_af_xdp{seq}"),
            format!("iface={iface},start_queue=0,queue_count=1"),
        ),
        PortSpec::Pci { addr } => (addr.clone(), String::new()),
        PortSpec::Ring { .. } => unreachable!("ring ports are not virtual devices"),
    })
}

/// memif's arguments: the socket path is one (so it cannot hold a `,`), and one of its
/// buffers holds the largest frame.
fn memif_args(
    spec: &PortSpec,
    socket: &str,
    role: MemifRole,
    zero_copy: bool,
    seq: u32,
    max_frame: usize,
) -> Result<(String, String), PortError> {
    if socket.contains(',') {
        return Err(PortError::BadSpec {
            spec: spec.to_string(),
            why: "memif socket path must not contain ','",
        });
    }
    if zero_copy && !super::super::eal::eal_info().is_some_and(|e| e.hugepages) {
        return Err(PortError::BadSpec {
            spec: spec.to_string(),
            why: "a zero-copy memif client needs DPDK on hugepages (scripts/hugepages.sh)",
        });
    }
    // memif corrupts frames spanning more than two of its buffers:
    // make one buffer hold the largest frame.
    let bsize = max_frame.next_power_of_two().max(2048);
    Ok((
        format!("net_memif{seq}"),
        format!(
            "role={},socket={socket},socket-abstract=no,bsize={bsize},rsize=11,id=0{}",
            if role == MemifRole::Server {
                "server"
            } else {
                "client"
            },
            // Needs the EAL's memory in one file per segment list, to share it with
            // the server (`eal::memory_args`).
            if zero_copy { ",zero-copy=yes" } else { "" }
        ),
    ))
}

/// af_packet's arguments: kernel ring frames and blocks large enough for our frames;
/// `qpairs` sockets, which the kernel's PACKET_FANOUT (hash mode) gives each flow — a
/// connection's frames, by their UDP ports — to one of.
fn af_packet_args(iface: &str, seq: u32, max_frame: usize, qpairs: u16) -> (String, String) {
    // The kernel ring's frames must hold the largest frame plus the
    // TPACKET header, and the mbufs must hold a whole ring frame
    // (the pool's data room follows `framesz`: `mbuf_data_room`).
    let framesz = af_packet_framesz(max_frame);
    // TPACKET blocks are whole pages.
    let blocksz = framesz.max(4096);
    (
        format!("net_af_packet{seq}"),
        format!("iface={iface},qpairs={qpairs},framesz={framesz},blocksz={blocksz},framecnt=2048"),
    )
}
