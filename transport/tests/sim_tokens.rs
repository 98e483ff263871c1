//! Read tokens (wire version 14) between two simulated nodes over an isolated
//! connection: a 1 MiB read of a range the token names, in another endpoint than the
//! connection's, lands byte for byte on a lossy link; a cancelled token and a forged
//! key read nothing and complete with errors the receiver counted; isolation still
//! refuses plain writes, reads and atomics while it takes token writes and reads.

mod common;

use common::*;
use deposit_transport::cm::ConnectOptions;
use deposit_transport::connection::{Completion, Source, WcStatus, Wqe, WrOpcode, WR_SIGNALED};
use deposit_transport::host::Host;
use deposit_transport::node::NodeConfig;
use deposit_transport::oplogic::DropReason;
use deposit_transport::sim::{LinkConfig, Network};
use deposit_transport::tables::{EndpointId, Rights, Token};

/// Bytes the token read moves.
const LEN: u32 = 1 << 20;
/// Where the token's range starts in the server's data endpoint (not page aligned).
const AT: u64 = 4096 + 123;

/// A signaled token read of `len` bytes at `offset` of `token`'s range into the
/// client's endpoint at `dst`.
fn token_read(id: u64, from: &End, token: Token, offset: u64, len: u32, dst: u64) -> Wqe {
    Wqe {
        opcode: WrOpcode::TokenRead {
            token: token.0,
            offset,
        },
        source: Source::None,
        result: Some((from.ep, dst)),
        flags: WR_SIGNALED,
        ..Wqe::write(id, Source::None, len, 0)
    }
}

/// Two hosts over an isolated connection on `link`; the server also has a 2 MiB data
/// endpoint (remote read only, not the connection's) holding a pattern, and a read token
/// over 1 MiB of it at [`AT`]. Returns the network, both ends, the data endpoint, its
/// bytes and the token.
fn setup(link: LinkConfig, seed: u64) -> (Network, End, End, EndpointId, Vec<u8>, Token) {
    let opts = ConnectOptions {
        isolated: true,
        ..ConnectOptions::default()
    };
    let (mut net, client, server) = pair(&NodeConfig::default(), link, seed, &opts);
    let host = &mut net.hosts[server.host];
    let data_ep = host.endpoint(2 << 20, Rights::REMOTE_READ, 16);
    let data: Vec<u8> = (0..2usize << 20)
        .map(|i| (i as u8).wrapping_mul(151) ^ (i >> 12) as u8)
        .collect();
    host.mem(data_ep).write(0, &data).unwrap();
    let token = host
        .node
        .insert_read_token(data_ep, AT, u64::from(LEN), 0x7e57_0ced)
        .unwrap();
    (net, client, server, data_ep, data, token)
}

fn one(net: &mut Network, end: &End, wr: Wqe) -> Completion {
    post_all(end, [wr]);
    let c = complete(net, end, 1, 30);
    c[0]
}

fn drops(net: &Network, end: &End, r: DropReason) -> u64 {
    net.hosts[end.host].node.stats().dropped(r)
}

#[test]
fn a_one_mebibyte_token_read_lands_exactly_over_a_lossy_isolated_connection() {
    let (mut net, client, server, _, data, token) = setup(LinkConfig::lossy(0.03), 21);
    let msgs_before = net.hosts[client.host].node.stats().msgs_rx;
    let c = one(&mut net, &client, token_read(1, &client, token, 0, LEN, 0));
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    assert_eq!(c.byte_len, LEN);
    let start = AT as usize;
    same(
        &bytes(&net, &client, 0, LEN as usize),
        &data[start..start + LEN as usize],
        "the token read",
    );
    // The answer came in many messages, through loss, duplication and reordering.
    let msgs = net.hosts[client.host].node.stats().msgs_rx - msgs_before;
    assert!(msgs > 500, "{msgs} reply messages for 1 MiB");
    let link = net.stats;
    assert!(link.lost > 0 && link.reordered > 0, "{link:?}");
    // A read token serves again: a part of its range, into another place.
    let c = one(
        &mut net,
        &client,
        token_read(2, &client, token, 1000, 5000, 64),
    );
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    same(
        &bytes(&net, &client, 64, 5000),
        &data[start + 1000..start + 6000],
        "the second token read",
    );
    assert_eq!(drops(&net, &server, DropReason::Isolated), 0);
    assert!(live(&client) && live(&server));
}

#[test]
fn cancelled_forged_and_out_of_range_token_reads_read_nothing_and_are_counted() {
    let (mut net, client, server, data_ep, _, token) = setup(LinkConfig::lossy(0.02), 22);
    let sentinel = vec![0xa5u8; 8192];
    net.hosts[client.host]
        .mem(client.ep)
        .write(0, &sentinel)
        .unwrap();
    let untouched = |net: &Network| {
        same(
            &bytes(net, &client, 0, sentinel.len()),
            &sentinel,
            "the result range",
        )
    };
    let refused = |c: Completion, why: DropReason| {
        assert_eq!(
            (c.status, c.remote_reason),
            (WcStatus::RemoteAccessError, Some(why)),
            "{c:?}"
        );
    };

    // A forged key: refused and counted, nothing read; the token stays.
    let forged = Token::new(token.index(), token.key() ^ 0x1000);
    let c = one(
        &mut net,
        &client,
        token_read(1, &client, forged, 0, 4096, 0),
    );
    refused(c, DropReason::TokenKey);
    assert_eq!(drops(&net, &server, DropReason::TokenKey), 1);
    untouched(&net);

    // Past the token's range (by one byte), or at an offset past it.
    let c = one(
        &mut net,
        &client,
        token_read(2, &client, token, u64::from(LEN) - 4095, 4096, 0),
    );
    refused(c, DropReason::OutOfBounds);
    let c = one(
        &mut net,
        &client,
        token_read(3, &client, token, u64::MAX - 8, 16, 0),
    );
    refused(c, DropReason::OutOfBounds);
    assert_eq!(drops(&net, &server, DropReason::OutOfBounds), 2);
    untouched(&net);

    // A write token read: refused for its kind.
    let write_token = net.hosts[server.host]
        .node
        .insert_token(data_ep, 0, 64, 0x1234)
        .unwrap();
    let c = one(
        &mut net,
        &client,
        token_read(4, &client, write_token, 0, 8, 0),
    );
    refused(c, DropReason::TokenKind);
    assert_eq!(drops(&net, &server, DropReason::TokenKind), 1);
    untouched(&net);

    // The genuine token reads...
    let c = one(
        &mut net,
        &client,
        token_read(5, &client, token, 0, 16, 8192),
    );
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    // ...until its owner cancels it; then every copy is refused, nothing read.
    net.hosts[server.host].node.cancel_token(token).unwrap();
    let c = one(&mut net, &client, token_read(6, &client, token, 0, 4096, 0));
    refused(c, DropReason::BadToken);
    assert_eq!(drops(&net, &server, DropReason::BadToken), 1);
    untouched(&net);
    assert!(live(&client) && live(&server), "refusals leave it up");
}

#[test]
fn isolation_takes_token_writes_and_reads_and_still_refuses_plain_operations() {
    let (mut net, client, server, _, _, token) = setup(LinkConfig::default(), 23);
    let before = bytes(&net, &server, 0, 4096);
    pattern(&net, &client, 0, 4096, 9);
    // A plain write, read and atomic name the receiver's memory: refused.
    for (i, wr) in [
        write(1, &client, 0, 64, 0),
        read(2, &client, 0, 64, 0),
        fetch_add(3, &client, 0, 0, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let c = one(&mut net, &client, wr);
        assert_eq!(
            (c.status, c.remote_reason),
            (WcStatus::RemoteAccessError, Some(DropReason::Isolated)),
            "request {i}: {c:?}"
        );
    }
    assert_eq!(drops(&net, &server, DropReason::Isolated), 3);
    same(
        &bytes(&net, &server, 0, 4096),
        &before,
        "the connection's endpoint",
    );

    // A write token the receiver handed out: taken.
    let wt = net.hosts[server.host]
        .node
        .insert_token(server.ep, 256, 64, 0x77)
        .unwrap();
    let mut wr = write(4, &client, 0, 64, 0);
    wr.opcode = WrOpcode::TokenWrite { token: wt.0 };
    let c = one(&mut net, &client, wr);
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    same(
        &bytes(&net, &server, 256, 64),
        &bytes(&net, &client, 0, 64),
        "the token write",
    );
    // And a read token.
    let c = one(
        &mut net,
        &client,
        token_read(5, &client, token, 0, 64, 4096),
    );
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    assert_eq!(drops(&net, &server, DropReason::Isolated), 3);
}

#[test]
fn a_token_write_behind_a_token_read_of_the_same_bytes_waits_for_the_answer() {
    // In-order execution across endpoints: the read's answer is built from memory
    // when sent, so a later deposit into its range (another endpoint than the
    // connection's) waits until the answer is acknowledged, and the read returns
    // the bytes as they were when it ran.
    let (mut net, client, server) = pair(
        &NodeConfig::default(),
        LinkConfig::default(),
        24,
        &ConnectOptions::default(),
    );
    let host = &mut net.hosts[server.host];
    let ep = host.endpoint(256 << 10, Rights::ALL, 16);
    let old = vec![0x11u8; 64 << 10];
    host.mem(ep).write(0, &old).unwrap();
    let rt = host.node.insert_read_token(ep, 0, 64 << 10, 5).unwrap();
    // A deposit fits one message.
    let wt = host.node.insert_token(ep, 1 << 10, 1000, 6).unwrap();
    pattern(&net, &client, 256 << 10, 1000, 3);
    let mut deposit = write(2, &client, 256 << 10, 1000, 0);
    deposit.opcode = WrOpcode::TokenWrite { token: wt.0 };
    post_all(
        &client,
        [token_read(1, &client, rt, 0, 64 << 10, 0), deposit],
    );
    let c = complete(&mut net, &client, 2, 30);
    all_ok(&c);
    same(
        &bytes(&net, &client, 0, 64 << 10),
        &old,
        "the read's answer",
    );
    let mut now = vec![0u8; 1000];
    net.hosts[server.host]
        .mem(ep)
        .read(1 << 10, &mut now)
        .unwrap();
    same(
        &now,
        &bytes(&net, &client, 256 << 10, 1000),
        "the deposit, after the read",
    );
}
