//! SPICE vdagent protocol: chunks, messages, capabilities, reassembly.
