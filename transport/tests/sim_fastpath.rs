//! The common messages take short paths — a one-message request is posted as its cell
//! (`message::work`), and a plain deposit or read request runs at the receiver without
//! a plan (`oplogic::plain_deposit`, `plain_read`) — and must do exactly what the
//! general paths do. Each request here goes twice: as posted (the short paths) and in an
//! indexed form on a register holding 0 (the same address, through the receiver's
//! planner); the bytes that land and the completions (status, the receiver's reason)
//! must be the same, on endpoints with every right and with one right missing.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::{Completion, CqShared, WcStatus, Wqe};
use deposit_transport::node::NodeConfig;
use deposit_transport::sim::{self, LinkConfig};
use deposit_transport::tables::Rights;
use deposit_transport::wire::cell::AddrMode;

/// The completion of `wr` posted alone from `from` (its id, status and reason).
fn run_one(net: &mut deposit_transport::sim::Network, from: &End, wr: Wqe) -> Completion {
    assert!(sim::post(&from.conn, wr));
    complete(net, from, 1, 5).remove(0)
}

#[test]
fn plain_reads_and_writes_without_a_plan_do_what_the_planner_does() {
    let cfg = NodeConfig::default();
    let opts = ConnectOptions {
        isolated: false,
        ..with_registers()
    };
    let (mut net, eps) = network(2, &cfg, LinkConfig::default(), 11);
    open_registers(&mut net, 1, 4);
    // Server endpoints: every right, no read right, no write right.
    let mut servers = vec![(Rights::ALL, eps[1].0)];
    for rights in [
        Rights::REMOTE_WRITE.union(Rights::REMOTE_ATOMIC),
        Rights::REMOTE_READ.union(Rights::REMOTE_ATOMIC),
    ] {
        servers.push((rights, net.hosts[1].endpoint(EP_LEN, rights, 64)));
    }
    let cq_b = CqShared::new(64);
    for (k, &(rights, server_ep)) in servers.iter().enumerate() {
        let (ca, cb) = net
            .connect(
                0,
                eps[0].0,
                &eps[0].1,
                1,
                server_ep,
                &cq_b,
                300 + k as u32,
                &opts,
            )
            .expect("connection comes up");
        let a = End {
            host: 0,
            ep: eps[0].0,
            cq: eps[0].1.clone(),
            conn: ca,
        };
        let b = End {
            host: 1,
            ep: server_ep,
            cq: cq_b.clone(),
            conn: cb,
        };
        let end = EP_LEN as u32;
        // (remote offset, length): inside, at the very end, past the end, overflowing.
        let ranges = [
            (0, 1),
            (4096, 32),
            (8, 0),
            (end - 8, 8),
            (end - 8, 16),
            (end, 1),
        ];
        let ranges = ranges
            .into_iter()
            .chain([(u32::MAX - 3, 8), (end - 4096, 4096)]);
        for (i, (off, len)) in ranges.enumerate() {
            let id = 1000 * k as u64 + 10 * i as u64;
            // Writes (a cell up to 32 bytes, else whole), then reads back into the client.
            let src = pattern(&net, &a, 0, len.max(1) as usize, i as u8);
            let plain = run_one(&mut net, &a, write(id, &a, 0, len, off));
            let after_plain = (off as usize + len as usize <= EP_LEN)
                .then(|| bytes(&net, &b, off as usize, len as usize));
            pattern(&net, &a, 0, len.max(1) as usize, i as u8 ^ 0x55);
            let planned = run_one(
                &mut net,
                &a,
                with_mode(write(id + 1, &a, 0, len, off), AddrMode::Indexed, 0),
            );
            same_outcome(&plain, &planned, rights, "write", off, len);
            if plain.status == WcStatus::Success && len > 0 {
                same(
                    &after_plain.expect("in range"),
                    &src[..len as usize],
                    "plain write landed",
                );
            }
            let want = (off as usize + len as usize <= EP_LEN)
                .then(|| pattern(&net, &b, off as usize, len as usize, 0x3c));
            let plain = run_one(&mut net, &a, read(id + 2, &a, 8192, len, off));
            let got_plain = bytes(&net, &a, 8192, len as usize);
            let planned = run_one(
                &mut net,
                &a,
                with_mode(read(id + 3, &a, 16384, len, off), AddrMode::Indexed, 0),
            );
            let got_planned = bytes(&net, &a, 16384, len as usize);
            same_outcome(&plain, &planned, rights, "read", off, len);
            if plain.status == WcStatus::Success {
                let want = want.expect("in range");
                same(&got_plain, &want, "plain read");
                same(&got_planned, &want, "planned read");
            }
        }
        assert!(live(&a) && live(&b), "refusals leave the connection up");
    }
}

/// The two forms of one request completed alike: `Success` exactly when the range is
/// inside the endpoint and the right is there, else the same error and reason.
fn same_outcome(
    plain: &Completion,
    planned: &Completion,
    rights: Rights,
    what: &str,
    off: u32,
    len: u32,
) {
    assert_eq!(
        (plain.status, plain.remote_reason),
        (planned.status, planned.remote_reason),
        "{what} of {len} at {off} on an endpoint with {rights:?}"
    );
    let right = if what == "read" {
        Rights::REMOTE_READ
    } else {
        Rights::REMOTE_WRITE
    };
    let ok = rights.contains(right) && u64::from(off) + u64::from(len) <= EP_LEN as u64;
    assert_eq!(
        plain.status == WcStatus::Success,
        ok,
        "{what} of {len} at {off} on an endpoint with {rights:?}: {plain:?}"
    );
}
