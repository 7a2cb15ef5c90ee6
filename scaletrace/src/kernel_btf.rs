//! Where a member of a kernel struct lies, from the running kernel's own type information
//! (`/sys/kernel/btf/vmlinux`). The eBPF programs read a few socket fields that no stable
//! program context exposes, and their offsets differ between kernel versions and builds.
use anyhow::{bail, Context as _, Result};
use btf_rs::{Btf, Type};

/// The kernel's BTF, as the running kernel publishes it.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offset of `member` in `struct name`, looking through anonymous structs and unions
/// (where kernels group members); `Ok(None)` when the struct has no such member.
pub fn member_offset(btf: &Btf, name: &str, member: &str) -> Result<Option<u32>> {
    let types = btf
        .resolve_types_by_name(name)
        .with_context(|| format!("no type named {name} in the kernel's BTF"))?;
    let Some(Type::Struct(s)) = types.into_iter().find(|t| matches!(t, Type::Struct(_))) else {
        bail!("no struct named {name} in the kernel's BTF");
    };
    find_member(btf, &s, member, 0)
}

fn find_member(btf: &Btf, s: &btf_rs::Struct, member: &str, base_bits: u32) -> Result<Option<u32>> {
    for m in &s.members {
        let bits = base_bits + m.bit_offset();
        let name = btf.resolve_name(m)?;
        if name == member {
            if m.bitfield_size().is_some_and(|size| size != 0) || !bits.is_multiple_of(8) {
                bail!("{member} is a bit field");
            }
            return Ok(Some(bits / 8));
        }
        if name.is_empty() {
            if let Type::Struct(inner) | Type::Union(inner) = btf.resolve_chained_type(m)? {
                if let Some(offset) = find_member(btf, &inner, member, bits)? {
                    return Ok(Some(offset));
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's own BTF (every kernel this project supports publishes it); the
    /// offsets are checked against what they must be in any layout: inside the struct, and
    /// `sk_common` first in `struct sock`.
    #[test]
    fn finds_members_of_the_running_kernels_structs() {
        let Ok(btf) = Btf::from_file(VMLINUX_BTF) else {
            eprintln!("skipped: no {VMLINUX_BTF}");
            return;
        };
        assert_eq!(member_offset(&btf, "sock", "__sk_common").unwrap(), Some(0));
        let dsack = member_offset(&btf, "tcp_sock", "dsack_dups")
            .unwrap()
            .unwrap();
        let reord = member_offset(&btf, "tcp_sock", "reord_seen")
            .unwrap()
            .unwrap();
        // past the inet_connection_sock every tcp_sock starts with, and apart
        assert!(
            dsack > 1000 && reord > 1000 && dsack != reord,
            "{dsack} {reord}"
        );
        assert_eq!(
            member_offset(&btf, "tcp_sock", "no_such_member").unwrap(),
            None
        );
        assert!(member_offset(&btf, "no_such_struct_here", "x").is_err());
        // a member inside an anonymous union: `struct sock_common`'s skc_daddr sits in one
        assert!(member_offset(&btf, "sock_common", "skc_daddr")
            .unwrap()
            .is_some());
    }
}
