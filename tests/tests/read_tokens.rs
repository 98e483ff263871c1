//! Read tokens over ring (wire version 14): the zero-copy rendezvous tagged messaging
//! needs. The server, the "sender" of a message, registers an application buffer as an
//! endpoint and hands out a read token over it; the client, over an isolated connection
//! (it names nothing of the server's but the token), reads 1 MiB with one work request
//! straight into its own buffer, byte for byte. Then the server cancels the token: the
//! same read completes with an error, counted at the server, and writes nothing.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 1 << 20;
/// Where the message starts in the sender's buffer (not page aligned).
const AT: usize = 777;

#[test]
fn a_one_mebibyte_token_read_over_an_isolated_connection_lands_byte_for_byte() {
    let pair = RingPair::new("rtok");
    let opts = ConnOptions {
        isolated: true,
        ..ConnOptions::default()
    };
    let (c, _scq) = pair.connect_with(4096, 7, Rights::NONE, &opts);

    // The sender's buffer, registered where it is (like ibv_reg_mr), readable only.
    let mut buf: Vec<u8> = (0..LEN + 2 * AT)
        .map(|i| (i as u8).wrapping_mul(73) ^ (i >> 11) as u8)
        .collect();
    let want = buf[AT..AT + LEN].to_vec();
    // SAFETY: `buf` outlives the endpoint and the devices (dropped at the end). On the
    // shard of the listener's endpoint: a token is its endpoint's shard's, and serves
    // that shard's connections (several workers: DEPOSIT_WORKERS).
    let src = unsafe {
        pair.server
            .register_endpoint_on(
                c.sep.shard(),
                buf.as_mut_ptr(),
                buf.len(),
                Rights::REMOTE_READ,
            )
            .unwrap()
    };
    let token = pair
        .server
        .create_read_token(&src, AT as u64, LEN as u64)
        .unwrap();
    // Outside the endpoint: refused at once.
    assert!(pair
        .server
        .create_read_token(&src, AT as u64, buf.len() as u64)
        .is_err());

    // The receiver's posted buffer: where the answer lands.
    // On the client connection's shard: a read's answer lands through it.
    let dst = pair
        .client
        .alloc_endpoint_on(c.cep.shard(), LEN as u64 + 4096, Rights::NONE)
        .unwrap();
    c.client
        .post(&WorkRequest::read_with_token(1, token, 0, &dst, 4096, LEN as u32).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).expect("the token read completes");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, LEN as u32),
        "{wc:?}"
    );
    let got = memory_snapshot(&dst, LEN + 4096);
    assert!(
        got[..4096].iter().all(|&b| b == 0),
        "before the result range"
    );
    if let Some(i) = got[4096..].iter().zip(&want).position(|(a, b)| a != b) {
        panic!("byte {i} of the token read differs");
    }

    // A part of it again (the token serves until cancelled), and a plain read on the
    // isolated connection, which names the server's memory: refused.
    c.client
        .post(&WorkRequest::read_with_token(2, token, 5000, &dst, 0, 3000).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).unwrap();
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(memory_snapshot(&dst, 3000), want[5000..8000]);
    c.client
        .post(&WorkRequest::read(3, &dst, 0, 64, 0).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).unwrap();
    assert_eq!(
        (wc.status, wc.remote_reason),
        (WcStatus::RemoteAccessError, Some(DropReason::Isolated)),
        "{wc:?}"
    );

    // Cancelled: the same read is refused, counted, and writes nothing.
    pair.server.cancel_token(token).unwrap();
    assert!(pair.server.cancel_token(token).is_err(), "cancelled once");
    dst.write(0, &vec![0x5a; LEN + 4096]).unwrap();
    c.client
        .post(&WorkRequest::read_with_token(4, token, 0, &dst, 4096, LEN as u32).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.remote_reason),
        (4, WcStatus::RemoteAccessError, Some(DropReason::BadToken)),
        "{wc:?}"
    );
    assert!(
        memory_snapshot(&dst, LEN + 4096).iter().all(|&b| b == 0x5a),
        "a refused token read wrote"
    );
    let stats = pair.server.stats();
    assert_eq!(stats.dropped(DropReason::BadToken), 1, "{stats:?}");
    assert_eq!(stats.dropped(DropReason::Isolated), 1, "{stats:?}");
    assert_eq!(c.client.state(), ConnState::Normal);

    drop(c);
    drop(src);
    drop(pair);
    drop(buf);
}
