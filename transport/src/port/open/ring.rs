//! In-process ring ports: the two sides of one name are cross-connected through DPDK
//! rings, so two nodes run in one process with no device at all.
//!
//! Each side may be open once at a time in the process (the registry of open sides
//! refuses a second); the rings themselves live for the process, since a reopened side
//! finds them again.

use std::sync::{Arc, Mutex};

use dpdk_sys as sys;

use super::{cstring, Ethdev};
use crate::port::error::{dpdk_err, PortError};
use crate::port::{Doorbell, PortSpec, RingSide};

/// `NAME:SIDE` of every ring side open in this process.
static OPEN_RINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Queue pairs of every ring pair made in this process: both sides must have the same
/// (a frame sent on a queue the other side lacks would go to a ring nobody reads), so
/// the count of the side opened first holds for the pair.
static RING_QUEUES: Mutex<Vec<(String, u16)>> = Mutex::new(Vec::new());

/// Doorbells of every ring side's receive queues (`NAME:SIDE:QUEUE`), kept for the
/// process like the rings: a side reopened later finds the one its peer rings.
static BELLS: Mutex<Vec<(String, Arc<Doorbell>)>> = Mutex::new(Vec::new());

/// The doorbells of the `queues` receive queues of side `side` of ring pair `name`.
fn bells(name: &str, side: RingSide, queues: u16) -> Vec<Arc<Doorbell>> {
    let mut all = BELLS.lock().unwrap_or_else(|e| e.into_inner());
    (0..queues)
        .map(|q| {
            let key = format!("{name}:{side:?}:{q}");
            if let Some((_, b)) = all.iter().find(|(k, _)| *k == key) {
                return b.clone();
            }
            let b = Arc::new(Doorbell::default());
            all.push((key, b.clone()));
            b
        })
        .collect()
}

/// The queue pairs of ring pair `name`: those it was made with, else `wanted`.
fn pair_queues(name: &str, wanted: u16) -> u16 {
    let mut known = RING_QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, q)) = known.iter().find(|(n, _)| n == name) {
        return *q;
    }
    known.push((name.to_string(), wanted));
    wanted
}

/// Creates the ethdev of one side of ring pair `name`, with `queues` queue pairs.
pub(super) fn create_ring_ethdev(
    spec: &PortSpec,
    name: &str,
    side: RingSide,
    seq: u32,
    queues: u16,
) -> Result<Ethdev, PortError> {
    let key = claim_ring_side(spec, name, side)?;
    let queues = pair_queues(name, queues);
    let (rx, tx) = ring_queues(name, side, queues)?;
    // The ethdev's own name is this process's port number, not the ring
    // name: unique on every open (a reopened side gets a fresh ethdev) and
    // short whatever the ring name (DPDK refuses long ethdev names).
    let pname = format!("dp_ring{seq}");
    let c = cstring(&pname);
    // SAFETY: valid name and `queues` ring pointers each way.
    let rc = unsafe {
        sys::rte_eth_from_rings(
            c.as_ptr(),
            rx.as_ptr(),
            queues.into(),
            tx.as_ptr(),
            queues.into(),
            0,
        )
    };
    if rc < 0 {
        return Err(dpdk_err("rte_eth_from_rings", pname, rc));
    }
    Ok(Ethdev {
        id: rc as u16,
        name: pname,
        vdev: None,
        ring_key: Some(key),
        queues,
        rx_bells: bells(name, side, queues),
        tx_bells: bells(
            name,
            match side {
                RingSide::A => RingSide::B,
                RingSide::B => RingSide::A,
            },
            queues,
        ),
    })
}

/// Marks side `side` of ring pair `name` open, or fails when it already is. Returns
/// the key to [`release_ring_side`] when the port closes.
fn claim_ring_side(spec: &PortSpec, name: &str, side: RingSide) -> Result<String, PortError> {
    let key = format!("{name}:{side:?}");
    let mut open = OPEN_RINGS.lock().unwrap_or_else(|e| e.into_inner());
    if open.contains(&key) {
        return Err(PortError::InUse(spec.to_string()));
    }
    open.push(key.clone());
    Ok(key)
}

/// Marks a ring side claimed by [`claim_ring_side`] closed again.
pub(in crate::port) fn release_ring_side(key: &str) {
    let mut open = OPEN_RINGS.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|k| k != key);
}

/// The rx and tx rings of each queue pair of one side: side a transmits on `ab` and
/// receives on `ba`, side b the other way round.
type RingQueues = (Vec<*mut sys::rte_ring>, Vec<*mut sys::rte_ring>);

/// Looks up or creates the rings of `queues` queue pairs of ring pair `name`, as seen
/// from `side`.
fn ring_queues(name: &str, side: RingSide, queues: u16) -> Result<RingQueues, PortError> {
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for q in 0..queues {
        let suffix = if q == 0 { String::new() } else { q.to_string() };
        let ab = ring_lookup_or_create(&format!("dp_{name}_ab{suffix}"))?;
        let ba = ring_lookup_or_create(&format!("dp_{name}_ba{suffix}"))?;
        let (r, t) = match side {
            RingSide::A => (ba, ab),
            RingSide::B => (ab, ba),
        };
        rx.push(r);
        tx.push(t);
    }
    Ok((rx, tx))
}

/// The DPDK ring `name`, created (single producer, single consumer) if the other side
/// has not made it yet.
fn ring_lookup_or_create(name: &str) -> Result<*mut sys::rte_ring, PortError> {
    let c = cstring(name);
    // SAFETY: valid C string; lookup returns null when absent.
    let r = unsafe { sys::rte_ring_lookup(c.as_ptr()) };
    if !r.is_null() {
        return Ok(r);
    }
    // SAFETY: valid name; the ring lives for the process (ring ports are never freed).
    let r = unsafe {
        sys::rte_ring_create(c.as_ptr(), 4096, 0, sys::RING_F_SP_ENQ | sys::RING_F_SC_DEQ)
    };
    if r.is_null() {
        return Err(dpdk_err("rte_ring_create", name, -1));
    }
    Ok(r)
}
