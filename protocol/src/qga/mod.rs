//! QEMU guest agent protocol (QGA): stream framing, requests, schema, replies.
