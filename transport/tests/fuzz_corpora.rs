//! The fuzz targets' corpora (`fuzz/corpus/<target>/`) and kept regressions
//! (`fuzz/regressions/<target>/`) replayed as ordinary tests, on stable Rust with no
//! fuzzer: every input goes through the same function `cargo fuzz run` calls
//! (`deposit_transport::fuzzing`), which panics when a property it checks fails. A
//! target whose corpus is missing or empty fails too: the replay must not pass by
//! finding nothing.

use std::path::{Path, PathBuf};

use deposit_transport::fuzzing;

/// The repository's `fuzz/` directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of a directory, sorted (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every input of `target`'s corpus and regressions; panics naming the file that
/// failed.
fn replay(target: &str) {
    let corpus = files(&fuzz_dir().join("corpus").join(target));
    assert!(
        !corpus.is_empty(),
        "no corpus for fuzz target {target} in fuzz/corpus/{target}"
    );
    let regressions = files(&fuzz_dir().join("regressions").join(target));
    for path in corpus.iter().chain(&regressions) {
        let data = std::fs::read(path).expect("corpus file");
        let name = path.display().to_string();
        let r = std::panic::catch_unwind(|| assert!(fuzzing::run(target, &data)));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("fuzz target {target} fails on {name}: {msg}");
        }
    }
    eprintln!(
        "{target}: {} corpus inputs, {} regressions",
        corpus.len(),
        regressions.len()
    );
}

#[test]
fn corpus_frame() {
    replay("frame");
}

#[test]
fn corpus_cell() {
    replay("cell");
}

#[test]
fn corpus_compound() {
    replay("compound");
}

#[test]
fn corpus_cm() {
    replay("cm");
}

#[test]
fn corpus_plan() {
    replay("plan");
}

#[test]
fn corpus_node() {
    replay("node");
}

#[test]
fn corpus_neigh_wire() {
    replay("neigh_wire");
}

/// Every target has seeds, and they pass.
#[test]
fn seeds_pass() {
    for (name, f) in fuzzing::TARGETS {
        let seeds = fuzzing::seeds(name);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for s in &seeds {
            f(s);
        }
    }
}

/// The frame target's seeds parse as frames once fixed up, over IPv4 and over IPv6, so
/// that fuzzing starts past the underlay's checks of either family.
#[test]
fn frame_seeds_parse_over_both_families() {
    let mut families = [0, 0];
    for s in fuzzing::seeds("frame") {
        let mut buf = s[3..].to_vec();
        fuzzing::wire::fix_up(&mut buf, s[0]);
        let v = deposit_transport::wire::FrameView::parse(&buf)
            .unwrap_or_else(|e| panic!("a frame seed does not parse: {e:?}"));
        families[usize::from(v.underlay.is_ipv6())] += 1;
    }
    assert!(
        families[0] > 0 && families[1] > 0,
        "seeds by family {families:?}"
    );
}

/// Every target's directory is there, and the list of targets is the fuzz crate's.
#[test]
fn every_target_has_a_fuzz_target_file() {
    for (name, _) in fuzzing::TARGETS {
        let f = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(f.is_file(), "{} is missing", f.display());
    }
}
