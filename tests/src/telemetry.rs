//! A client of DPDK's telemetry socket (`dpdk_telemetry.v2`, a `SOCK_SEQPACKET` Unix
//! socket in the EAL's runtime directory), as `dpdk-telemetry.py` is: the tests find a
//! process's socket by the pid its greeting names and ask it deposit's commands.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One connected telemetry socket.
pub struct Telemetry {
    fd: libc::c_int,
    /// The greeting: version, pid, largest answer.
    pub greeting: serde_json::Value,
}

impl Telemetry {
    /// Connects to the socket at `path` and reads its greeting.
    pub fn connect(path: &Path) -> std::io::Result<Telemetry> {
        // SAFETY: plain socket calls on a descriptor this function owns; the address
        // is a zeroed sockaddr_un with a NUL-terminated path shorter than sun_path.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut t = Telemetry {
            fd,
            greeting: serde_json::Value::Null,
        };
        let p = CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
        let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = p.as_bytes_with_nul();
        if bytes.len() > sun.sun_path.len() {
            return Err(std::io::Error::other("socket path too long"));
        }
        for (d, s) in sun.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: valid descriptor, address and option of the sizes given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            if libc::connect(
                fd,
                (&sun as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        t.greeting = t.read()?;
        Ok(t)
    }

    fn read(&self) -> std::io::Result<serde_json::Value> {
        let mut buf = vec![0u8; 64 * 1024];
        // SAFETY: reads into a buffer of the length given.
        let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        serde_json::from_slice(&buf[..n as usize]).map_err(std::io::Error::other)
    }

    /// Sends `request` (`/command,params`) and returns the command's answer (the
    /// object under the command's name).
    pub fn ask(&self, request: &str) -> std::io::Result<serde_json::Value> {
        // SAFETY: sends the request's bytes on the connected descriptor.
        let n = unsafe { libc::send(self.fd, request.as_ptr().cast(), request.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let v = self.read()?;
        let cmd = request.split(',').next().unwrap_or(request);
        Ok(v.get(cmd).cloned().unwrap_or(v))
    }

    /// The pid the greeting names.
    pub fn pid(&self) -> Option<u64> {
        self.greeting.get("pid")?.as_u64()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns, once.
        unsafe { libc::close(self.fd) };
    }
}

/// DPDK's runtime directories (`/var/run/dpdk/PREFIX` as root, else
/// `$XDG_RUNTIME_DIR/dpdk/PREFIX` or `/tmp/dpdk/PREFIX`).
fn runtime_dirs() -> Vec<PathBuf> {
    let base = if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/var/run/dpdk")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"))
            .join("dpdk")
    };
    std::fs::read_dir(base)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default()
}

/// The telemetry socket of process `pid`, connected: tried every 100 ms until `wait`
/// passes (its socket appears when its EAL starts).
pub fn telemetry_of(pid: u32, wait: Duration) -> Option<Telemetry> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        for dir in runtime_dirs() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                if !name.to_string_lossy().starts_with("dpdk_telemetry.v2") {
                    continue;
                }
                if let Ok(t) = Telemetry::connect(&e.path()) {
                    if t.pid() == Some(u64::from(pid)) {
                        return Some(t);
                    }
                }
            }
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
