//! Bad input on the wire: every kind of bad frame is dropped and counted by reason,
//! nothing outside what a connection may touch is written, nothing panics, and the
//! legitimate connection keeps working.

use std::time::Duration;

use deposit::*;
use deposit_tests::*;
use deposit_transport::wire::{hflags, op};

const T: Duration = Duration::from_secs(10);

/// Sends `f` from the client device and waits until the server has counted one more
/// drop of `reason`.
fn inject_expect(pair: &RingPair, f: &[u8], reason: DropReason) {
    let before = pair.server.stats().dropped(reason);
    pair.client.send_raw_frame(f);
    assert!(
        wait_until(&pair.client, T, || pair.server.stats().dropped(reason)
            > before),
        "no {reason:?} drop counted; stats {:?}",
        pair.server.stats()
    );
}

#[test]
fn bad_frames_are_dropped_and_counted_by_reason() {
    let pair = RingPair::new("hostile");
    let c = pair.connect(4096, 5);
    let conn = c.server.local_number();
    let key = c.server.local_key();
    let good = raw_frame(conn, key ^ 1, 0, &[write_msg(0, b"evil")]);

    // Wrong key on a real connection.
    inject_expect(&pair, &good, DropReason::WrongKey);
    // Unknown connection.
    inject_expect(
        &pair,
        &raw_frame(conn ^ 0x5a5a, key, 0, &[write_msg(0, b"evil")]),
        DropReason::UnknownConnection,
    );
    // Bad CRC: flip one payload bit of an otherwise valid frame with the right key.
    let mut f = raw_frame(conn, key, 0, &[write_msg(0, b"evil")]);
    let n = f.len();
    f[n - 10] ^= 0x04;
    inject_expect(&pair, &f, DropReason::BadCrc);
    // Truncated frames, at every length.
    let f = raw_frame(conn, key, 0, &[write_msg(0, &[0xEE; 200])]);
    for cut in [0, 1, 13, 14, 33, 41, 42, 60, 73, 74, 100, f.len() - 1] {
        let reason = if cut < 60 {
            None
        } else {
            Some(DropReason::Truncated)
        };
        match reason {
            Some(r) => inject_expect(&pair, &f[..cut], r),
            None => pair.client.send_raw_frame(&f[..cut]),
        }
    }
    // Bad check byte in a frame whose CRC is right: the control part is refused.
    let (mut c0, p0) = write_msg(0, b"evil");
    c0.opcode = op::WRITE;
    let mut f = raw_frame(conn, key, 0x7777_0000, &[(c0, p0)]);
    // Corrupt the check byte (byte 3 of the control part after the 42+32 headers), then
    // recompute the CRC so only the check byte is wrong.
    f[42 + 32 + 3] ^= 0xff;
    let crc_at = f.len() - 4;
    let crc = crc32c::crc32c(&f[42..crc_at]);
    f[crc_at..].copy_from_slice(&crc.to_be_bytes());
    inject_expect(&pair, &f, DropReason::BadCheck);
    // Not our UDP port / not IPv4: ignored as not ours.
    let mut f = raw_frame(conn, key, 0, &[write_msg(0, b"evil")]);
    f[12] = 0x86;
    f[13] = 0xdd;
    inject_expect(&pair, &f, DropReason::NotOurs);
    // Random garbage.
    let mut x = 0x1234_5678_9abc_def0u64;
    for i in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 1600) as usize;
        let g: Vec<u8> = (0..len).map(|j| (x >> (j % 56)) as u8 ^ j as u8).collect();
        pair.client.send_raw_frame(&g);
        if i % 64 == 0 {
            pair.client.progress();
        }
    }
    // Offsets past the endpoint from the real client: refused remotely and reported.
    c.client
        .post(
            &WorkRequest::write_inline(1, b"past", 4094)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    assert_eq!(
        c.ccq.wait_one(T).unwrap().status,
        WcStatus::RemoteAccessError
    );
    c.client
        .post(&WorkRequest::write(2, &c.cep, 0, 4096, 1).signaled())
        .unwrap();
    assert_eq!(
        c.ccq.wait_one(T).unwrap().status,
        WcStatus::RemoteAccessError
    );

    // Nothing was written by any of it, and the connection still works.
    check_zero(&c.sep, 0, 4096).unwrap();
    c.client
        .post(
            &WorkRequest::write_inline(3, b"still fine", 100)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    assert_eq!(c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert!(wait_until(&pair.client, T, || c.server.arrivals() == 3));
    let mut got = [0u8; 10];
    c.sep.read(100, &mut got).unwrap();
    assert_eq!(&got, b"still fine");
    let st = pair.server.stats();
    assert_eq!(st.dropped(DropReason::OutOfBounds), 2, "{st:?}");
    assert!(st.dropped_total() > 2000 / 2, "garbage counted: {st:?}");
}

#[test]
fn frames_without_a_valid_connection_never_reach_memory() {
    // A valid-looking frame with hflags::CM and a forged connect reply must not
    // create state; a frame with seq far ahead is refused as out of sequence.
    let pair = RingPair::new("hostile2");
    let c = pair.connect(4096, 5);
    let conn = c.server.local_number();
    let key = c.server.local_key();
    inject_expect(
        &pair,
        &raw_frame(conn, key, 0x4000_0000, &[write_msg(0, b"future")]),
        DropReason::OutOfSequence,
    );
    let (mut cm, p) = write_msg(0, b"x");
    cm.opcode = op::CM_CONNECT_REP;
    let mut f = raw_frame(0, 0, 0, &[(cm, p)]);
    f[42 + 1] = hflags::CM;
    let crc_at = f.len() - 4;
    let crc = crc32c::crc32c(&f[42..crc_at]);
    f[crc_at..].copy_from_slice(&crc.to_be_bytes());
    inject_expect(&pair, &f, DropReason::BadLength);
    check_zero(&c.sep, 0, 4096).unwrap();
}

#[test]
fn null_port_exercises_the_tx_path() {
    // Nobody answers on a null port: connection requests go out (counted) and the
    // connect fails with a timeout, bounded by the CM timeout.
    let mut cfg = DeviceConfig::new("null", [10, 0, 0, 2]);
    cfg.cm_timeout = Duration::from_millis(300);
    let dev = Device::open(cfg).unwrap();
    let ep = dev.alloc_endpoint(4096, Rights::REMOTE_WRITE).unwrap();
    let cq = dev.create_cq(16);
    let start = std::time::Instant::now();
    match dev.connect([10, 0, 0, 1], 1, &ep, &cq) {
        Err(Error::Rejected(RejectReason::Timeout)) => {}
        other => panic!("expected timeout, got {:?}", other.err()),
    }
    assert!(start.elapsed() < Duration::from_secs(3));
    let st = dev.stats();
    assert!(
        st.frames_tx >= 2,
        "connect requests retried on the wire: {st:?}"
    );
    assert_eq!(st.frames_rx, 0);
}
