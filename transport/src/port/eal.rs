//! DPDK's Environment Abstraction Layer: initialised once per process, with the
//! arguments chosen here.
//!
//! The EAL shares nothing and leaves nothing behind, so processes run side by side:
//! `--in-memory` on hugepages when enough are free, else `--no-huge` (with a warning on
//! stderr) with `--no-shconf` and a per-process file prefix. It must never be
//! initialised twice (DPDK cannot): [`eal_init`] keeps the first result for the life
//! of the process.

use std::ffi::CString;
use std::sync::OnceLock;

use dpdk_sys as sys;

use super::error::{rte_err, PortError};

/// Whether the EAL should use hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugeMode {
    /// Hugepages when at least [`EalConfig::min_huge_mb`] are free, else `--no-huge`.
    #[default]
    Auto,
    /// Always `--no-huge`.
    Off,
}

/// EAL options. Only the first [`eal_init`] of a process applies them.
#[derive(Debug, Clone)]
pub struct EalConfig {
    pub huge: HugeMode,
    /// Hugepage memory that must be free to use hugepages in `Auto` mode.
    pub min_huge_mb: u64,
    /// Memory for `--no-huge` mode (`-m`).
    pub no_huge_mb: u64,
    /// Extra EAL arguments (also read from `DEPOSIT_EAL_ARGS`, whitespace separated).
    pub extra_args: Vec<String>,
    /// Allow-list a PCI device (otherwise `--no-pci`).
    pub pci: Option<String>,
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            huge: HugeMode::Auto,
            min_huge_mb: 256,
            no_huge_mb: 1024,
            extra_args: Vec::new(),
            pci: None,
        }
    }
}

/// What the EAL ended up with.
#[derive(Debug, Clone)]
pub struct EalInfo {
    /// Running on hugepages (false: `--no-huge`).
    pub hugepages: bool,
    /// Free hugepage memory seen before init, in MiB.
    pub huge_free_mb: u64,
    /// The arguments passed to `rte_eal_init`.
    pub args: Vec<String>,
    /// TSC frequency (Hz), the clock of the fast path.
    pub tsc_hz: u64,
}

static EAL: OnceLock<Result<EalInfo, String>> = OnceLock::new();

/// Free hugepage memory in MiB from /proc/meminfo (0 when unknown).
pub fn huge_free_mb() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/meminfo") else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    field("HugePages_Free:") * field("Hugepagesize:") / 1024
}

/// Initialises DPDK's EAL once per process; later calls return the first result.
pub fn eal_init(cfg: &EalConfig) -> Result<EalInfo, PortError> {
    EAL.get_or_init(|| eal_init_once(cfg))
        .clone()
        .map_err(PortError::Eal)
}

/// The EAL state if [`eal_init`] already succeeded.
pub fn eal_info() -> Option<EalInfo> {
    EAL.get().and_then(|r| r.as_ref().ok().cloned())
}

/// Chooses the arguments and runs `rte_eal_init`; only [`eal_init`]'s `OnceLock` calls
/// it, so it runs at most once per process.
fn eal_init_once(cfg: &EalConfig) -> Result<EalInfo, String> {
    let free = huge_free_mb();
    let hugepages = cfg.huge == HugeMode::Auto && free >= cfg.min_huge_mb;
    let extra = extra_args(cfg);
    let mut args = cpu_args(!extra.iter().any(|a| a.starts_with("--log-level")));
    args.extend(device_args(cfg));
    args.extend(memory_args(cfg, hugepages, free));
    args.extend(extra);
    run_rte_eal_init(&args)?;
    // SAFETY: plain getter, valid after rte_eal_init.
    let tsc_hz = unsafe { sys::shim_get_tsc_hz() };
    Ok(EalInfo {
        hugepages,
        huge_free_mb: free,
        args,
        tsc_hz,
    })
}

/// The program name, one lcore free to run anywhere, and quiet logging: DPDK's own
/// messages (free hugepage sizes it looked for, a driver's optional callbacks, its
/// clean-up at exit) read as failures to a user and say nothing our errors do not —
/// every failure reaches the caller as a typed error with DPDK's error text. Only
/// critical ones show, unless the caller's arguments (or `DEPOSIT_EAL_ARGS`) set log
/// levels themselves: then theirs alone count (e.g. `--log-level=pmd.net.af_packet:debug`
/// for one driver's story). The EAL gives a driver loaded as a plugin the level of the
/// *first* matching `--log-level` and one registered before the options the *last*, so
/// a quiet default in front would silence every plugin driver the caller asked for.
/// `ddperf -v` shows the rest. DPDK telemetry is on (deposit's counters for
/// `dpdk-telemetry.py`: [`super::telemetry`]) unless `DEPOSIT_TELEMETRY=0`.
fn cpu_args(quiet: bool) -> Vec<String> {
    // lcore 0 may run on every CPU this process may: the EAL pins the calling thread to
    // its lcore's cpuset, and threads spawned later inherit that affinity. The set, not
    // 0..n: a process bound to core 1 (an MPI rank) must stay there, not move to core 0
    // where its neighbour spins.
    let cpus = super::thread::allowed_cpus();
    let set = if cpus.is_empty() {
        "0".to_string()
    } else {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut args: Vec<String> = vec!["deposit".into(), "--lcores".into(), format!("0@({set})")];
    if quiet {
        args.push("--log-level=*:critical".into());
    }
    if !super::telemetry::enabled() {
        args.push("--no-telemetry".into());
    }
    args
}

/// The one PCI device to allow, or none: the EAL must not take over every NIC.
fn device_args(cfg: &EalConfig) -> Vec<String> {
    match &cfg.pci {
        Some(p) => vec!["-a".into(), p.clone()],
        None => vec!["--no-pci".into()],
    }
}

/// Hugepages, or `--no-huge` (with a warning) when fewer than the configured minimum
/// are free; either way nothing is shared with other processes or left behind.
fn memory_args(cfg: &EalConfig, hugepages: bool, free_mb: u64) -> Vec<String> {
    if hugepages {
        // One memory file (memfd) per segment list, not per page: what a zero-copy
        // memif client shares with its server (`PortSpec::Memif::zero_copy`).
        return vec!["--in-memory".into(), "--single-file-segments".into()];
    }
    eprintln!(
        "deposit: WARNING: {} MiB of hugepages free (< {} MiB): running DPDK with --no-huge (slower). \
         Reserve hugepages with scripts/hugepages.sh.",
        free_mb, cfg.min_huge_mb
    );
    // --in-memory is refused with --no-huge; --no-shconf and a per-process prefix
    // give the same "nothing shared, nothing left behind".
    vec![
        "--no-huge".into(),
        "--no-shconf".into(),
        format!("--file-prefix=dp{}", std::process::id()),
        "-m".into(),
        cfg.no_huge_mb.to_string(),
    ]
}

/// The caller's extra arguments, then those of `DEPOSIT_EAL_ARGS` (so a run can be
/// tuned without a rebuild).
fn extra_args(cfg: &EalConfig) -> Vec<String> {
    let mut args = cfg.extra_args.clone();
    if let Ok(extra) = std::env::var("DEPOSIT_EAL_ARGS") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    args
}

/// Calls `rte_eal_init` with `args` as its argv.
fn run_rte_eal_init(args: &[String]) -> Result<(), String> {
    let cargs: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_str()).map_err(|_| format!("NUL in EAL argument {a:?}")))
        .collect::<Result<_, _>>()?;
    // rte_eal_init may permute argv; keep the CStrings alive for the whole process.
    let cargs: &'static [CString] = Box::leak(cargs.into_boxed_slice());
    let mut argv: Vec<*mut libc::c_char> = cargs.iter().map(|c| c.as_ptr() as *mut _).collect();
    let argv: &'static mut [*mut libc::c_char] = Box::leak(argv.as_mut_slice().to_vec().into());
    // SAFETY: argv points at argc valid NUL-terminated strings leaked for the process
    // lifetime, as the EAL requires; eal_init_once runs once (OnceLock).
    let rc = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
    if rc < 0 {
        return Err(format!(
            "rte_eal_init({}) : {}",
            args.join(" "),
            rte_err(rc)
        ));
    }
    Ok(())
}
