//! Writes the fuzz targets' seeds (`deposit_transport::fuzzing::seeds`) into a corpus
//! directory, one file per seed: `<dir>/<target>/seed-<n>` (`scripts/fuzz.sh --seed`).
//!
//! `cargo run -p deposit-transport --no-default-features --example fuzz_seeds -- fuzz/corpus`

use deposit_transport::fuzzing;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: fuzz_seeds DIR");
        std::process::exit(2);
    };
    for (name, _) in fuzzing::TARGETS {
        let d = std::path::Path::new(&dir).join(name);
        std::fs::create_dir_all(&d).expect("corpus directory");
        let seeds = fuzzing::seeds(name);
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:02}")), s).expect("seed file");
        }
        println!("{name}: {} seeds in {}", seeds.len(), d.display());
    }
}
