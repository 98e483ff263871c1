//! barrier: one node of the seed's three-node barrier (docs/design.md §1): each node
//! toggles its bit in a barrier register of every node, itself included, and waits
//! for the conditional interrupt its own register raises when all the bits are set
//! (or, on the way back, all clear). No node's host handles another's message: the
//! receivers' workers do the xor and the compare.
//!
//! ```sh
//! barrier NODE_INDEX PORT_SPEC      # e.g. barrier 0 af_packet:veth-b0
//! sudo examples/barrier.sh          # all three, each in a network namespace
//! ```
//!
//! Node i (0, 1 or 2) is 10.0.0.(i+1) on PORT_SPEC, a port that reaches the two other
//! nodes and itself: one end of a veth pair whose other end is on a Linux bridge with
//! hairpin on (`examples/barrier.sh` builds that). Every node runs the same program.
//!
//! Registers of every node, given to every incoming connection: r0 and r1 the barrier
//! registers of even and odd rounds, r2..r4 the bit of node 0..2 (senders may read
//! them, as the source of their xor). One round, sent by node `me` to every node:
//!
//! ```text
//! r_round ^= <r_(2+me)>;  if <r_round> == target: interrupt   (target: 0b111 or 0)
//! ```
//!
//! Alternating the register between rounds keeps a fast node's next toggle from
//! landing before a slow node's toggle of the round before.

use std::time::{Duration, Instant};

use deposit::{
    CompletionQueue, Cond, ConnOptions, Connection, Device, DeviceConfig, Endpoint, EventKind,
    Order, Progress, RegOp, RegProt, Registers, Rights, Src, WcStatus, WorkRequest,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const NODES: usize = 3;
const ROUNDS: u32 = 4;
const SERVICE: u32 = 40;
/// The bound on every wait (the three processes start at about the same time, but
/// on a busy machine DPDK's start-up can take seconds).
const T: Duration = Duration::from_secs(30);

fn ip(node: usize) -> [u8; 4] {
    [10, 0, 0, node as u8 + 1]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let me = match args.first().map(|a| a.parse::<usize>()) {
        Some(Ok(i)) if i < NODES && args.len() == 2 => i,
        _ => {
            eprintln!(
                "usage: barrier NODE_INDEX PORT_SPEC  (NODE_INDEX 0, 1 or 2; e.g. af_packet:veth0)"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(me, &args[1]) {
        eprintln!("barrier node {me}: FAILED: {e}");
        std::process::exit(1);
    }
}

/// Connects to `node`, trying again until `deadline`: the other nodes start at
/// about the same time, so one may not be listening yet.
fn connect(
    dev: &Device,
    node: usize,
    ep: &Endpoint,
    cq: &CompletionQueue,
    opts: &ConnOptions,
    deadline: Instant,
) -> Result<Connection> {
    loop {
        match dev.connect_with(ip(node), SERVICE, ep, cq, opts) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("connecting to node {node}: {e}").into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn run(me: usize, port: &str) -> Result<()> {
    let start = Instant::now();
    // A worker thread of its own serves the port, so that this node answers its peers
    // while its application thread sleeps on the event queue. Standard Ethernet
    // frames: the veths have an MTU of 1500.
    let mut cfg = DeviceConfig::new(port, ip(me))
        .progress(Progress::Dedicated)
        .max_frame(1514);
    cfg.cm_timeout = Duration::from_secs(10);
    let dev = Device::open(cfg)?;
    let ep = dev.alloc_endpoint(4096, Rights::REMOTE_WRITE)?;

    // The registers: r0, r1 the barrier registers (senders xor into them: WRITE),
    // r2..r4 each node's bit (senders read them as the xor's source: READ).
    let regs = ep.alloc_registers(2 + NODES as u32)?;
    for r in 0..2 {
        dev.set_register_protection(regs, r, RegProt::WRITE)?;
    }
    for n in 0..NODES as u32 {
        dev.write_register(regs, 2 + n, 1 << n)?;
        dev.set_register_protection(regs, 2 + n, RegProt::READ)?;
    }
    let cq = dev.create_cq(256);
    let opts = ConnOptions {
        registers: Registers::Window(regs),
        // Only the barrier's conditional may interrupt this host.
        allow_forced_interrupts: false,
        ..ConnOptions::default()
    };
    let listener = dev.listen_with(SERVICE, &ep, &cq, &opts)?;

    // A connection to every node (itself included, through the bridge), and the three
    // incoming ones, kept for the whole run.
    let deadline = Instant::now() + T;
    let out: Vec<Connection> = (0..NODES)
        .map(|n| connect(&dev, n, &ep, &cq, &opts, deadline))
        .collect::<Result<_>>()?;
    let incoming: Vec<Connection> = (0..NODES)
        .map(|_| listener.accept(T))
        .collect::<std::result::Result<_, _>>()?;
    println!(
        "barrier node {me}: 10.0.0.{} connected to all {NODES} nodes",
        me + 1
    );

    let all = (1u32 << NODES) - 1;
    let events = ep.events();
    for r in 0..ROUNDS {
        let reg = (r % 2) as u8;
        // Rounds 0 and 1 set the bits, 2 and 3 clear them again.
        let target = if (r / 2) % 2 == 0 { all } else { 0 };
        let t0 = Instant::now();
        for c in &out {
            let toggle = WorkRequest::reg_op(u64::from(r))
                .op1(RegOp::Xor, reg, Src::Reg(2 + me as u8))
                .operand(target)
                .cond(Cond::Eq, Src::Operand, reg)
                // Compare after the xor.
                .order(Order::CondLast)
                .signaled();
            c.post(&toggle)?;
        }
        let ev = events
            .wait(T)
            .ok_or_else(|| format!("no barrier interrupt in round {r}"))?;
        if ev.kind != EventKind::Interrupt || ev.regs[3] != u64::from(target) {
            return Err(format!("round {r}: unexpected event {ev:?}").into());
        }
        println!(
            "barrier node {me}: round {r} passed (register r{reg} = {target:#05b}) after {:.1?}",
            t0.elapsed()
        );
    }
    for _ in 0..ROUNDS as usize * NODES {
        let wc = cq.wait_one(T).ok_or("a toggle never completed")?;
        if wc.status != WcStatus::Success {
            return Err(format!("a toggle completed with {wc:?}").into());
        }
    }
    if let Some(ev) = events.poll() {
        return Err(format!("an event after the last round: {ev:?}").into());
    }

    // Every toggle of ours has been executed everywhere. The others may still be
    // waiting for the acknowledgements of their last toggles into our registers:
    // keep serving a moment (the worker does it), then close. A disconnect carries
    // our acknowledgement too, so what ran here completes at the sender as a success.
    std::thread::sleep(Duration::from_millis(500));
    drop(out);
    drop(incoming);
    std::thread::sleep(Duration::from_millis(200));
    println!(
        "barrier node {me}: {ROUNDS} rounds passed, every toggle verified; {:.1?} in all",
        start.elapsed()
    );
    Ok(())
}
