//! The per-worker software TLB: (endpoint, logical page) → (host address, rights).
//!
//! A set-associative cache of [`SETS`] sets × [`WAYS`] ways, allocated once when the
//! worker starts. Pages 0 and 1 of every endpoint are translated from the endpoint entry
//! itself (the seed's hybrid mapping) and never occupy the cache; they count as hits. A
//! miss walks the endpoint's page map and fills the set round-robin.
//!
//! Entries are keyed by the endpoint's generation as well as its number and page, and the
//! generation changes at every page-map change (and is unique per process), so a stale
//! translation is never used and no cross-worker shootdown is needed: the stale entry
//! simply stops matching and is replaced in time.
//!
//! What it must never do: allocate, lock or make a syscall in [`Tlb::translate`], or
//! dereference the host addresses it caches (a [`HostAddr`] is only a number; access goes
//! through `mem`, which checks it against the endpoint's memory).

use crate::mem::HostAddr;
use crate::tables::{EndpointEntry, EndpointId, Rights};

/// Number of sets (a power of two).
pub const SETS: usize = 256;
/// Ways per set.
pub const WAYS: usize = 4;

/// Why a page could not be translated.
#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The page is mapped but marked not present (revoked or paged out): the host must
    /// repair it.
    #[error("page {page} is not present")]
    PageNotPresent {
        /// The logical page.
        page: u64,
    },
    /// The page is past the end of the endpoint's page map.
    #[error("page {page} is outside the endpoint")]
    OutOfRange {
        /// The logical page.
        page: u64,
    },
}

/// Counters of the worker's translation cache (endpoint page to host address).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbStats {
    /// Translations served from the cache or from an entry's direct mappings.
    pub hits: u64,
    /// Translations that walked the page map.
    pub misses: u64,
    /// Translations of pages not present (a miss as well, for pages past the direct ones).
    pub faults: u64,
}

#[derive(Clone, Copy)]
struct Slot {
    valid: bool,
    endpoint: u32,
    page: u64,
    generation: u64,
    host: HostAddr,
    rights: Rights,
}

impl Slot {
    const EMPTY: Slot = Slot {
        valid: false,
        endpoint: 0,
        page: 0,
        generation: 0,
        host: HostAddr::NULL,
        rights: Rights::NONE,
    };
}

#[derive(Clone, Copy)]
struct Set {
    ways: [Slot; WAYS],
    /// Next way to replace (round-robin).
    next: u8,
}

/// A per-worker software TLB.
pub struct Tlb {
    sets: Box<[Set]>,
    stats: TlbStats,
}

impl Default for Tlb {
    fn default() -> Self {
        Self::new()
    }
}

impl Tlb {
    /// An empty TLB (one allocation, here and never again).
    pub fn new() -> Tlb {
        Tlb {
            sets: vec![
                Set {
                    ways: [Slot::EMPTY; WAYS],
                    next: 0
                };
                SETS
            ]
            .into_boxed_slice(),
            stats: TlbStats::default(),
        }
    }

    /// Translates logical page `page` of endpoint `id` (whose entry is `ep`) to the host
    /// address of the page and its effective rights (page rights ∩ endpoint rights).
    pub fn translate(
        &mut self,
        id: EndpointId,
        ep: &EndpointEntry,
        page: u64,
    ) -> Result<(HostAddr, Rights), Fault> {
        if let Some(pe) = ep.direct(page) {
            if !pe.present {
                self.stats.faults += 1;
                return Err(Fault::PageNotPresent { page });
            }
            self.stats.hits += 1;
            return Ok((pe.host, pe.rights & ep.rights()));
        }
        let generation = ep.generation();
        let set = &mut self.sets[set_index(id, page)];
        for slot in &set.ways {
            if slot.valid
                && slot.endpoint == id.0
                && slot.page == page
                && slot.generation == generation
            {
                self.stats.hits += 1;
                return Ok((slot.host, slot.rights));
            }
        }
        self.stats.misses += 1;
        let pe = ep.page(page).ok_or(Fault::OutOfRange { page })?;
        if !pe.present {
            self.stats.faults += 1;
            return Err(Fault::PageNotPresent { page });
        }
        let rights = pe.rights & ep.rights();
        let way = match set.ways.iter().position(|s| !s.valid) {
            Some(free) => free,
            None => {
                let w = set.next as usize % WAYS;
                set.next = ((w + 1) % WAYS) as u8;
                w
            }
        };
        set.ways[way] = Slot {
            valid: true,
            endpoint: id.0,
            page,
            generation,
            host: pe.host,
            rights,
        };
        Ok((pe.host, rights))
    }

    /// The counters so far.
    pub fn stats(&self) -> TlbStats {
        self.stats
    }

    /// Drops every cached translation (counters are kept).
    pub fn invalidate_all(&mut self) {
        for set in self.sets.iter_mut() {
            set.ways = [Slot::EMPTY; WAYS];
            set.next = 0;
        }
    }
}

/// The set of (endpoint, page): consecutive pages fall in consecutive sets, and endpoints
/// are spread by a multiplicative hash so their page 2s don't all collide.
fn set_index(id: EndpointId, page: u64) -> usize {
    let h = (page as u32).wrapping_add(id.0.wrapping_mul(0x9e37_79b9) >> 8);
    h as usize & (SETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::EndpointMemory;
    use crate::tables::PAGE_SIZE;
    use std::sync::Arc;

    fn endpoint(pages: usize, rights: Rights) -> EndpointEntry {
        let mem = Arc::new(EndpointMemory::alloc_ordinary(pages * PAGE_SIZE as usize).unwrap());
        EndpointEntry::new(mem, 0, pages * PAGE_SIZE as usize, rights).unwrap()
    }

    #[test]
    fn direct_pages_hit_without_filling() {
        let ep = endpoint(2, Rights::ALL);
        let mut tlb = Tlb::new();
        for _ in 0..3 {
            let (p, r) = tlb.translate(EndpointId(0), &ep, 1).unwrap();
            assert_eq!(p, ep.page(1).unwrap().host);
            assert_eq!(r, Rights::ALL);
        }
        assert_eq!(
            tlb.stats(),
            TlbStats {
                hits: 3,
                misses: 0,
                faults: 0
            }
        );
        assert!(tlb.sets.iter().all(|s| s.ways.iter().all(|w| !w.valid)));
    }

    #[test]
    fn miss_fills_then_hits() {
        let ep = endpoint(8, Rights::ALL);
        let mut tlb = Tlb::new();
        let id = EndpointId(3);
        let (p, _) = tlb.translate(id, &ep, 5).unwrap();
        assert_eq!(p, ep.page(5).unwrap().host);
        assert_eq!(tlb.translate(id, &ep, 5).unwrap().0, p);
        assert_eq!(
            tlb.stats(),
            TlbStats {
                hits: 1,
                misses: 1,
                faults: 0
            }
        );
        tlb.invalidate_all();
        tlb.translate(id, &ep, 5).unwrap();
        assert_eq!(tlb.stats().misses, 2);
    }

    #[test]
    fn pages_past_the_end_are_out_of_range() {
        let ep = endpoint(3, Rights::ALL);
        let mut tlb = Tlb::new();
        assert_eq!(
            tlb.translate(EndpointId(0), &ep, 3),
            Err(Fault::OutOfRange { page: 3 })
        );
        assert_eq!(
            tlb.translate(EndpointId(0), &ep, u64::MAX),
            Err(Fault::OutOfRange { page: u64::MAX })
        );
        let small = endpoint(1, Rights::ALL);
        assert_eq!(
            tlb.translate(EndpointId(1), &small, 1),
            Err(Fault::OutOfRange { page: 1 })
        );
    }

    #[test]
    fn generation_change_invalidates_cached_page() {
        let mut ep = endpoint(4, Rights::ALL);
        let mut tlb = Tlb::new();
        let id = EndpointId(0);
        tlb.translate(id, &ep, 2).unwrap();
        tlb.translate(id, &ep, 2).unwrap();
        ep.set_page_present(2, false).unwrap();
        assert_eq!(
            tlb.translate(id, &ep, 2),
            Err(Fault::PageNotPresent { page: 2 })
        );
        ep.set_page_present(0, false).unwrap();
        assert_eq!(
            tlb.translate(id, &ep, 0),
            Err(Fault::PageNotPresent { page: 0 })
        );
        ep.set_page_present(2, true).unwrap();
        ep.set_page_rights(2, Rights::REMOTE_READ).unwrap();
        assert_eq!(tlb.translate(id, &ep, 2).unwrap().1, Rights::REMOTE_READ);
        assert_eq!(
            tlb.stats(),
            TlbStats {
                hits: 1,
                misses: 3,
                faults: 2
            }
        );
    }

    #[test]
    fn reused_endpoint_slot_never_sees_old_translations() {
        let mut tlb = Tlb::new();
        let id = EndpointId(7);
        let old = endpoint(4, Rights::ALL);
        let old_host = tlb.translate(id, &old, 3).unwrap().0;
        let new = endpoint(4, Rights::REMOTE_READ);
        let (host, rights) = tlb.translate(id, &new, 3).unwrap();
        assert_ne!(host, old_host);
        assert_eq!(rights, Rights::REMOTE_READ);
    }

    #[test]
    fn rights_are_page_and_endpoint_intersection() {
        let mut ep = endpoint(4, Rights::REMOTE_READ | Rights::REMOTE_WRITE);
        ep.set_page_rights(3, Rights::ALL).unwrap();
        let mut tlb = Tlb::new();
        assert_eq!(
            tlb.translate(EndpointId(0), &ep, 3).unwrap().1,
            Rights::REMOTE_READ | Rights::REMOTE_WRITE
        );
    }

    #[test]
    fn tlb_can_move_to_its_worker_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<Tlb>();
    }

    #[test]
    fn set_conflicts_replace_round_robin_and_stay_correct() {
        let ep = endpoint(2 + SETS * (WAYS + 2), Rights::ALL);
        let mut tlb = Tlb::new();
        let id = EndpointId(0);
        // Pages SETS apart share a set: more of them than ways forces replacement.
        let pages: Vec<u64> = (0..(WAYS as u64 + 2))
            .map(|k| 2 + k * SETS as u64)
            .collect();
        for _ in 0..3 {
            for &p in &pages {
                assert_eq!(
                    tlb.translate(id, &ep, p).unwrap().0,
                    ep.page(p).unwrap().host
                );
            }
        }
        let s = tlb.stats();
        assert_eq!(s.hits + s.misses, 3 * pages.len() as u64);
        assert!(s.misses > pages.len() as u64);
    }
}
