//! Empty library target: it lets `scaletrace` declare a build-dependency on this crate, so cargo
//! rebuilds the embedded eBPF object when this crate changes. The programs are in main.rs.
#![no_std]
