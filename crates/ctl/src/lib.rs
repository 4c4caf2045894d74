//! `csi-proxy-ctl` as a library: the selftest's step sequence, so the same code runs from the
//! command and in tests over the simulated Windows.

pub mod selftest;
