//! [`PortError`], and the text of a failed DPDK call's return code.

use std::ffi::CStr;

use dpdk_sys as sys;

/// Errors from the EAL and port layer.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("EAL initialisation failed: {0}")]
    Eal(String),
    #[error("bad port spec {spec:?}: {why}")]
    BadSpec { spec: String, why: &'static str },
    #[error("DPDK call {call} failed for {what}: {msg} (rc {rc})")]
    Dpdk {
        call: &'static str,
        what: String,
        rc: i32,
        msg: String,
    },
    #[error("port {0:?} is already open in this process")]
    InUse(String),
}

/// DPDK's message for a return code: a negative `rc` is `-errno` (the ethdev and vdev
/// calls), any other reads `rte_errno`.
pub(super) fn rte_err(rc: i32) -> String {
    let code = if rc < 0 {
        -rc
    } else {
        // SAFETY: reads the calling thread's rte_errno; no other effect.
        unsafe { sys::shim_errno() }
    };
    // SAFETY: rte_strerror returns a pointer to a static or thread-local C string.
    unsafe { CStr::from_ptr(sys::rte_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// A [`PortError::Dpdk`] for `call` failing on `what` with return code `rc`.
pub(super) fn dpdk_err(call: &'static str, what: impl Into<String>, rc: i32) -> PortError {
    PortError::Dpdk {
        call,
        what: what.into(),
        rc,
        msg: rte_err(rc),
    }
}
