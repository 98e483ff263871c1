//! Soak (issue 4): the mixed workload of [`deposit_tests::soak`] between two nodes in
//! one process on a cross-connected ring pair, under 1 %, 5 % and 10 % loss combined
//! with reordering, duplication and corruption on what each node receives. Every
//! round is checked byte for byte; see the module for what is checked.
//!
//! `DEPOSIT_SOAK_OPS` sets the operations per test (default [`CI_OPS`]; the issue's
//! 10^6 is `DEPOSIT_SOAK_OPS=1000000`), `DEPOSIT_SOAK_SECS` the time bound.

use std::time::{Duration, Instant};

use deposit::*;
use deposit_tests::soak::{self, Plan, Sender};
use deposit_tests::*;

/// Operations per test by default (keeps the soak set within the CI budget).
const CI_OPS: u64 = 50_000;
const SECS: u64 = 120;

fn soak_on_ring(name: &str, loss_pct: u32, seed: u64) {
    let spec = match loss_pct {
        0 => String::new(),
        l => soak::fault_spec(l),
    };
    let config = |node_seed: u64| {
        let f: FaultConfig = format!("{spec},seed={node_seed}").parse().unwrap();
        move |c: &mut DeviceConfig| {
            c.faults = Some(f);
            c.retry_timeout = Duration::from_millis(2);
            c.retry_count = 12;
        }
    };
    let pair = ring_pair_with(name, config(seed), config(seed + 1));
    let ops = soak::ops_from_env(CI_OPS);
    let deadline = Instant::now() + soak::deadline_from_env(SECS);
    let rx = soak::receiver(&pair.server).unwrap();
    let pool = soak::source_pool(seed);
    let cep = soak::sender_endpoint(&pair.client, &pool).unwrap();
    let ccq = pair.client.create_cq(4 * soak::ROUND_OPS);
    let conn = pair
        .client
        .connect([10, 0, 0, 1], soak::SERVICE, &cep, &ccq)
        .unwrap();
    let _server_conn = rx.listener.accept(Duration::from_secs(10)).unwrap();
    let sender = Sender {
        dev: &pair.client,
        conn: &conn,
        cep: &cep,
        cq: &ccq,
        pool: &pool,
    };
    let report = sender
        .run(Plan::new(seed, ops), deadline, |round| {
            soak::verify_round(&pair.server, &rx, &pool, round)
        })
        .unwrap_or_else(|e| panic!("soak at {loss_pct} % loss, seed {seed}: {e}"));
    assert_eq!(report.ops, ops);
    let (cs, ss) = (pair.client.fault_stats(), pair.server.fault_stats());
    if loss_pct > 0 {
        soak::faults_were_injected("client", &cs).unwrap();
        soak::faults_were_injected("server", &ss).unwrap();
        assert!(pair.client.stats().retransmits > 0);
    }
    eprintln!(
        "soak ring {loss_pct}% loss: {report:?}\n  client faults {cs:?}\n  server faults {ss:?}\n  \
         client retransmits {}, server retransmits {}",
        pair.client.stats().retransmits,
        pair.server.stats().retransmits
    );
}

#[test]
fn soak_ring_mixed_ops_exact_without_faults() {
    soak_on_ring("soak0", 0, 7);
}

#[test]
fn soak_ring_mixed_ops_exact_under_1_percent_loss() {
    soak_on_ring("soak1", 1, 101);
}

#[test]
fn soak_ring_mixed_ops_exact_under_5_percent_loss() {
    soak_on_ring("soak5", 5, 505);
}

#[test]
fn soak_ring_mixed_ops_exact_under_10_percent_loss() {
    soak_on_ring("soak10", 10, 1010);
}
