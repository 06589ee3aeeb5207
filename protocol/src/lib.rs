//! Sans-I/O codecs shared by every guestlink program.
//!
//! Nothing in this crate performs I/O: it turns bytes into typed values and back, and keeps the state machines
//! (stream framing, chunk reassembly) that the transports feed. Every length read from the wire is bounded.

mod growth;
pub mod keyfile;
pub mod qga;
pub mod session;
pub mod vdagent;
