//! Tag matching: posted receives against arrived messages, with MPI's and libfabric's
//! rules (`FI_TAGGED`, `MPI_Recv`/`MPI_Probe`), pure.
//!
//! A receive names a [`Selector`]: a source (one peer, or any) and a tag with an ignore
//! mask (bits set in `ignore` do not take part). A message is matched by the first
//! receive that selects it, in the order receives were posted; a receive takes the first
//! message it selects, in the order messages arrived. Messages of one source therefore
//! match in the order they were sent (MPI's non-overtaking rule) as long as the layer
//! below hands them over in that order, which the receive ring does.
//!
//! A message no receive selects waits in the unexpected list. It can be looked at
//! without taking it ([`Matcher::peek`]: `MPI_Iprobe`, `FI_PEEK`), taken out of matching
//! for a receive to come ([`Matcher::claim`]: `MPI_Improbe`, `FI_PEEK | FI_CLAIM`), then
//! received or dropped ([`Matcher::take_claimed`]: `MPI_Mrecv`, `FI_CLAIM`,
//! `FI_DISCARD`). A posted receive can be cancelled ([`Matcher::cancel`]).
//!
//! What a receive and a message carry besides the matching fields is the caller's
//! (`R`: a buffer and a context; `U`: the message's bytes, or where to read them from),
//! so this module knows nothing of memory or of the wire. Every operation is a few map
//! look-ups plus a scan of the candidates of one source (or of all, for a wildcard) that
//! stops at the first match; per peer there is nothing unless it has something posted or
//! waiting.

use std::collections::{BTreeMap, BTreeSet};

use super::ids::IdMap;

/// A peer of the layer above (its index in that layer's address table).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PeerId(pub u32);

/// Which messages a receive or a probe takes: from `src` (any when `None`), with a tag
/// equal to `tag` in every bit not set in `ignore`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Selector {
    /// The source, or any.
    pub src: Option<PeerId>,
    /// The tag's bits that must match.
    pub tag: u64,
    /// Bits of the tag that do not take part.
    pub ignore: u64,
}

impl Selector {
    /// Every message, from anyone (`MPI_ANY_SOURCE`, `MPI_ANY_TAG`; an untagged receive).
    pub const ANY: Selector = Selector {
        src: None,
        tag: 0,
        ignore: u64::MAX,
    };

    /// Messages with exactly `tag`, from anyone.
    pub const fn tag(tag: u64) -> Selector {
        Selector {
            src: None,
            tag,
            ignore: 0,
        }
    }

    /// The same, from `src` only.
    pub const fn from(self, src: PeerId) -> Selector {
        Selector {
            src: Some(src),
            ..self
        }
    }

    /// Whether a message from `src` with `tag` is selected.
    #[inline]
    pub fn selects(&self, src: PeerId, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src) && (tag ^ self.tag) & !self.ignore == 0
    }
}

/// What matching knows of a message: where it came from, its tag, its length and the
/// sender's immediate data (`fi_tsenddata`'s `data`, MPI does not use it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MsgInfo {
    /// The sender.
    pub src: PeerId,
    /// Its tag.
    pub tag: u64,
    /// Its length in bytes (the whole message, even where a receive takes less).
    pub len: u64,
    /// The sender's immediate data, when it gave some.
    pub data: Option<u64>,
}

/// A posted receive, to cancel it: its place in posting order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RecvId(u64);

/// An unexpected message, to claim or take it: its place in arrival order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct MsgId(u64);

/// A receive and a message that select each other.
#[derive(Debug, PartialEq, Eq)]
pub struct Matched<R, U> {
    /// The receive (as posted).
    pub recv: R,
    /// The message's header.
    pub info: MsgInfo,
    /// The message (as it arrived).
    pub msg: U,
}

/// What became of a receive just posted.
#[derive(Debug, PartialEq, Eq)]
pub enum Posted<R, U> {
    /// It took a message that was waiting.
    Matched(Matched<R, U>),
    /// Nothing selected waits: it is posted.
    Queued(RecvId),
}

/// What became of a message just arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrived<R, U> {
    /// A posted receive took it.
    Matched(Matched<R, U>),
    /// No posted receive selects it: it waits.
    Unexpected(MsgId),
}

struct Waiting<U> {
    info: MsgInfo,
    msg: U,
}

/// Posted receives and unexpected messages of one receiver.
pub struct Matcher<R, U> {
    /// Posted receives for any source, by posting order.
    any: BTreeMap<u64, (Selector, R)>,
    /// Posted receives for one source, by source then posting order.
    by_src: IdMap<PeerId, BTreeMap<u64, (Selector, R)>>,
    next_post: u64,
    /// Unexpected messages by arrival order (what a wildcard receive scans).
    unexpected: BTreeMap<u64, Waiting<U>>,
    /// The same messages' arrival numbers by source (what a directed receive scans).
    unexpected_by_src: IdMap<PeerId, BTreeSet<u64>>,
    next_arrival: u64,
    /// Messages claimed by a probe, out of matching until taken.
    claimed: IdMap<u64, Waiting<U>>,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Matcher {
            any: BTreeMap::new(),
            by_src: IdMap::default(),
            next_post: 0,
            unexpected: BTreeMap::new(),
            unexpected_by_src: IdMap::default(),
            next_arrival: 0,
            claimed: IdMap::default(),
        }
    }
}

impl<R, U> std::fmt::Debug for Matcher<R, U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("posted", &self.posted())
            .field("unexpected", &self.unexpected.len())
            .field("claimed", &self.claimed.len())
            .finish()
    }
}

/// The first entry of `list` whose selector selects (`src`, `tag`).
fn first_posted<R>(list: &BTreeMap<u64, (Selector, R)>, src: PeerId, tag: u64) -> Option<u64> {
    list.iter()
        .find(|(_, (sel, _))| sel.selects(src, tag))
        .map(|(&k, _)| k)
}

impl<R, U> Matcher<R, U> {
    /// Nothing posted, nothing waiting.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives posted and not yet matched or cancelled.
    pub fn posted(&self) -> usize {
        self.any.len() + self.by_src.values().map(BTreeMap::len).sum::<usize>()
    }

    /// Unexpected messages that receives and probes can still take (claimed ones not
    /// counted).
    pub fn unexpected(&self) -> usize {
        self.unexpected.len()
    }

    /// Messages claimed and not yet taken.
    pub fn claimed(&self) -> usize {
        self.claimed.len()
    }

    /// Posts a receive for what `sel` selects: it takes the first such message waiting,
    /// or is queued behind the receives posted before it.
    pub fn post(&mut self, sel: Selector, recv: R) -> Posted<R, U> {
        if let Some(id) = self.find_unexpected(&sel) {
            let w = self.remove_unexpected(id).expect("found");
            return Posted::Matched(Matched {
                recv,
                info: w.info,
                msg: w.msg,
            });
        }
        let k = self.next_post;
        self.next_post += 1;
        match sel.src {
            None => self.any.insert(k, (sel, recv)),
            Some(p) => self.by_src.entry(p).or_default().insert(k, (sel, recv)),
        };
        Posted::Queued(RecvId(k))
    }

    /// A message has arrived (in its source's sending order): the first posted receive
    /// that selects it takes it, else it waits.
    pub fn arrive(&mut self, info: MsgInfo, msg: U) -> Arrived<R, U> {
        match self.take_posted(&info) {
            Some(recv) => Arrived::Matched(Matched { recv, info, msg }),
            None => Arrived::Unexpected(self.park(info, msg)),
        }
    }

    /// [`Matcher::arrive`] in two steps, for a caller that makes the message's `U` only
    /// when it must wait (an eager payload is copied out of the ring only then): the
    /// first posted receive that selects the message, taken; `None` when none does,
    /// and the caller then [parks](Matcher::park) it before the next message arrives.
    pub fn take_posted(&mut self, info: &MsgInfo) -> Option<R> {
        let directed = self
            .by_src
            .get(&info.src)
            .and_then(|l| first_posted(l, info.src, info.tag));
        let wild = first_posted(&self.any, info.src, info.tag);
        let directed = match (directed, wild) {
            (Some(d), Some(w)) if w < d => None,
            (d, _) => d,
        };
        match (directed, wild) {
            (Some(d), _) => {
                let list = self.by_src.get_mut(&info.src).expect("found");
                let (_, r) = list.remove(&d).expect("found");
                if list.is_empty() {
                    self.by_src.remove(&info.src);
                }
                Some(r)
            }
            (None, Some(w)) => Some(self.any.remove(&w).expect("found").1),
            (None, None) => None,
        }
    }

    /// Puts a message no posted receive selects on the unexpected list.
    pub fn park(&mut self, info: MsgInfo, msg: U) -> MsgId {
        let k = self.next_arrival;
        self.next_arrival += 1;
        self.unexpected.insert(k, Waiting { info, msg });
        self.unexpected_by_src
            .entry(info.src)
            .or_default()
            .insert(k);
        MsgId(k)
    }

    /// The first waiting message `sel` selects, left where it is (`MPI_Iprobe`).
    pub fn peek(&self, sel: &Selector) -> Option<(MsgId, &MsgInfo, &U)> {
        let k = self.find_unexpected(sel)?;
        let w = &self.unexpected[&k];
        Some((MsgId(k), &w.info, &w.msg))
    }

    /// The first waiting message `sel` selects, taken out of matching: no receive or
    /// probe sees it again until [`Matcher::take_claimed`] (`MPI_Improbe`).
    pub fn claim(&mut self, sel: &Selector) -> Option<(MsgId, MsgInfo)> {
        let k = self.find_unexpected(sel)?;
        let w = self.remove_unexpected(k).expect("found");
        let info = w.info;
        self.claimed.insert(k, w);
        Some((MsgId(k), info))
    }

    /// A claimed message, to receive or drop it (`MPI_Mrecv`, `FI_DISCARD`); `None` when
    /// `id` is not claimed (already taken, or never).
    pub fn take_claimed(&mut self, id: MsgId) -> Option<(MsgInfo, U)> {
        self.claimed.remove(&id.0).map(|w| (w.info, w.msg))
    }

    /// A waiting or claimed message's payload (to add to it as more of it arrives).
    pub fn message_mut(&mut self, id: MsgId) -> Option<&mut U> {
        match self.unexpected.get_mut(&id.0) {
            Some(w) => Some(&mut w.msg),
            None => self.claimed.get_mut(&id.0).map(|w| &mut w.msg),
        }
    }

    /// Cancels a posted receive: `Some` with it when it was still posted, `None` when
    /// it has matched (or was cancelled) already.
    pub fn cancel(&mut self, id: RecvId) -> Option<R> {
        if let Some((_, r)) = self.any.remove(&id.0) {
            return Some(r);
        }
        let src = *self.by_src.iter().find(|(_, l)| l.contains_key(&id.0))?.0;
        let list = self.by_src.get_mut(&src).expect("found");
        let r = list.remove(&id.0).map(|(_, r)| r);
        if list.is_empty() {
            self.by_src.remove(&src);
        }
        r
    }

    /// Cancels the first posted receive for which `pred` holds (a context the caller
    /// keeps in `R`: `fi_cancel` names a receive by its context), in posting order.
    pub fn cancel_where(&mut self, mut pred: impl FnMut(&R) -> bool) -> Option<R> {
        let wild = self.any.iter().find(|(_, (_, r))| pred(r)).map(|(&k, _)| k);
        let directed = self
            .by_src
            .values()
            .filter_map(|l| l.iter().find(|(_, (_, r))| pred(r)).map(|(&k, _)| k))
            .min();
        let k = match (wild, directed) {
            (Some(w), Some(d)) => w.min(d),
            (w, d) => w.or(d)?,
        };
        self.cancel(RecvId(k))
    }

    /// Takes every posted receive out (the endpoint closes), in posting order.
    pub fn drain_posted(&mut self) -> Vec<R> {
        let mut all: Vec<(u64, R)> = std::mem::take(&mut self.any)
            .into_iter()
            .map(|(k, (_, r))| (k, r))
            .collect();
        for (_, l) in self.by_src.drain() {
            all.extend(l.into_iter().map(|(k, (_, r))| (k, r)));
        }
        all.sort_by_key(|&(k, _)| k);
        all.into_iter().map(|(_, r)| r).collect()
    }

    /// The arrival number of the first waiting message `sel` selects.
    fn find_unexpected(&self, sel: &Selector) -> Option<u64> {
        match sel.src {
            None => self
                .unexpected
                .iter()
                .find(|(_, w)| sel.selects(w.info.src, w.info.tag))
                .map(|(&k, _)| k),
            Some(p) => self.unexpected_by_src.get(&p)?.iter().copied().find(|k| {
                let w = &self.unexpected[k];
                sel.selects(w.info.src, w.info.tag)
            }),
        }
    }

    fn remove_unexpected(&mut self, k: u64) -> Option<Waiting<U>> {
        let w = self.unexpected.remove(&k)?;
        if let Some(l) = self.unexpected_by_src.get_mut(&w.info.src) {
            l.remove(&k);
            if l.is_empty() {
                self.unexpected_by_src.remove(&w.info.src);
            }
        }
        Some(w)
    }
}

#[cfg(test)]
mod tests;
