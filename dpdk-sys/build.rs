//! Finds the installed DPDK with pkg-config, compiles the fast-path shim and runs bindgen.
//! `scripts/deps.sh` installs `libdpdk-dev libclang-dev pkg-config` on a fresh machine.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");

    let dpdk = pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(false)
        .probe("libdpdk")
        .expect(
            "DPDK not found by pkg-config (libdpdk); run scripts/deps.sh to install libdpdk-dev",
        );

    // Link only the libraries deposit calls into; the PMDs themselves (ring, memif,
    // null, af_packet, mempool_ring) are plugins the EAL loads from its driver directory,
    // except net_ring whose rte_eth_from_rings() we call directly.
    for dir in &dpdk.link_paths {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in [
        "rte_net_ring",
        "rte_bus_vdev",
        "rte_ethdev",
        "rte_mbuf",
        "rte_mempool",
        "rte_ring",
        "rte_eal",
        "rte_kvargs",
        "rte_telemetry",
    ] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }

    // DPDK's cflags carry `-include rte_config.h` and -march; pass them to cc and clang.
    let mut clang_args: Vec<String> = Vec::new();
    for p in &dpdk.include_paths {
        clang_args.push(format!("-I{}", p.display()));
    }
    let cflags = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("pkg-config --cflags libdpdk");
    let cflags = String::from_utf8_lossy(&cflags.stdout).to_string();
    let mut defines = Vec::new();
    let mut it = cflags.split_whitespace().peekable();
    while let Some(f) = it.next() {
        if f == "-include" {
            if let Some(h) = it.next() {
                defines.push(("-include".to_string(), h.to_string()));
            }
        } else if f.starts_with("-march") || f.starts_with("-D") {
            defines.push((f.to_string(), String::new()));
        }
    }

    let mut build = cc::Build::new();
    build
        .file("shim/shim.c")
        .include("shim")
        .opt_level(3)
        .warnings(false);
    for p in &dpdk.include_paths {
        build.include(p);
    }
    for (a, b) in &defines {
        build.flag(a);
        if !b.is_empty() {
            build.flag(b);
        }
    }
    build.compile("deposit_dpdk_shim");

    for (a, b) in &defines {
        clang_args.push(a.clone());
        if !b.is_empty() {
            clang_args.push(b.clone());
        }
    }
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(&clang_args)
        .allowlist_function("rte_eal_.*|rte_eth_.*|rte_pktmbuf_pool_create|rte_ring_lookup|rte_mempool_.*|rte_ring_create|rte_ring_lookup|rte_ring_free|rte_vdev_.*|rte_thread_register|rte_thread_unregister|rte_strerror|rte_socket_id|rte_lcore_count|rte_exit|rte_log_set_global_level|rte_eal_cleanup|rte_tel_data_.*|rte_telemetry_register_cmd|shim_.*")
        .allowlist_type("rte_mbuf|rte_mempool|rte_ring|rte_eth_conf|rte_eth_dev_info|rte_eth_stats|rte_ether_addr|rte_eth_link")
        .allowlist_var("RTE_TEL_.*|RTE_ETH_.*|RTE_MBUF_DEFAULT_.*|RTE_PKTMBUF_HEADROOM|RING_F_.*|RTE_MAX_ETHPORTS|SOCKET_ID_ANY|RTE_LOG_.*")
        .opaque_type("rte_mbuf|rte_mempool|rte_ring|rte_tel_data")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen over DPDK headers failed (is libclang-dev installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings");
}
