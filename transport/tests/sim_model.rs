//! Property: any mix of operations on one connection, over a clean or a hostile
//! simulated link, leaves the receiver's memory and registers, and the sender's read
//! and atomic results, exactly as a model that runs the same operations once, in
//! posting order, says.

mod common;

use common::*;
use deposit_transport::connection::WcStatus;
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::LinkConfig;
use deposit_transport::wire::cell::AddrMode;
use proptest::prelude::*;

/// Where things are in the endpoints (1 MiB each).
const SRC_LEN: usize = 64 << 10; // sender: the source pattern
const RESULTS: usize = 128 << 10; // sender: one 4 KiB result slot per operation
const QUEUE: u64 = 300 << 10; // receiver: r0, the send queue (stride r1)
const STRIDE: u64 = 4096;
const INDEX_BASE: u64 = 600 << 10; // receiver: r2, the base of indexed writes
const WORDS: usize = 900 << 10; // receiver: atomic words

#[derive(Debug, Clone)]
enum Op {
    Write {
        dst: u32,
        len: u32,
    },
    Send {
        len: u32,
    },
    Indexed {
        off: u32,
        len: u32,
    },
    FetchAdd {
        slot: u32,
        add: u64,
    },
    CmpSwap {
        slot: u32,
        hit: bool,
        swap: u64,
    },
    Read {
        src: u32,
        len: u32,
    },
    /// A write that runs past the receiver's endpoint: refused (RemoteAccessError),
    /// nothing of it lands, the rest goes on.
    Outside {
        len: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..200_000, 1u32..5000).prop_map(|(dst, len)| Op::Write { dst, len }),
        (1u32..STRIDE as u32).prop_map(|len| Op::Send { len }),
        (0u32..50_000, 1u32..3000).prop_map(|(off, len)| Op::Indexed { off, len }),
        (0u32..8, any::<u64>()).prop_map(|(slot, add)| Op::FetchAdd { slot, add }),
        (0u32..8, any::<bool>(), any::<u64>()).prop_map(|(slot, hit, swap)| Op::CmpSwap {
            slot,
            hit,
            swap
        }),
        (0u32..200_000, 1u32..4000).prop_map(|(src, len)| Op::Read { src, len }),
        // One message (a longer one's first segments would land before its last is
        // refused: verbs leaves a failed write's target undefined too).
        (2u32..1000).prop_map(|len| Op::Outside { len }),
    ]
}

/// The receiver as the model sees it.
struct Model {
    mem: Vec<u8>,
    r0: u64,
}

impl Model {
    fn word(&self, slot: u32) -> u64 {
        let at = WORDS + slot as usize * 8;
        u64::from_ne_bytes(self.mem[at..at + 8].try_into().unwrap())
    }
    fn set_word(&mut self, slot: u32, v: u64) {
        let at = WORDS + slot as usize * 8;
        self.mem[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

fn run(ops: &[Op], link: LinkConfig, seed: u64) -> Result<(), TestCaseError> {
    let (mut net, a, b) = pair(&NodeConfig::default(), link, seed, &with_registers());
    open_registers(&mut net, 1, 3);
    let node = &mut net.hosts[1].node;
    node.set_register(0, QUEUE).unwrap();
    node.set_register(1, STRIDE).unwrap();
    node.set_register(2, INDEX_BASE).unwrap();
    let src = pattern(&net, &a, 0, SRC_LEN, seed as u8);
    let mut model = Model {
        mem: vec![0; EP_LEN],
        r0: QUEUE,
    };
    // What each operation's result slot must hold at the sender.
    let mut results: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut wrs = Vec::new();
    let mut refused = std::collections::HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        let id = i as u64;
        let s = (i * 997) % (SRC_LEN - 5000);
        let slot = RESULTS + i * 4096;
        let put = |model: &mut Model, at: usize, len: u32| {
            model.mem[at..at + len as usize].copy_from_slice(&src[s..s + len as usize]);
        };
        let wr = match *op {
            Op::Write { dst, len } => {
                put(&mut model, dst as usize, len);
                write(id, &a, s as u64, len, dst)
            }
            Op::Send { len } => {
                let at = model.r0 as usize;
                put(&mut model, at, len);
                model.r0 += STRIDE;
                with_mode(write(id, &a, s as u64, len, 0), AddrMode::PostIncrement, 0)
            }
            Op::Indexed { off, len } => {
                put(&mut model, INDEX_BASE as usize + off as usize, len);
                let mut wr = with_mode(write(id, &a, s as u64, len, off), AddrMode::Indexed, 2);
                wr.remote.operand = off;
                wr
            }
            Op::FetchAdd { slot: w, add } => {
                let old = model.word(w);
                model.set_word(w, old.wrapping_add(add));
                results.push((slot, old.to_ne_bytes().to_vec()));
                fetch_add(id, &a, slot as u64, (WORDS + w as usize * 8) as u32, add)
            }
            Op::CmpSwap { slot: w, hit, swap } => {
                let old = model.word(w);
                let compare = if hit { old } else { old ^ 1 };
                if hit {
                    model.set_word(w, swap);
                }
                results.push((slot, old.to_ne_bytes().to_vec()));
                cmp_swap(
                    id,
                    &a,
                    slot as u64,
                    (WORDS + w as usize * 8) as u32,
                    compare,
                    swap,
                )
            }
            Op::Outside { len } => {
                refused.insert(id);
                // Starts inside, ends outside: the whole write is refused.
                write(id, &a, s as u64, len, (EP_LEN - len as usize / 2) as u32)
            }
            Op::Read { src: at, len } => {
                let at = at as usize;
                results.push((slot, model.mem[at..at + len as usize].to_vec()));
                read(id, &a, slot as u64, len, at as u32)
            }
        };
        wrs.push(wr);
    }
    post_all(&a, wrs);
    let done = complete(&mut net, &a, ops.len(), 120);
    for c in &done {
        let want = if refused.contains(&c.wr_id) {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::Success
        };
        prop_assert_eq!(c.status, want, "{:?}", c);
    }
    prop_assert!(
        done.windows(2).all(|w| w[0].wr_id < w[1].wr_id),
        "completions in order"
    );
    same(&bytes(&net, &b, 0, EP_LEN), &model.mem, "receiver memory");
    prop_assert_eq!(
        net.hosts[1].node.register(0),
        Some(model.r0),
        "send queue pointer"
    );
    prop_assert_eq!(
        net.hosts[1].node.register(2),
        Some(INDEX_BASE),
        "index base untouched"
    );
    for (slot, want) in results {
        same(
            &bytes(&net, &a, slot, want.len()),
            &want,
            &format!("result at {slot}"),
        );
    }
    Ok(())
}

proptest! {
    // The same 48 cases on every run (CI must not flake on a new random case); set
    // PROPTEST_RNG_SEED to explore others.
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: match ProptestConfig::default().rng_seed {
            proptest::test_runner::RngSeed::Random => proptest::test_runner::RngSeed::Fixed(20_261_124),
            seed => seed,
        },
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operation_mixes_match_the_model(
        ops in prop::collection::vec(op(), 1..60),
        seed in 1u64..1_000_000,
        hostile in 0usize..3,
    ) {
        let link = [LinkConfig::default(), LinkConfig::lossy(0.02), LinkConfig::lossy(0.08)][hostile];
        run(&ops, link, seed)?;
    }
}

/// A case the property found: the connect request's Ethernet source MAC was
/// corrupted on the link (the frame CRC does not cover the Ethernet header), the
/// server learned the wrong MAC and every answer went astray until RetryExceeded. The
/// requester's MAC now travels in the CRC-covered payload.
#[test]
fn a_corrupted_source_mac_on_the_connect_request_is_not_learned() {
    run(
        &[Op::Write { dst: 0, len: 1 }],
        LinkConfig::lossy(0.08),
        715569,
    )
    .unwrap();
}
