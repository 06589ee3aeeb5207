//! Daemon <-> session agent messages: versioned, length-prefixed frames with a hard size cap.
