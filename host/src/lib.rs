//! guestlink host library: reach a QEMU guest agent (guestlinkd or qemu-ga) through a chardev socket, a
//! character device, libvirt (`virsh qemu-agent-command`) or a Proxmox VM socket, and drive it: queries,
//! exec with streaming, verified file transfer, and freeze/quiesce that always thaws.

pub mod error;
pub mod exec;
pub mod file;
pub mod host_cmd;
pub mod quiesce;
pub mod session;
pub mod spice;
pub mod target;
pub mod transport;

pub use error::{AgentError, Channel, Error, Result};
pub use session::{Session, Timeouts};
pub use target::Target;
