//! DPDK telemetry commands: deposit's counters in a running process, read with
//! `dpdk-telemetry.py` (Debian package `dpdk-dev`) or anything that speaks the telemetry
//! socket (a `SOCK_SEQPACKET` Unix socket, `dpdk_telemetry.v2` in the EAL's runtime
//! directory: one JSON request line in, one JSON object out).
//!
//! A handler turns the command's parameters into a [`Reply`]: a dictionary whose
//! values are numbers, strings or arrays of them (DPDK 22.11 nests no deeper). The
//! library keeps its handlers in a table; one C trampoline, registered for every
//! command, finds them by name.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Mutex, OnceLock};

use dpdk_sys as sys;

/// One value of a reply's dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TelValue {
    U64(u64),
    Str(String),
    U64s(Vec<u64>),
    Strs(Vec<String>),
}

/// A command's answer: name-value pairs, in order (names: letters, digits, `_`, `/`;
/// at most 256 of them, DPDK's limit).
pub type Reply = Vec<(String, TelValue)>;

type Handler = Box<dyn Fn(&str) -> Reply + Send + Sync>;

/// Whether this process runs DPDK telemetry: yes unless `DEPOSIT_TELEMETRY=0`.
pub fn enabled() -> bool {
    std::env::var("DEPOSIT_TELEMETRY").map_or(true, |v| v != "0")
}

fn handlers() -> &'static Mutex<HashMap<String, Handler>> {
    static H: OnceLock<Mutex<HashMap<String, Handler>>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Registers `cmd` (e.g. `/deposit/stats`) with `help`: `f` answers it with the
/// parameters after the comma (empty when none). A second registration of the same
/// command replaces the handler. Errors are DPDK's (a name it refuses).
pub fn register(
    cmd: &str,
    help: &str,
    f: impl Fn(&str) -> Reply + Send + Sync + 'static,
) -> Result<(), String> {
    let mut table = handlers().lock().unwrap_or_else(|e| e.into_inner());
    let known = table.contains_key(cmd);
    table.insert(cmd.to_string(), Box::new(f));
    if known {
        return Ok(());
    }
    // DPDK keeps the pointers: the strings live as long as the process.
    let c_cmd: &'static CStr = Box::leak(CString::new(cmd).map_err(|e| e.to_string())?.into());
    let c_help: &'static CStr = Box::leak(CString::new(help).map_err(|e| e.to_string())?.into());
    // SAFETY: both strings are NUL-terminated and never freed; the trampoline has the
    // signature DPDK's `telemetry_cb` requires.
    let rc = unsafe {
        sys::rte_telemetry_register_cmd(c_cmd.as_ptr(), Some(trampoline), c_help.as_ptr())
    };
    if rc != 0 {
        table.remove(cmd);
        return Err(format!("rte_telemetry_register_cmd({cmd}): {rc}"));
    }
    Ok(())
}

/// Answers a command from the handler table (on DPDK's telemetry thread).
unsafe extern "C" fn trampoline(
    cmd: *const c_char,
    params: *const c_char,
    d: *mut sys::rte_tel_data,
) -> c_int {
    // SAFETY: DPDK passes NUL-terminated strings (params may be NULL) valid for the call.
    let (cmd, params) = unsafe {
        (
            CStr::from_ptr(cmd).to_string_lossy().into_owned(),
            if params.is_null() {
                String::new()
            } else {
                CStr::from_ptr(params).to_string_lossy().into_owned()
            },
        )
    };
    let reply = std::panic::catch_unwind(|| {
        let table = handlers().lock().unwrap_or_else(|e| e.into_inner());
        table.get(&cmd).map(|f| f(&params))
    });
    match reply {
        // SAFETY: `d` is the callback's data, valid for the call.
        Ok(Some(r)) => unsafe { fill(d, &r) },
        _ => -libc::EINVAL,
    }
}

/// Writes `reply` into DPDK's data structure.
///
/// # Safety
/// `d` must be the data structure DPDK passed to the callback.
unsafe fn fill(d: *mut sys::rte_tel_data, reply: &Reply) -> c_int {
    // SAFETY (whole body): `d` is valid (the caller's contract); every string passed is
    // NUL-terminated and outlives the call (DPDK copies it); a container allocated here
    // is handed to DPDK with keep = 0, so DPDK frees it.
    unsafe {
        sys::rte_tel_data_start_dict(d);
        for (name, v) in reply {
            let Ok(name) = CString::new(name.as_str()) else {
                continue;
            };
            match v {
                TelValue::U64(x) => {
                    sys::rte_tel_data_add_dict_u64(d, name.as_ptr(), *x);
                }
                TelValue::Str(s) => {
                    let s = CString::new(s.as_str()).unwrap_or_default();
                    sys::rte_tel_data_add_dict_string(d, name.as_ptr(), s.as_ptr());
                }
                TelValue::U64s(xs) => {
                    let c = sys::rte_tel_data_alloc();
                    if c.is_null() {
                        return -libc::ENOMEM;
                    }
                    sys::rte_tel_data_start_array(c, sys::rte_tel_value_type_RTE_TEL_U64_VAL);
                    for x in xs {
                        sys::rte_tel_data_add_array_u64(c, *x);
                    }
                    sys::rte_tel_data_add_dict_container(d, name.as_ptr(), c, 0);
                }
                TelValue::Strs(ss) => {
                    let c = sys::rte_tel_data_alloc();
                    if c.is_null() {
                        return -libc::ENOMEM;
                    }
                    sys::rte_tel_data_start_array(c, sys::rte_tel_value_type_RTE_TEL_STRING_VAL);
                    for s in ss {
                        let s = CString::new(s.as_str()).unwrap_or_default();
                        sys::rte_tel_data_add_array_string(c, s.as_ptr());
                    }
                    sys::rte_tel_data_add_dict_container(d, name.as_ptr(), c, 0);
                }
            }
        }
    }
    0
}
