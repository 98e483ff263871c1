//! Writes of 1 byte to 1 MiB between two processes on af_packet ports with jumbo
//! frames (veths of MTU 9000 on a bridge, one namespace each): every byte lands, and
//! the large payloads went into frames by reference to endpoint memory (af_packet
//! copies each frame into its ring as it sends it, chains of segments included).

use std::time::{Duration, Instant};

use deposit_tests::netns::Topology;

const T: Duration = Duration::from_secs(60);

#[test]
fn writes_from_1_byte_to_1_mib_land_byte_exact_over_af_packet_jumbo_frames() {
    let Some(topo) = Topology::or_skip_mtu(2, 9000) else {
        return;
    };
    let deadline = Instant::now() + T;
    let mut nodes = topo.start_all(
        env!("CARGO_BIN_EXE_testnode"),
        |i, port| {
            let role = if i == 0 { "server" } else { "client" };
            [
                "sweep-node",
                &format!("af_packet:{port}"),
                role,
                "91",
                "9014",
            ]
            .map(String::from)
            .to_vec()
        },
        deadline,
    );
    let said = nodes[1].expect(1, "completed", deadline);
    let by_ref: u64 = said
        .iter()
        .find_map(|l| l.strip_prefix("by-reference "))
        .unwrap_or_else(|| panic!("no by-reference line in {said:?}"))
        .parse()
        .unwrap();
    nodes[0].expect(0, "verified", deadline);
    // 64 KiB and up alone take 15 jumbo frames and more each.
    assert!(
        by_ref >= 100,
        "{by_ref} frames took their payload by reference"
    );
    deposit_tests::netns::exit_all(&mut nodes);
}
