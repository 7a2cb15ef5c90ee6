//! The flow filters of `record` (`--port`, `--cidr`), applied once per connection by sock_ops
//! and, for SYN-ACK retransmits (no flow yet), by the retransmit tracepoint.
use scaletrace_common::*;

#[inline(always)]
pub(crate) fn port_matches(tuple: &FlowTuple) -> bool {
    let (lo, hi) = (config!(port_min), config!(port_max));
    let in_range = |p: u16| p >= lo && p <= hi;
    in_range(tuple.local_port) || in_range(tuple.remote_port)
}

/// `::ffff:a.b.c.d`: how a dual-stack (AF_INET6) socket holds an IPv4 address.
#[inline(always)]
fn is_v4_mapped(addr: &[u8; 16]) -> bool {
    addr[..10].iter().all(|b| *b == 0) && addr[10] == 0xff && addr[11] == 0xff
}

#[inline(always)]
fn addr_in_cidr(family: u16, addr: &[u8; 16]) -> bool {
    // An IPv4 CIDR also matches IPv4 peers of dual-stack sockets (PyTorch's TCPStore and many
    // servers listen on `::`): their last four bytes are the IPv4 address.
    let offset = if family == config!(cidr_family) {
        0
    } else if family == AF_INET6 && config!(cidr_family) == AF_INET && is_v4_mapped(addr) {
        12
    } else {
        return false;
    };
    let bits = config!(cidr_prefix_len) as usize;
    let mut i = 0;
    while i + offset < 16 {
        let start = i * 8;
        if start >= bits {
            break;
        }
        let mask: u8 = if bits - start >= 8 {
            0xff
        } else {
            0xffu8 << (8 - (bits - start))
        };
        if (addr[i + offset] ^ config!(cidr_addr[i])) & mask != 0 {
            return false;
        }
        i += 1;
    }
    true
}

#[inline(always)]
pub(crate) fn cidr_matches(tuple: &FlowTuple) -> bool {
    config!(cidr_family) == 0
        || addr_in_cidr(tuple.family, &tuple.local_addr)
        || addr_in_cidr(tuple.family, &tuple.remote_addr)
}
