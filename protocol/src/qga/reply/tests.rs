//! Unit tests of the reply encoder and decoder.
