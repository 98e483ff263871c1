//! The endpoint table with its page maps, and the node address table.
//!
//! An endpoint is a view — offset, length, rights — of an [`EndpointMemory`], addressed
//! by network-logical offsets and split into logical pages of [`PAGE_SIZE`] bytes. Each
//! page has a mapping (host address, rights, present bit); the first two are held directly
//! in the [`EndpointEntry`] (the seed's hybrid mapping, so small endpoints never use the
//! TLB), the rest in the entry's page map. Nested and overlapping endpoints are entries
//! sharing one `Arc<EndpointMemory>`.
//!
//! Every entry carries a *generation* drawn from one process-wide counter when the entry
//! is made and again at every page-map change. The TLB keys its entries with it, so a
//! stale translation is never used, not even after an endpoint slot is reused.
//!
//! The address-register file ([`RegisterFile`]) is in the `registers` submodule (an
//! endpoint entry holds only the window of its global registers); the connection table and instruction
//! memory live elsewhere. This module never dereferences a host address: a [`HostAddr`]
//! is only a number, and access to the bytes behind it belongs to `mem`.

mod instructions;
mod registers;
mod tokens;

pub use instructions::{InstructionMemory, Operands, StoredInstruction, GLOBAL_IP, REG_OPERANDS};
pub use registers::{RegProt, RegWindow, RegisterFile};
pub use tokens::{PayloadTable, Token, TokenEntry, TokenKind, TokenMatch};

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::{BitAnd, BitOr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::mem::{EndpointMemory, HostAddr};

/// Access rights of an endpoint or a page, as remote peers see them: a write (any
/// form, token deposits too) needs `REMOTE_WRITE` on the bytes it stores, a read
/// `REMOTE_READ` on the bytes it reads, a memory atomic `REMOTE_ATOMIC`. The endpoint's
/// rights and the page's intersect. Where a read's or atomic's reply lands (the
/// requester's own memory) no right is needed (`deposit::protection`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Rights(u8);

impl Rights {
    /// No remote access.
    pub const NONE: Rights = Rights(0);
    /// Remote peers may read.
    pub const REMOTE_READ: Rights = Rights(1);
    /// Remote peers may write.
    pub const REMOTE_WRITE: Rights = Rights(2);
    /// Remote peers may run atomic operations.
    pub const REMOTE_ATOMIC: Rights = Rights(4);
    /// Every remote right.
    pub const ALL: Rights = Rights(7);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }

    /// Rights in either.
    pub const fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    /// Rights in both.
    pub const fn intersection(self, other: Rights) -> Rights {
        Rights(self.0 & other.0)
    }

    /// The raw bits (read = 1, write = 2, atomic = 4).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Rights from raw bits, ignoring unknown ones.
    pub const fn from_bits_truncate(bits: u8) -> Rights {
        Rights(bits & Rights::ALL.0)
    }
}

impl BitOr for Rights {
    type Output = Rights;
    fn bitor(self, rhs: Rights) -> Rights {
        self.union(rhs)
    }
}

impl BitAnd for Rights {
    type Output = Rights;
    fn bitand(self, rhs: Rights) -> Rights {
        self.intersection(rhs)
    }
}

/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// Size of a logical page of an endpoint's page map.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// Number of page mappings held directly in an [`EndpointEntry`].
const DIRECT_PAGES: u64 = 2;

/// Errors of the endpoint and node tables.
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    /// An endpoint's offset into its memory is not page aligned.
    #[error("endpoint offset {offset:#x} is not a multiple of {PAGE_SIZE}")]
    MisalignedOffset {
        /// The offset given.
        offset: usize,
    },
    /// An endpoint of zero bytes.
    #[error("endpoint of zero bytes")]
    EmptyEndpoint,
    /// An endpoint `[offset, offset + len)` that does not fit in its memory.
    #[error("endpoint of {len} bytes at offset {offset:#x} exceeds its memory of {mem_len} bytes")]
    OutsideMemory {
        /// The offset given.
        offset: usize,
        /// The length given.
        len: usize,
        /// The memory's length.
        mem_len: usize,
    },
    /// A page index past the end of an endpoint's page map.
    #[error("page {idx} is outside the endpoint's {pages} pages")]
    PageOutOfRange {
        /// The index given.
        idx: u64,
        /// Pages in the endpoint.
        pages: u64,
    },
    /// No endpoint has this number (it was removed).
    #[error("no endpoint {id} (removed)")]
    NoEndpoint {
        /// The endpoint number.
        id: u32,
    },
    /// A register window of zero registers was asked for.
    #[error("register window of zero registers")]
    EmptyRegisterWindow,
    /// No free range of the register file is large enough.
    #[error("no {wanted} free consecutive registers (largest free range: {largest})")]
    RegistersExhausted {
        /// Registers asked for.
        wanted: u32,
        /// Largest free range.
        largest: u32,
    },
    /// A register index outside the register file.
    #[error("register {index} is outside the register file of {capacity}")]
    RegisterOutOfRange {
        /// The absolute index given.
        index: u32,
        /// Registers in the file.
        capacity: u32,
    },
    /// A window given back that overlaps registers already free (a double free).
    #[error("registers {window:?} are not (all) allocated")]
    RegistersNotAllocated {
        /// The window given back.
        window: RegWindow,
    },
    /// An instruction window of zero slots was asked for.
    #[error("instruction window of zero slots")]
    EmptyInstructionWindow,
    /// No free range of instruction memory is large enough.
    #[error("no {wanted} free consecutive instruction slots (largest free range: {largest})")]
    InstructionsExhausted {
        /// Slots asked for.
        wanted: u32,
        /// Largest free range.
        largest: u32,
    },
    /// An instruction index outside its window or table.
    #[error("instruction {index} is outside its window or table")]
    InstructionOutOfRange {
        /// The index given.
        index: u32,
    },
    /// An instruction window given back that is not (all) allocated.
    #[error("instruction slots {window:?} are not (all) allocated")]
    InstructionsNotAllocated {
        /// The window given back.
        window: RegWindow,
    },
    /// An instruction that cannot run.
    #[error("bad instruction: {why}")]
    BadInstruction {
        /// What is wrong with it.
        why: &'static str,
    },
    /// The payload table is full.
    #[error("payload table full ({capacity} tokens outstanding)")]
    TokensExhausted {
        /// Entries in the table.
        capacity: u32,
    },
    /// A token that names no outstanding entry (used, cancelled, or never issued).
    #[error("token {0:#018x} is not outstanding")]
    NoSuchToken(u64),
    /// A node configuration line that does not parse.
    #[error("bad node line {line:?}: {reason}")]
    BadNodeLine {
        /// The line.
        line: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The mapping of one logical page of an endpoint.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageEntry {
    /// Host address of the start of the page, in the entry's [`EndpointMemory`] (which
    /// checks it again at every access through it).
    pub host: HostAddr,
    /// Rights on this page; effective rights are these intersected with the endpoint's.
    pub rights: Rights,
    /// False when the host has revoked or "paged out" the page: access faults.
    pub present: bool,
}

/// Process-wide source of generations, so no (endpoint id, generation) pair repeats.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// One endpoint: a view of endpoint memory with rights and a page map.
#[derive(Debug)]
pub struct EndpointEntry {
    mem: Arc<EndpointMemory>,
    offset: usize,
    len: u64,
    rights: Rights,
    generation: u64,
    /// Pages 0 and 1 (entries past the endpoint's end are unused).
    direct: [PageEntry; DIRECT_PAGES as usize],
    /// Pages 2 and up.
    map: Box<[PageEntry]>,
    /// Global registers, shared by every connection into the endpoint.
    globals: RegWindow,
}

impl EndpointEntry {
    /// A view of `len` bytes of `mem` starting at `offset` (page-aligned), with `rights`;
    /// every page starts present, with the endpoint's rights.
    pub fn new(
        mem: Arc<EndpointMemory>,
        offset: usize,
        len: usize,
        rights: Rights,
    ) -> Result<Self, TableError> {
        if offset as u64 & (PAGE_SIZE - 1) != 0 {
            return Err(TableError::MisalignedOffset { offset });
        }
        if len == 0 {
            return Err(TableError::EmptyEndpoint);
        }
        match offset.checked_add(len) {
            Some(end) if end <= mem.len() => {}
            _ => {
                return Err(TableError::OutsideMemory {
                    offset,
                    len,
                    mem_len: mem.len(),
                })
            }
        }
        let base = mem.addr(offset);
        let page = |idx: u64| PageEntry {
            // In bounds of the memory for every page of the endpoint (checked above).
            host: base.wrapping_add((idx * PAGE_SIZE) as usize),
            rights,
            present: true,
        };
        let pages = (len as u64).div_ceil(PAGE_SIZE);
        let unused = PageEntry {
            host: base,
            rights: Rights::NONE,
            present: false,
        };
        let direct = [0, 1].map(|i| if i < pages { page(i) } else { unused });
        let map = (DIRECT_PAGES..pages.max(DIRECT_PAGES)).map(page).collect();
        Ok(Self {
            mem,
            offset,
            len: len as u64,
            rights,
            generation: next_generation(),
            direct,
            map,
            globals: RegWindow::EMPTY,
        })
    }

    /// Length of the endpoint in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the endpoint is empty (never: `new` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of logical pages.
    pub fn pages(&self) -> u64 {
        self.len.div_ceil(PAGE_SIZE)
    }

    /// The endpoint's rights (page rights may narrow them further).
    pub fn rights(&self) -> Rights {
        self.rights
    }

    /// Offset of the endpoint in its memory.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The memory the endpoint is a view of.
    pub fn memory(&self) -> &Arc<EndpointMemory> {
        &self.mem
    }

    /// Changes at every page-map change; unique across all entries of the process.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The mapping of page `idx`, or `None` past the end.
    pub fn page(&self, idx: u64) -> Option<&PageEntry> {
        if idx >= self.pages() {
            None
        } else if idx < DIRECT_PAGES {
            self.direct.get(idx as usize)
        } else {
            self.map.get((idx - DIRECT_PAGES) as usize)
        }
    }

    /// The mapping of page `idx` when it is one of the first two, held directly in the
    /// entry (the seed's hybrid mapping) so small endpoints never touch the TLB.
    pub fn direct(&self, idx: u64) -> Option<&PageEntry> {
        if idx < DIRECT_PAGES && idx < self.pages() {
            self.direct.get(idx as usize)
        } else {
            None
        }
    }

    /// The window of the endpoint's global registers (register names 128 and up in a
    /// message into it); empty unless set.
    pub fn globals(&self) -> RegWindow {
        self.globals
    }

    /// Sets the window of the endpoint's global registers.
    pub fn set_globals(&mut self, window: RegWindow) {
        self.globals = window;
    }

    /// Marks page `idx` present or not (revoked / paged out); bumps the generation.
    pub fn set_page_present(&mut self, idx: u64, present: bool) -> Result<(), TableError> {
        self.page_mut(idx)?.present = present;
        self.generation = next_generation();
        Ok(())
    }

    /// Sets the rights of page `idx`; bumps the generation.
    pub fn set_page_rights(&mut self, idx: u64, rights: Rights) -> Result<(), TableError> {
        self.page_mut(idx)?.rights = rights;
        self.generation = next_generation();
        Ok(())
    }

    fn page_mut(&mut self, idx: u64) -> Result<&mut PageEntry, TableError> {
        let pages = self.pages();
        let entry = if idx >= pages {
            None
        } else if idx < DIRECT_PAGES {
            self.direct.get_mut(idx as usize)
        } else {
            self.map.get_mut((idx - DIRECT_PAGES) as usize)
        };
        entry.ok_or(TableError::PageOutOfRange { idx, pages })
    }
}

/// Number of an endpoint: its slot in the [`EndpointTable`]. Endpoints are local names;
/// what authorises a peer is the connection (and its key), not knowing this number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct EndpointId(pub u32);

/// The endpoint table: slots of endpoint entries; freed slots are reused.
#[derive(Debug, Default)]
pub struct EndpointTable {
    slots: Vec<Option<EndpointEntry>>,
    free: Vec<u32>,
    len: usize,
}

impl EndpointTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an endpoint and returns its number (a free slot when there is one).
    pub fn insert(&mut self, e: EndpointEntry) -> EndpointId {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(e);
            return EndpointId(i);
        }
        self.slots.push(Some(e));
        EndpointId((self.slots.len() - 1) as u32)
    }

    /// The endpoint numbered `id`, if any (any `id` from the wire is safe to look up).
    pub fn get(&self, id: EndpointId) -> Option<&EndpointEntry> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    /// The endpoint numbered `id`, mutably (for page-map changes).
    pub fn get_mut(&mut self, id: EndpointId) -> Option<&mut EndpointEntry> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    /// Removes the endpoint numbered `id` and frees its slot.
    pub fn remove(&mut self, id: EndpointId) -> Option<EndpointEntry> {
        let e = self.slots.get_mut(id.0 as usize)?.take()?;
        self.free.push(id.0);
        self.len -= 1;
        Some(e)
    }

    /// Number of endpoints in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no endpoint.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Address of a node on the network.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NodeAddr {
    /// Ethernet address.
    pub mac: [u8; 6],
    /// IP address: IPv4, or IPv6 (the node's frames then go over IPv6).
    pub ip: IpAddr,
    /// UDP port the node's transport listens on.
    pub udp_port: u16,
}

impl NodeAddr {
    /// The node at the IPv4 address a.b.c.d with the locally administered MAC
    /// 02:00:a:b:c:d derived from it, the default when the configuration gives none.
    pub fn from_ip(ip: [u8; 4], udp_port: u16) -> Self {
        Self::at(ip.into(), udp_port)
    }

    /// The node at `ip` (either family) with the MAC derived from it: 02:00 and the
    /// address's last four bytes (an IPv4 address's own, as [`NodeAddr::from_ip`]).
    pub fn at(ip: IpAddr, udp_port: u16) -> Self {
        Self {
            mac: derived_mac(ip),
            ip,
            udp_port,
        }
    }
}

/// The locally administered MAC a node at `ip` has when nothing gives it one: 02:00
/// and the address's last four bytes.
pub fn derived_mac(ip: IpAddr) -> [u8; 6] {
    let [a, b, c, d] = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, a, b, c, d]
}

/// Number of a node in the [`NodeTable`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NodeId(pub u32);

/// The node address table: one entry per peer IPv4 address.
#[derive(Debug, Default)]
pub struct NodeTable {
    nodes: Vec<NodeAddr>,
    /// Whether each node's MAC was configured (a node table file, `add_node`): it
    /// wins over what resolution or a peer's frames would say.
    fixed: Vec<bool>,
    by_ip: HashMap<IpAddr, NodeId>,
}

impl NodeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node, or updates the MAC and port of the node with the same IP and returns
    /// its existing number. A configured MAC ([`NodeTable::insert_static`]) stays.
    pub fn insert(&mut self, addr: NodeAddr) -> NodeId {
        self.put(addr, false)
    }

    /// Adds a node whose MAC is configured, or makes the node with the same IP one:
    /// nothing learned changes its MAC afterwards.
    pub fn insert_static(&mut self, addr: NodeAddr) -> NodeId {
        self.put(addr, true)
    }

    fn put(&mut self, addr: NodeAddr, fixed: bool) -> NodeId {
        if let Some(&id) = self.by_ip.get(&addr.ip) {
            let i = id.0 as usize;
            if fixed || !self.fixed[i] {
                self.nodes[i] = addr;
            } else {
                self.nodes[i].udp_port = addr.udp_port;
            }
            self.fixed[i] |= fixed;
            return id;
        }
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(addr);
        self.fixed.push(fixed);
        self.by_ip.insert(addr.ip, id);
        id
    }

    /// Whether node `id`'s MAC was configured.
    pub fn is_static(&self, id: NodeId) -> bool {
        self.fixed.get(id.0 as usize).copied().unwrap_or(false)
    }

    /// The address of node `id`.
    pub fn get(&self, id: NodeId) -> Option<&NodeAddr> {
        self.nodes.get(id.0 as usize)
    }

    /// The node with IPv4 address `ip`.
    pub fn find_ip(&self, ip: IpAddr) -> Option<NodeId> {
        self.by_ip.get(&ip).copied()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table holds no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Parses one line of a node configuration file: `IP [MAC] UDP-PORT`, e.g.
    /// `10.0.0.2 02:00:0a:00:00:02 18515` or `fd00:1::2 18515` (IPv4 or IPv6);
    /// without a MAC the one from [`NodeAddr::at`] is used. A `#` starts a comment. Blank lines are errors
    /// (callers skip them).
    pub fn parse_line(line: &str) -> Result<NodeAddr, TableError> {
        let bad = |reason| TableError::BadNodeLine {
            line: line.to_string(),
            reason,
        };
        let text = line.split('#').next().unwrap_or("");
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (ip, mac, port) = match fields.as_slice() {
            [ip, port] => (*ip, None, *port),
            [ip, mac, port] => (*ip, Some(*mac), *port),
            [] => return Err(bad("empty line")),
            _ => return Err(bad("expected `IP [MAC] UDP-PORT`")),
        };
        let ip: IpAddr = ip.parse().map_err(|_| bad("bad IP address"))?;
        let udp_port: u16 = port.parse().map_err(|_| bad("bad UDP port"))?;
        let mut addr = NodeAddr::at(ip, udp_port);
        if let Some(mac) = mac {
            addr.mac = parse_mac(mac).ok_or_else(|| bad("bad MAC address"))?;
        }
        Ok(addr)
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` (hex, one or two digits per byte).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(pages: usize) -> Arc<EndpointMemory> {
        Arc::new(EndpointMemory::alloc_ordinary(pages * PAGE_SIZE as usize).unwrap())
    }

    #[test]
    fn rights_combine_as_sets() {
        let rw = Rights::REMOTE_READ | Rights::REMOTE_WRITE;
        assert!(rw.contains(Rights::REMOTE_READ));
        assert!(!rw.contains(Rights::REMOTE_ATOMIC));
        assert!(Rights::ALL.contains(rw));
        assert!(rw.contains(Rights::NONE));
        assert_eq!(rw & Rights::REMOTE_WRITE, Rights::REMOTE_WRITE);
        assert_eq!(rw.bits(), 3);
        assert_eq!(Rights::from_bits_truncate(0xff), Rights::ALL);
        assert_eq!(Rights::default(), Rights::NONE);
    }

    #[test]
    fn entry_maps_pages_of_its_sub_range() {
        let mem = memory(8);
        let e = EndpointEntry::new(mem.clone(), 4096, 3 * 4096 + 1, Rights::ALL).unwrap();
        assert_eq!(e.len(), 3 * 4096 + 1);
        assert_eq!(e.pages(), 4);
        for i in 0..4 {
            let p = e.page(i).unwrap();
            assert!(p.present);
            assert_eq!(p.host, mem.addr(4096 * (i as usize + 1)));
        }
        assert!(e.page(4).is_none());
        assert_eq!(e.direct(1), e.page(1));
        assert!(e.direct(2).is_none());
    }

    #[test]
    fn small_endpoint_has_only_its_direct_pages() {
        let e = EndpointEntry::new(memory(1), 0, 100, Rights::REMOTE_READ).unwrap();
        assert_eq!(e.pages(), 1);
        assert!(e.direct(0).is_some());
        assert!(e.direct(1).is_none());
        assert!(e.page(1).is_none());
        assert_eq!(e.page(0).unwrap().rights, Rights::REMOTE_READ);
    }

    #[test]
    fn entry_refuses_bad_views() {
        let mem = memory(2);
        assert_eq!(
            EndpointEntry::new(mem.clone(), 100, 10, Rights::ALL).unwrap_err(),
            TableError::MisalignedOffset { offset: 100 }
        );
        assert_eq!(
            EndpointEntry::new(mem.clone(), 0, 0, Rights::ALL).unwrap_err(),
            TableError::EmptyEndpoint
        );
        assert_eq!(
            EndpointEntry::new(mem.clone(), 4096, 4097, Rights::ALL).unwrap_err(),
            TableError::OutsideMemory {
                offset: 4096,
                len: 4097,
                mem_len: 8192
            }
        );
        assert!(EndpointEntry::new(mem, usize::MAX - 4095, 4096, Rights::ALL).is_err());
    }

    #[test]
    fn page_map_changes_bump_generation() {
        let mut e = EndpointEntry::new(memory(4), 0, 4 * 4096, Rights::ALL).unwrap();
        let g0 = e.generation();
        e.set_page_present(3, false).unwrap();
        let g1 = e.generation();
        assert_ne!(g0, g1);
        assert!(!e.page(3).unwrap().present);
        e.set_page_rights(0, Rights::REMOTE_READ).unwrap();
        assert_ne!(e.generation(), g1);
        assert_eq!(e.direct(0).unwrap().rights, Rights::REMOTE_READ);
        assert_eq!(
            e.set_page_present(4, false).unwrap_err(),
            TableError::PageOutOfRange { idx: 4, pages: 4 }
        );
    }

    #[test]
    fn global_registers_default_to_none() {
        let mut e = EndpointEntry::new(memory(1), 0, 10, Rights::ALL).unwrap();
        assert!(e.globals().is_empty());
        let w = RegWindow { base: 8, len: 4 };
        e.set_globals(w);
        assert_eq!(e.globals(), w);
    }

    #[test]
    fn generations_are_unique_across_entries() {
        let mem = memory(1);
        let a = EndpointEntry::new(mem.clone(), 0, 10, Rights::ALL).unwrap();
        let b = EndpointEntry::new(mem, 0, 10, Rights::ALL).unwrap();
        assert_ne!(a.generation(), b.generation());
    }

    #[test]
    fn endpoint_table_reuses_slots() {
        let mem = memory(1);
        let mut t = EndpointTable::new();
        let a = t.insert(EndpointEntry::new(mem.clone(), 0, 10, Rights::ALL).unwrap());
        let b = t.insert(EndpointEntry::new(mem.clone(), 0, 20, Rights::ALL).unwrap());
        assert_eq!((a, b), (EndpointId(0), EndpointId(1)));
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(a).unwrap().len(), 10);
        assert!(t.remove(a).is_none());
        assert!(t.get(a).is_none());
        assert!(t.get(EndpointId(u32::MAX)).is_none());
        let c = t.insert(EndpointEntry::new(mem, 0, 30, Rights::ALL).unwrap());
        assert_eq!(c, a);
        assert_eq!(t.get(c).unwrap().len(), 30);
        t.get_mut(b).unwrap().set_page_present(0, false).unwrap();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn endpoint_tables_can_be_shared_with_workers() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PageEntry>();
        assert_send_sync::<EndpointEntry>();
        assert_send_sync::<EndpointTable>();
    }

    #[test]
    fn node_mac_is_derived_from_ip() {
        let n = NodeAddr::from_ip([10, 0, 0, 2], 18515);
        assert_eq!(n.mac, [0x02, 0, 10, 0, 0, 2]);
    }

    #[test]
    fn node_table_dedups_by_ip() {
        let mut t = NodeTable::new();
        let a = t.insert(NodeAddr::from_ip([10, 0, 0, 1], 1));
        let b = t.insert(NodeAddr::from_ip([10, 0, 0, 2], 1));
        assert_ne!(a, b);
        let mut moved = NodeAddr::from_ip([10, 0, 0, 1], 2);
        moved.mac = [2, 2, 2, 2, 2, 2];
        assert_eq!(t.insert(moved), a);
        assert_eq!(t.get(a), Some(&moved));
        assert_eq!(t.find_ip([10, 0, 0, 2].into()), Some(b));
        assert_eq!(t.find_ip([10, 0, 0, 3].into()), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn node_lines_parse_with_and_without_mac() {
        let n = NodeTable::parse_line("10.0.0.2 02:00:0a:00:00:02 18515").unwrap();
        assert_eq!(
            n,
            NodeAddr {
                mac: [2, 0, 10, 0, 0, 2],
                ip: [10, 0, 0, 2].into(),
                udp_port: 18515
            }
        );
        let n = NodeTable::parse_line("  192.168.1.7   4791  # peer").unwrap();
        assert_eq!(n, NodeAddr::from_ip([192, 168, 1, 7], 4791));
        for bad in [
            "",
            "# only a comment",
            "10.0.0.2",
            "10.0.0.256 1",
            "10.0.0.2 65536",
            "10.0.0.2 02:00:0a:00:00 1",
            "10.0.0.2 02:00:0a:00:00:02:03 1",
            "10.0.0.2 02:00:0a:00:00:zz 1",
            "10.0.0.2 a b c",
        ] {
            assert!(
                matches!(
                    NodeTable::parse_line(bad),
                    Err(TableError::BadNodeLine { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
