use super::*;
use proptest::prelude::*;

fn msg(src: u32, tag: u64, len: u64) -> MsgInfo {
    MsgInfo {
        src: PeerId(src),
        tag,
        len,
        data: None,
    }
}

fn matched<R, U>(p: Posted<R, U>) -> Matched<R, U> {
    match p {
        Posted::Matched(m) => m,
        Posted::Queued(_) => panic!("queued"),
    }
}

fn queued<R, U>(p: Posted<R, U>) -> RecvId {
    match p {
        Posted::Queued(id) => id,
        Posted::Matched(_) => panic!("matched"),
    }
}

fn taken<R, U>(a: Arrived<R, U>) -> Matched<R, U> {
    match a {
        Arrived::Matched(m) => m,
        Arrived::Unexpected(_) => panic!("unexpected"),
    }
}

#[test]
fn a_receive_posted_before_and_one_posted_after_arrival() {
    let mut m: Matcher<&str, &str> = Matcher::new();
    let id = queued(m.post(Selector::tag(5), "early"));
    let got = taken(m.arrive(msg(1, 5, 10), "a"));
    assert_eq!((got.recv, got.msg, got.info.len), ("early", "a", 10));
    assert!(m.cancel(id).is_none(), "a matched receive is not cancelled");
    assert!(matches!(
        m.arrive(msg(1, 5, 3), "b"),
        Arrived::Unexpected(_)
    ));
    let got = matched(m.post(Selector::tag(5), "late"));
    assert_eq!((got.recv, got.msg), ("late", "b"));
    assert_eq!((m.posted(), m.unexpected()), (0, 0));
}

#[test]
fn one_sources_messages_match_in_sending_order() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    for i in 0..5 {
        m.arrive(msg(2, 7, 0), i);
    }
    for i in 0..5 {
        assert_eq!(matched(m.post(Selector::tag(7).from(PeerId(2)), 0)).msg, i);
    }
    for r in 0..5 {
        queued(m.post(Selector::ANY, r));
    }
    for i in 0..5 {
        assert_eq!(taken(m.arrive(msg(3, i, 0), 0)).recv, i as u32);
    }
}

#[test]
fn wildcards_and_ignore_bits() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    m.arrive(msg(1, 0x10, 0), 0);
    m.arrive(msg(2, 0x21, 0), 1);
    m.arrive(msg(2, 0x30, 0), 2);
    // Source 2, low nibble 0, any high nibble: the third message.
    let sel = Selector {
        src: Some(PeerId(2)),
        tag: 0,
        ignore: 0xf0,
    };
    assert_eq!(matched(m.post(sel, 0)).msg, 2);
    // Any source, any tag: the first left.
    assert_eq!(matched(m.post(Selector::ANY, 0)).msg, 0);
    assert_eq!(matched(m.post(Selector::ANY.from(PeerId(2)), 0)).msg, 1);
}

#[test]
fn a_directed_and_a_wildcard_receive_go_by_posting_order() {
    let mut m: Matcher<&str, ()> = Matcher::new();
    queued(m.post(Selector::ANY, "any"));
    queued(m.post(Selector::tag(1).from(PeerId(4)), "directed"));
    assert_eq!(taken(m.arrive(msg(4, 1, 0), ())).recv, "any");
    assert_eq!(taken(m.arrive(msg(4, 1, 0), ())).recv, "directed");
    queued(m.post(Selector::tag(1).from(PeerId(4)), "directed"));
    queued(m.post(Selector::ANY, "any"));
    assert_eq!(taken(m.arrive(msg(4, 1, 0), ())).recv, "directed");
    assert_eq!(taken(m.arrive(msg(9, 1, 0), ())).recv, "any");
}

#[test]
fn peek_leaves_claim_hides_take_removes() {
    let mut m: Matcher<u32, &str> = Matcher::new();
    assert!(m.peek(&Selector::ANY).is_none());
    m.arrive(msg(1, 3, 100), "x");
    m.arrive(msg(1, 3, 200), "y");
    let (id, info, data) = m.peek(&Selector::tag(3)).expect("waiting");
    assert_eq!((info.len, *data), (100, "x"));
    assert_eq!(m.peek(&Selector::tag(3)).expect("still").0, id);
    let (cid, info) = m.claim(&Selector::tag(3)).expect("claimed");
    assert_eq!((cid, info.len), (id, 100));
    // Claimed: receives and probes see the next one.
    assert_eq!(m.peek(&Selector::tag(3)).expect("next").1.len, 200);
    assert_eq!(matched(m.post(Selector::tag(3), 0)).msg, "y");
    assert!(matches!(m.post(Selector::tag(3), 1), Posted::Queued(_)));
    *m.message_mut(cid).expect("claimed") = "x!";
    assert_eq!(m.take_claimed(cid).expect("claimed").1, "x!");
    assert!(m.take_claimed(cid).is_none(), "taken once");
    assert_eq!(m.claimed(), 0);
}

#[test]
fn cancel_by_id_and_by_context() {
    let mut m: Matcher<u32, ()> = Matcher::new();
    let a = queued(m.post(Selector::tag(1).from(PeerId(1)), 10));
    queued(m.post(Selector::tag(1), 11));
    queued(m.post(Selector::tag(2).from(PeerId(5)), 12));
    assert_eq!(m.cancel(a), Some(10));
    assert_eq!(m.cancel(a), None);
    assert_eq!(m.cancel_where(|&r| r == 12), Some(12));
    assert_eq!(m.cancel_where(|&r| r == 12), None);
    // The cancelled receives no longer take messages.
    assert_eq!(taken(m.arrive(msg(1, 1, 0), ())).recv, 11);
    assert!(matches!(m.arrive(msg(5, 2, 0), ()), Arrived::Unexpected(_)));
    assert_eq!(m.posted(), 0);
}

#[test]
fn many_peers_cost_nothing_once_drained() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    for p in 0..10_000 {
        m.arrive(msg(p, u64::from(p), 8), p);
    }
    for p in (0..10_000).rev() {
        let got = matched(m.post(Selector::tag(u64::from(p)).from(PeerId(p)), 0));
        assert_eq!(got.msg, p);
    }
    for p in 0..10_000 {
        queued(m.post(Selector::ANY.from(PeerId(p)), p));
    }
    for p in 0..10_000 {
        assert_eq!(taken(m.arrive(msg(p, 1, 0), 0)).recv, p);
    }
    assert!(m.by_src.is_empty() && m.unexpected_by_src.is_empty());
}

#[test]
fn drain_gives_back_every_posted_receive_in_order() {
    let mut m: Matcher<u32, ()> = Matcher::new();
    for i in 0..6 {
        let sel = if i % 2 == 0 {
            Selector::ANY
        } else {
            Selector::ANY.from(PeerId(i))
        };
        queued(m.post(sel, i));
    }
    assert_eq!(m.drain_posted(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(m.posted(), 0);
}

/// The rules as written (MPI 4.0 §3.5; fi_tagged(3)), with lists scanned in order.
#[derive(Default)]
struct Model {
    posted: Vec<(u64, Selector, u32)>,
    unexpected: Vec<(u64, MsgInfo, u32)>,
    claimed: Vec<(u64, MsgInfo, u32)>,
    next: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Post(Selector, u32),
    Arrive(MsgInfo, u32),
    Peek(Selector),
    Claim(Selector),
    Take(usize),
    Cancel(usize),
}

fn selector() -> impl Strategy<Value = Selector> {
    (
        prop::option::of(0u32..3),
        0u64..4,
        prop_oneof![Just(0u64), Just(1), Just(u64::MAX)],
    )
        .prop_map(|(src, tag, ignore)| Selector {
            src: src.map(PeerId),
            tag,
            ignore,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (selector(), any::<u32>()).prop_map(|(s, r)| Op::Post(s, r)),
        3 => (0u32..3, 0u64..4, any::<u32>())
            .prop_map(|(src, tag, m)| Op::Arrive(msg(src, tag, u64::from(m % 7)), m)),
        1 => selector().prop_map(Op::Peek),
        1 => selector().prop_map(Op::Claim),
        1 => (0usize..4).prop_map(Op::Take),
        1 => (0usize..8).prop_map(Op::Cancel),
    ]
}

proptest! {
    #[test]
    fn matches_the_rules_as_written(ops in prop::collection::vec(op(), 1..120)) {
        let mut m: Matcher<u32, u32> = Matcher::new();
        let mut model = Model::default();
        // Receives still posted (id, the model's number), claims (id, model number).
        let mut ids: Vec<(RecvId, u64)> = Vec::new();
        let mut claims: Vec<(MsgId, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Post(sel, r) => {
                    let k = model.next;
                    model.next += 1;
                    let want = model
                        .unexpected
                        .iter()
                        .position(|(_, i, _)| sel.selects(i.src, i.tag))
                        .map(|at| model.unexpected.remove(at));
                    match (m.post(sel, r), want) {
                        (Posted::Matched(got), Some((_, info, u))) => {
                            prop_assert_eq!((got.recv, got.info, got.msg), (r, info, u));
                        }
                        (Posted::Queued(id), None) => {
                            model.posted.push((k, sel, r));
                            ids.push((id, k));
                        }
                        (got, want) => prop_assert!(false, "post: {:?} against {:?}", got, want),
                    }
                }
                Op::Arrive(info, u) => {
                    let k = model.next;
                    model.next += 1;
                    let want = model
                        .posted
                        .iter()
                        .position(|(_, s, _)| s.selects(info.src, info.tag))
                        .map(|at| model.posted.remove(at));
                    match (m.arrive(info, u), want) {
                        (Arrived::Matched(got), Some((_, _, r))) => {
                            prop_assert_eq!((got.recv, got.info, got.msg), (r, info, u));
                        }
                        (Arrived::Unexpected(_), None) => model.unexpected.push((k, info, u)),
                        (got, want) => prop_assert!(false, "arrive: {:?} against {:?}", got, want),
                    }
                }
                Op::Peek(sel) => {
                    let want = model
                        .unexpected
                        .iter()
                        .find(|(_, i, _)| sel.selects(i.src, i.tag))
                        .map(|&(_, i, u)| (i, u));
                    prop_assert_eq!(m.peek(&sel).map(|(_, i, u)| (*i, *u)), want);
                }
                Op::Claim(sel) => {
                    let want = model
                        .unexpected
                        .iter()
                        .position(|(_, i, _)| sel.selects(i.src, i.tag))
                        .map(|at| model.unexpected.remove(at));
                    match (m.claim(&sel), want) {
                        (Some((id, info)), Some(w)) => {
                            prop_assert_eq!(info, w.1);
                            claims.push((id, w.0));
                            model.claimed.push(w);
                        }
                        (None, None) => {}
                        (got, want) => prop_assert!(false, "claim: {:?} against {:?}", got, want),
                    }
                }
                Op::Take(i) => {
                    if let Some(&(id, k)) = claims.get(i) {
                        claims.remove(i);
                        let at = model.claimed.iter().position(|c| c.0 == k).expect("claimed");
                        let (_, info, u) = model.claimed.remove(at);
                        prop_assert_eq!(m.take_claimed(id), Some((info, u)));
                        prop_assert_eq!(m.take_claimed(id), None);
                    }
                }
                Op::Cancel(i) => {
                    if let Some(&(id, k)) = ids.get(i) {
                        ids.remove(i);
                        let want = model
                            .posted
                            .iter()
                            .position(|p| p.0 == k)
                            .map(|at| model.posted.remove(at).2);
                        prop_assert_eq!(m.cancel(id), want);
                    }
                }
            }
            prop_assert_eq!(m.posted(), model.posted.len());
            prop_assert_eq!(m.unexpected(), model.unexpected.len());
            prop_assert_eq!(m.claimed(), model.claimed.len());
        }
    }
}
