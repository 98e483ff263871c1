//! Which DPDK port to open: [`PortSpec`], parsed from and printed as the text users
//! type (`ring:lo:a`, `memif:/run/x.sock:server`, `memif:/run/x.sock:client:zero-copy`,
//! `0000:3b:00.0`, ...).

use std::fmt;
use std::str::FromStr;

use super::error::PortError;

/// Side of an in-process ring pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSide {
    A,
    B,
}

/// Role of a memif port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    Server,
    Client,
}

/// Which DPDK port to open (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// In-process ring port; the two sides of one name are cross-connected.
    Ring { name: String, side: RingSide },
    /// `net_null`: tx sink (`rx == false`) or rx source of 64-byte frames.
    Null { rx: bool },
    /// `net_memif` over a Unix socket path. `zero_copy` (a client only: DPDK's memif
    /// offers it on that side): the client shares its buffer memory with the server, so
    /// a frame it receives is the one the server's transmit wrote — no copy into an
    /// mbuf — and what it sends is read where it lies.
    Memif {
        socket: String,
        role: MemifRole,
        zero_copy: bool,
    },
    /// `net_af_packet` on a kernel interface.
    AfPacket { iface: String },
    /// `net_af_xdp` on a kernel interface.
    AfXdp { iface: String },
    /// A physical port by PCI address.
    Pci { addr: String },
}

impl FromStr for PortSpec {
    type Err = PortError;

    /// Parses `ring[:NAME:a|b]`, `null[:rx]`, `memif:<socket>:<server|client[:zero-copy]>`,
    /// `af_packet:<iface>`, `af_xdp:<iface>`, `pci:<addr>` or a bare PCI address.
    fn from_str(s: &str) -> Result<Self, PortError> {
        let parts: Vec<&str> = s.split(':').collect();
        let parsed = match parts[0] {
            "ring" => parse_ring(&parts),
            "null" => parse_null(&parts),
            "memif" => parse_memif(&parts),
            "af_packet" | "af_xdp" => parse_kernel_iface(&parts),
            "pci" if parts.len() > 1 => Ok(PortSpec::Pci {
                addr: parts[1..].join(":"),
            }),
            _ if looks_like_pci_addr(s) => Ok(PortSpec::Pci { addr: s.into() }),
            _ => Err("unknown port kind (ring, null, memif, af_packet, af_xdp, pci)"),
        };
        parsed.map_err(|why| PortError::BadSpec {
            spec: s.to_string(),
            why,
        })
    }
}

impl PortSpec {
    /// Whether the port has a MAC of its own that the network knows it by — a kernel
    /// interface's (af_packet, af_xdp) or a NIC's — and filters by it: a node on it
    /// takes that MAC, leaves promiscuous mode off and resolves its peers' MACs by ARP
    /// (`crate::neigh`). The others (ring, null, memif) connect only deposit nodes,
    /// which take the MAC derived from their IPv4 address (`NodeAddr::from_ip`) and
    /// run promiscuous, since their PMDs filter nothing.
    pub fn has_own_mac(&self) -> bool {
        matches!(
            self,
            PortSpec::AfPacket { .. } | PortSpec::AfXdp { .. } | PortSpec::Pci { .. }
        )
    }
}

/// `ring` (side a of the pair `lo`, for a loopback in one process) or
/// `ring:<name>:<a|b>`. The name goes into DPDK ring names (`dp_<name>_ab`), which
/// are bounded, hence at most 16 characters.
fn parse_ring(parts: &[&str]) -> Result<PortSpec, &'static str> {
    match *parts {
        [_] => Ok(PortSpec::Ring {
            name: "lo".into(),
            side: RingSide::A,
        }),
        [_, name, side] => {
            let side = match side {
                "a" | "A" => RingSide::A,
                "b" | "B" => RingSide::B,
                _ => return Err("ring side must be a or b"),
            };
            if name.is_empty() || name.len() > 16 {
                return Err("ring name must be 1..=16 characters");
            }
            Ok(PortSpec::Ring {
                name: name.into(),
                side,
            })
        }
        _ => Err("expected ring or ring:<name>:<a|b>"),
    }
}

/// `null` (a tx sink) or `null:rx` (an rx source).
fn parse_null(parts: &[&str]) -> Result<PortSpec, &'static str> {
    match parts.get(1) {
        None => Ok(PortSpec::Null { rx: false }),
        Some(&"rx") => Ok(PortSpec::Null { rx: true }),
        _ => Err("expected null or null:rx"),
    }
}

/// `memif:<socket-path>:<server|client>`, or `memif:<socket-path>:client:zero-copy`.
fn parse_memif(parts: &[&str]) -> Result<PortSpec, &'static str> {
    if !(3..=4).contains(&parts.len()) || parts[1].is_empty() {
        return Err("expected memif:<socket-path>:<server|client>[:zero-copy]");
    }
    let role = match parts[2] {
        "server" => MemifRole::Server,
        "client" => MemifRole::Client,
        _ => return Err("memif role must be server or client"),
    };
    let zero_copy = match parts.get(3) {
        None => false,
        Some(&"zero-copy") if role == MemifRole::Client => true,
        Some(&"zero-copy") => {
            return Err("zero-copy is a memif client's (DPDK's memif offers it there)")
        }
        Some(_) => return Err("the memif option after the role can only be zero-copy"),
    };
    Ok(PortSpec::Memif {
        socket: parts[1].into(),
        role,
        zero_copy,
    })
}

/// `af_packet:<iface>` or `af_xdp:<iface>`: a PMD on a kernel interface.
fn parse_kernel_iface(parts: &[&str]) -> Result<PortSpec, &'static str> {
    if parts.len() != 2 || parts[1].is_empty() {
        return Err("expected af_packet:<iface> or af_xdp:<iface>");
    }
    let iface = parts[1].to_string();
    Ok(if parts[0] == "af_packet" {
        PortSpec::AfPacket { iface }
    } else {
        PortSpec::AfXdp { iface }
    })
}

/// Whether `s` reads as a PCI address (`0000:3b:00.0`), so one can be given bare.
fn looks_like_pci_addr(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        && s.contains('.')
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Ring { name, side } => {
                write!(
                    f,
                    "ring:{name}:{}",
                    if *side == RingSide::A { "a" } else { "b" }
                )
            }
            PortSpec::Null { rx } => write!(f, "null{}", if *rx { ":rx" } else { "" }),
            PortSpec::Memif {
                socket,
                role,
                zero_copy,
            } => write!(
                f,
                "memif:{socket}:{}{}",
                if *role == MemifRole::Server {
                    "server"
                } else {
                    "client"
                },
                if *zero_copy { ":zero-copy" } else { "" }
            ),
            PortSpec::AfPacket { iface } => write!(f, "af_packet:{iface}"),
            PortSpec::AfXdp { iface } => write!(f, "af_xdp:{iface}"),
            PortSpec::Pci { addr } => write!(f, "pci:{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_port_specs() {
        assert_eq!(
            "ring".parse::<PortSpec>().unwrap(),
            PortSpec::Ring {
                name: "lo".into(),
                side: RingSide::A
            }
        );
        assert_eq!(
            "ring:x:b".parse::<PortSpec>().unwrap(),
            PortSpec::Ring {
                name: "x".into(),
                side: RingSide::B
            }
        );
        assert_eq!(
            "null".parse::<PortSpec>().unwrap(),
            PortSpec::Null { rx: false }
        );
        assert_eq!(
            "memif:/tmp/a.sock:server".parse::<PortSpec>().unwrap(),
            PortSpec::Memif {
                socket: "/tmp/a.sock".into(),
                role: MemifRole::Server,
                zero_copy: false,
            }
        );
        assert_eq!(
            "memif:/tmp/a.sock:client:zero-copy"
                .parse::<PortSpec>()
                .unwrap(),
            PortSpec::Memif {
                socket: "/tmp/a.sock".into(),
                role: MemifRole::Client,
                zero_copy: true,
            }
        );
        assert_eq!(
            "af_packet:veth0".parse::<PortSpec>().unwrap(),
            PortSpec::AfPacket {
                iface: "veth0".into()
            }
        );
        assert_eq!(
            "0000:3b:00.0".parse::<PortSpec>().unwrap(),
            PortSpec::Pci {
                addr: "0000:3b:00.0".into()
            }
        );
        for bad in [
            "",
            "ring:x",
            "ring:x:c",
            "memif:/x",
            "memif:/x:boss",
            "memif:/x:server:zero-copy",
            "memif:/x:client:zerocopy",
            "memif:/x:client:zero-copy:more",
            "tap0",
            "null:tx",
        ] {
            assert!(bad.parse::<PortSpec>().is_err(), "{bad:?} accepted");
        }
        for s in [
            "ring:lo:a",
            "null:rx",
            "memif:/tmp/s:client",
            "memif:/tmp/s:client:zero-copy",
            "af_xdp:v1",
        ] {
            assert_eq!(s.parse::<PortSpec>().unwrap().to_string(), s);
        }
    }
}
