//! Doorbells: how a frame wakes a sleeping worker on a port whose PMD has no rx
//! interrupts but whose sender is in this process (ring ports). None of the PMDs this
//! project runs on here — ring, memif, af_packet, af_xdp in DPDK 22.11 — has rx
//! interrupts (`rte_eth_dev_rx_intr_enable`; memif's driver says "Interrupt mode not
//! supported"), so elsewhere a sleeping worker notices a frame at the end of its nap.
//!
//! Each receive queue of a ring side has a doorbell (kept for the process, like the
//! rings). The worker that owns the queue registers what wakes it; before it sleeps it
//! marks the doorbell and polls once more. A sender that put frames on the queue rings
//! it: a load while nobody sleeps, a wake (taking the doorbell's lock) when the owner
//! does. A frame sent in the few nanoseconds between the owner's last poll and its mark
//! becoming visible is noticed at the end of the nap, as without a doorbell.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::submit::SubmitRing;

/// One receive queue's doorbell.
#[derive(Default)]
pub struct Doorbell {
    /// The owner sleeps (or is about to).
    sleeping: AtomicBool,
    /// What wakes the owner (its submission ring's sleep).
    waker: Mutex<Option<Weak<SubmitRing>>>,
}

impl Doorbell {
    /// The owner of the queue: `ring` wakes it.
    pub fn register(&self, ring: &Arc<SubmitRing>) {
        *self.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(ring));
    }

    /// The owner is going to sleep (true) or is awake (false).
    #[inline]
    pub fn set_sleeping(&self, s: bool) {
        self.sleeping.store(s, Ordering::SeqCst);
    }

    /// A sender put frames on the queue.
    #[inline]
    pub fn ring(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        let w = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = w.as_ref().and_then(Weak::upgrade) {
            r.nudge();
        }
    }
}
