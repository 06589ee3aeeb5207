//! Where the agent is reached: a QEMU chardev socket / character device, a libvirt domain, or a Proxmox VM.

use std::path::PathBuf;

/// How to reach a guest agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A QEMU chardev unix socket (`-chardev socket,path=…,server=on`) or a character device path.
    Socket(PathBuf),
    /// A libvirt domain: every command goes through `virsh qemu-agent-command` because libvirtd holds the
    /// agent socket permanently (a QEMU socket chardev serves one client at a time).
    Domain {
        /// Domain name, id or UUID.
        name: String,
        /// libvirt connection URI (`virsh -c`), or libvirt's default when `None`.
        uri: Option<String>,
    },
    /// A Proxmox VE VM: `/var/run/qemu-server/<vmid>.qga`, connected once per batch of commands like Proxmox
    /// itself does so that Proxmox's own agent calls are not locked out.
    Proxmox(u32),
}

/// Proxmox's socket directory; `GUESTLINK_PROXMOX_DIR` overrides it (tests, non-standard installs).
fn proxmox_dir() -> PathBuf {
    std::env::var_os("GUESTLINK_PROXMOX_DIR")
        .map_or_else(|| PathBuf::from("/var/run/qemu-server"), PathBuf::from)
}

impl Target {
    /// The socket or device path for targets reached directly.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Target::Socket(p) => Some(p.clone()),
            Target::Proxmox(vmid) => Some(proxmox_dir().join(format!("{vmid}.qga"))),
            Target::Domain { .. } => None,
        }
    }

    /// True when the connection should be dropped between batches (Proxmox shares the socket).
    pub fn per_batch(&self) -> bool {
        matches!(self, Target::Proxmox(_))
    }

    /// True when replies pass through libvirt's 10 MiB reply cap.
    pub fn via_libvirt(&self) -> bool {
        matches!(self, Target::Domain { .. })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Socket(p) => write!(f, "{}", p.display()),
            Target::Domain { name, .. } => write!(f, "domain {name}"),
            Target::Proxmox(vmid) => {
                write!(f, "{}", proxmox_dir().join(format!("{vmid}.qga")).display())
            }
        }
    }
}
