//! Quick checks of every main operation over ring (the seed examples live in
//! `seed_examples.rs`).

use std::time::Duration;

use deposit::*;
use deposit_tests::*;

const T: Duration = Duration::from_secs(10);

fn setup(name: &str, opts: ConnOptions, rights: Rights) -> (RingPair, Conns, RegWindow) {
    let pair = RingPair::new(name);
    let sep = pair.server.alloc_endpoint(65536, rights).unwrap();
    let scq = pair.server.create_cq(4096);
    let regs = pair.server.alloc_registers(16).unwrap();
    let mut opts = opts;
    if matches!(opts.registers, Registers::None) {
        opts.registers = Registers::Window(regs);
    }
    let listener = pair.server.listen_with(3, &sep, &scq, &opts).unwrap();
    let cep = pair
        .client
        .alloc_endpoint(65536, Rights::REMOTE_WRITE)
        .unwrap();
    let ccq = pair.client.create_cq(4096);
    let client = pair.client.connect([10, 0, 0, 1], 3, &cep, &ccq).unwrap();
    let server = listener.accept(T).unwrap();
    let c = Conns::from_parts(client, server, cep, sep, ccq, listener);
    (pair, c, regs)
}

#[test]
fn read_fetch_add_and_cmp_swap_return_what_the_receiver_holds() {
    let (pair, c, _) = setup("ops1", ConnOptions::default(), Rights::ALL);
    fill_pattern(&c.sep, 0, 20000, 5, 0);
    c.client
        .post(&WorkRequest::read(1, &c.cep, 100, 20000, 0).signaled())
        .unwrap();
    let wc = c.ccq.wait_one(T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    check_pattern(&c.cep, 100, 20000, 5, 0).unwrap();

    c.sep.write(40000, &41u64.to_ne_bytes()).unwrap();
    c.client
        .post(&WorkRequest::fetch_add(2, &c.cep, 0, 40000, 1).signaled())
        .unwrap();
    assert_eq!(c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    assert_eq!(c.cep.load_u64(0).unwrap(), 41);
    assert_eq!(c.sep.load_u64(40000).unwrap(), 42);

    c.client
        .post(&WorkRequest::cmp_swap(3, &c.cep, 8, 40000, 42, 7).signaled())
        .unwrap();
    c.client
        .post(&WorkRequest::cmp_swap(4, &c.cep, 16, 40000, 42, 9).signaled())
        .unwrap();
    for _ in 0..2 {
        assert_eq!(c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    }
    assert_eq!(c.cep.load_u64(8).unwrap(), 42);
    assert_eq!(c.cep.load_u64(16).unwrap(), 7);
    assert_eq!(c.sep.load_u64(40000).unwrap(), 7);
    drop(pair);
}

#[test]
fn send_is_a_write_at_the_receivers_queue_pointer() {
    let (pair, c, regs) = setup("ops2", ConnOptions::default(), Rights::REMOTE_WRITE);
    pair.server.write_register(regs, 0, 1024).unwrap();
    pair.server.write_register(regs, 1, 64).unwrap();
    pair.server
        .set_register_protection(regs, 0, RegProt::INDIRECT)
        .unwrap();
    for i in 0..10u8 {
        c.client
            .post(&WorkRequest::send_inline(i as u64, &[i + 1; 16], 0).unwrap())
            .unwrap();
    }
    c.client.post(&WorkRequest::reg_op(99).signaled()).unwrap();
    assert_eq!(c.ccq.wait_one(T).unwrap().status, WcStatus::Success);
    for i in 0..10u8 {
        let mut b = [0u8; 16];
        c.sep.read(1024 + 64 * i as u64, &mut b).unwrap();
        assert_eq!(b, [i + 1; 16]);
    }
    assert_eq!(pair.server.read_register(regs, 0).unwrap(), 1024 + 640);
}

#[test]
fn a_conditional_interrupt_posts_an_event() {
    let (pair, c, regs) = setup("ops3", ConnOptions::default(), Rights::REMOTE_WRITE);
    pair.server
        .set_register_protection(regs, 2, RegProt::WRITE)
        .unwrap();
    // r2 += operand; interrupt when r2 >= 3.
    for i in 0..4 {
        let wr = WorkRequest::reg_op(i)
            .operand(1)
            .op1(RegOp::Add, 2, Src::Operand)
            .cond(Cond::Ge, Src::Reg(3), 2)
            .order(Order::CondLast);
        c.client.post(&wr).unwrap();
    }
    pair.server.write_register(regs, 3, 3).unwrap();
    let ev = wait_event(&pair.client, &c.sep, T).expect("event");
    assert_eq!(ev.kind, EventKind::Interrupt);
    assert_eq!(ev.regs[1], 3);
    let ev = wait_event(&pair.client, &c.sep, T).expect("second event");
    assert_eq!(ev.regs[1], 4);
    assert!(wait_event(&pair.client, &c.sep, Duration::from_millis(50)).is_none());
}

#[test]
fn a_page_not_present_holds_its_connection_until_resumed() {
    let (pair, c, _) = setup("ops4", ConnOptions::default(), Rights::REMOTE_WRITE);
    c.sep.set_page_present(2, false).unwrap();
    c.client
        .post(
            &WorkRequest::write_inline(1, b"first", 8192)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    c.client
        .post(
            &WorkRequest::write_inline(2, b"second", 100)
                .unwrap()
                .signaled(),
        )
        .unwrap();
    assert!(wait_until(&pair.client, T, || c.server.state()
        == ConnState::Exceptioned));
    check_zero(&c.sep, 0, 65536).unwrap();
    assert!(c.ccq.wait_one(Duration::from_millis(100)).is_none());
    c.sep.set_page_present(2, true).unwrap();
    c.server.resume().unwrap();
    let a = c.ccq.wait_one(T).unwrap();
    let b = c.ccq.wait_one(T).unwrap();
    assert_eq!(
        (a.wr_id, a.status, b.wr_id, b.status),
        (1, WcStatus::Success, 2, WcStatus::Success)
    );
    let mut got = [0u8; 5];
    c.sep.read(8192, &mut got).unwrap();
    assert_eq!(&got, b"first");
    assert_eq!(c.server.arrivals(), 2);
}
