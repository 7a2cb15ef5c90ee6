//! Attaching the TCP source: sock_ops on the cgroup (with the kernel struct offsets it reads,
//! from the running kernel's BTF), the tcp/sock tracepoints (with their record layouts, from
//! tracefs), and the adoption of connections open before the start.
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use aya::{
    programs::{CgroupAttachMode, SockOps},
    Ebpf,
};
use scaletrace_common::{Config, TracepointOffsets};

use crate::{
    hooks::{short_error, Hooks},
    tracefs,
};

/// A tracepoint hook: its program name, tracefs location and state field for `oldstate`.
pub struct TracepointHook {
    pub program: &'static str,
    pub category: &'static str,
    pub name: &'static str,
    state_field: Option<&'static str>,
    /// Where its offsets go in the eBPF config.
    slot: fn(&mut Config) -> &mut TracepointOffsets,
}

pub const TRACEPOINTS: [TracepointHook; 3] = [
    TracepointHook {
        program: "tcp_retransmit_skb",
        category: "tcp",
        name: "tcp_retransmit_skb",
        state_field: Some("state"),
        slot: |c| &mut c.retransmit_tp,
    },
    TracepointHook {
        program: "tcp_retransmit_synack",
        category: "tcp",
        name: "tcp_retransmit_synack",
        state_field: None,
        slot: |c| &mut c.synack_tp,
    },
    TracepointHook {
        program: "inet_sock_set_state",
        category: "sock",
        name: "inet_sock_set_state",
        state_field: Some("oldstate"),
        slot: |c| &mut c.state_tp,
    },
];

/// Fills in tracepoint offsets; a tracepoint whose layout cannot be read is marked missing.
pub fn tracepoint_offsets(
    config: &mut Config,
    tracefs_root: &Path,
    hooks: &mut Hooks,
) -> Vec<&'static str> {
    let mut usable = Vec::new();
    for tp in &TRACEPOINTS {
        let hook = format!("{}:{}", tp.category, tp.name);
        match tracefs::tracepoint_offsets(tracefs_root, tp.category, tp.name, tp.state_field) {
            // The state program filters on protocol and reports both states.
            Ok(off)
                if tp.name == "inet_sock_set_state"
                    && (off.protocol == TracepointOffsets::ABSENT
                        || off.newstate == TracepointOffsets::ABSENT) =>
            {
                hooks
                    .missing
                    .push((hook, "kernel too old: no protocol/newstate fields".into()))
            }
            Ok(off) => {
                *(tp.slot)(config) = off;
                usable.push(tp.program);
            }
            Err(e) => hooks.missing.push((hook, format!("{e:#}"))),
        }
    }
    usable
}

/// Where an offset goes in the eBPF config.
type OffsetSlot = fn(&mut Config) -> &mut u16;

/// The `struct tcp_sock` members sock_ops reads through its socket (`Config` slot, member).
const TCP_SOCK_MEMBERS: [(OffsetSlot, &str); 2] = [
    (|c| &mut c.tcp_sock_dsack_dups, "dsack_dups"),
    (|c| &mut c.tcp_sock_reord_seen, "reord_seen"),
];

/// The offsets on the way from a socket to its cgroup v2 id (`Config` slot, the (struct,
/// member) pairs whose offsets add up to it): `sk->sk_cgrp_data.cgroup->kn->id`.
const CGROUP_ID_PATH: [(OffsetSlot, &[(&str, &str)]); 3] = [
    (
        |c| &mut c.sock_cgroup,
        &[("sock", "sk_cgrp_data"), ("sock_cgroup_data", "cgroup")],
    ),
    (|c| &mut c.cgroup_kn, &[("cgroup", "kn")]),
    (|c| &mut c.kernfs_node_id, &[("kernfs_node", "id")]),
];

/// The hook name of the flows' cgroup (`flows.cgroup` and the job labels).
const CGROUP_ID_HOOK: &str = "sock:cgroup_id";

/// The offsets from a socket to its network namespace's cookie, which the tracepoints read to
/// find a flow by tuple and namespace: `sk->skc_net.net->net_cookie`.
const NETNS_COOKIE_PATH: [(OffsetSlot, &[(&str, &str)]); 2] = [
    (|c| &mut c.sock_net, &[("sock_common", "skc_net")]),
    (|c| &mut c.net_cookie, &[("net", "net_cookie")]),
];

/// The hook name of the tracepoints' namespace reads.
const NETNS_COOKIE_HOOK: &str = "sock:netns_cookie";

/// Fills in, from the kernel's BTF, the offsets of the kernel struct members the programs read
/// through a socket: the `tcp_sock` counters and the cgroup id (sock_ops), the network
/// namespace's cookie (the tracepoints). One it cannot place is listed missing with the
/// reason, and its columns stay null (for the namespace: flows are found by tuple alone).
pub fn kernel_struct_offsets(config: &mut Config, hooks: &mut Hooks) {
    let btf = btf_rs::Btf::from_file(crate::kernel_btf::VMLINUX_BTF)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", crate::kernel_btf::VMLINUX_BTF));
    let offset = |name: &str, member: &str| -> Result<u16> {
        let btf = btf.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        match crate::kernel_btf::member_offset(btf, name, member)? {
            Some(offset) if offset < u32::from(TracepointOffsets::ABSENT) => Ok(offset as u16),
            Some(offset) => bail!("{name}.{member} at offset {offset}: out of range"),
            None => bail!("kernel too old: {name} has no member {member}"),
        }
    };
    for (slot, member) in TCP_SOCK_MEMBERS {
        let hook = format!("tcp_sock:{member}");
        match offset("tcp_sock", member) {
            Ok(at) => {
                *slot(config) = at;
                hooks.attached.push(hook);
            }
            Err(e) => hooks.missing.push((hook, format!("{e:#}"))),
        }
    }
    for (path, hook) in [
        (&CGROUP_ID_PATH[..], CGROUP_ID_HOOK),
        (&NETNS_COOKIE_PATH[..], NETNS_COOKIE_HOOK),
    ] {
        let offsets: Result<Vec<u16>> = path
            .iter()
            .map(|(_, members)| {
                members.iter().try_fold(0u16, |sum, (name, member)| {
                    sum.checked_add(offset(name, member)?)
                        .filter(|&at| at < TracepointOffsets::ABSENT)
                        .context("offset out of range")
                })
            })
            .collect();
        match offsets {
            Ok(offsets) => {
                for ((slot, _), at) in path.iter().zip(offsets) {
                    *slot(config) = at;
                }
                hooks.attached.push(hook.into());
            }
            Err(e) => hooks.missing.push((hook.into(), format!("{e:#}"))),
        }
    }
}

/// The tracepoints find a flow by tuple and network namespace only when every one in use that
/// looks flows up (the SYN-ACK one does not: no flow is tracked before establishment) can read
/// its socket (`skaddr`) and the kernel's BTF placed the namespace's cookie; else by tuple
/// alone, for sock_ops as for them (`TrackedKey::netns_cookie` 0).
pub fn netns_index(config: &mut Config, hooks: &mut Hooks, usable_tracepoints: &[&str]) {
    if config.sock_net == TracepointOffsets::ABSENT {
        return; // (missing already, with the BTF's reason)
    }
    let without_socket = TRACEPOINTS.iter().find(|tp| {
        tp.program != "tcp_retransmit_synack"
            && usable_tracepoints.contains(&tp.program)
            && (tp.slot)(config).skaddr == TracepointOffsets::ABSENT
    });
    if let Some(tp) = without_socket {
        config.sock_net = TracepointOffsets::ABSENT;
        config.net_cookie = TracepointOffsets::ABSENT;
        hooks.attached.retain(|h| h != NETNS_COOKIE_HOOK);
        let why = format!("{}:{} has no skaddr field", tp.category, tp.name);
        hooks.missing.push((NETNS_COOKIE_HOOK.into(), why));
    }
}

/// Whether sock_ops will read any `tcp_sock` member.
pub fn reads_tcp_sock(config: &Config) -> bool {
    let mut config = *config;
    TCP_SOCK_MEMBERS
        .iter()
        .map(|(slot, _)| *slot)
        .chain(CGROUP_ID_PATH.iter().map(|(slot, _)| *slot))
        .any(|slot| *slot(&mut config) != TracepointOffsets::ABSENT)
}

/// Turns the kernel struct reads off (their columns become null), saying why.
pub fn forget_tcp_sock_offsets(config: &mut Config, hooks: &mut Hooks, why: &str) {
    let hooks_off = TCP_SOCK_MEMBERS
        .iter()
        .map(|(slot, member)| (*slot, format!("tcp_sock:{member}")))
        .chain(
            CGROUP_ID_PATH
                .iter()
                .map(|(slot, _)| (*slot, CGROUP_ID_HOOK.to_string())),
        );
    for (slot, hook) in hooks_off {
        *slot(config) = TracepointOffsets::ABSENT;
        hooks.attached.retain(|h| *h != hook);
        if !hooks.missing.iter().any(|(h, _)| *h == hook) {
            hooks.missing.push((hook, why.to_owned()));
        }
    }
}

/// Turns on sock_ops' callbacks for the connections already open (after sock_ops is attached,
/// so none is missed in between), and says what it did.
pub fn adopt_open_connections(ebpf: &mut Ebpf, netns: Option<&Path>, hooks: &mut Hooks) {
    const HOOK: &str = "iter:tcp";
    let namespaces = super::adopt::namespaces(netns);
    match super::adopt::adopt_open_connections(ebpf, &namespaces) {
        Ok(a) => {
            for (ns, why) in &a.failed {
                log::debug!("open connections in {} not adopted: {why}", ns.display());
            }
            if a.refused > 0 && a.connections == 0 {
                hooks.missing.push((
                    HOOK.into(),
                    format!(
                        "this kernel does not let a program turn on an open connection's callbacks (Linux 6.12 does): {} connections open before the start are not recorded",
                        a.refused
                    ),
                ));
                return;
            }
            log::info!(
                "adopting connections open before the start: {} in {} network namespace(s){}, recorded from their next segment if the filters keep them",
                a.connections,
                a.namespaces,
                if a.failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({} could not be entered)", a.failed.len())
                }
            );
            hooks.attached.push(HOOK.into());
        }
        Err(e) => hooks.missing.push((
            format!("{HOOK} (connections open before the start)"),
            short_error(&e),
        )),
    }
}

pub fn attach_sockops(ebpf: &mut Ebpf, cgroup: &Path) -> Result<()> {
    let prog: &mut SockOps = ebpf
        .program_mut("scaletrace_sockops")
        .context("program scaletrace_sockops missing from the object")?
        .try_into()?;
    prog.load()
        .context("the verifier rejected the sock_ops program")?;
    let dir = std::fs::File::open(cgroup)
        .with_context(|| format!("opening cgroup {}", cgroup.display()))?;
    // Default mode: on 5.7+ aya attaches through a BPF link, which always coexists with other
    // sock_ops users (CNI plugins) and takes no flags (AllowMultiple there is EINVAL).
    prog.attach(dir, CgroupAttachMode::default())
        .with_context(|| format!("attaching sock_ops to {}", cgroup.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with_netns_offsets() -> Config {
        let mut config = Config::DEFAULT;
        (config.sock_net, config.net_cookie) = (48, 120);
        for tp in &TRACEPOINTS {
            (tp.slot)(&mut config).skaddr = 16;
        }
        config
    }

    #[test]
    fn flows_are_found_by_tuple_alone_when_a_lookup_tracepoint_cannot_read_its_socket() {
        let all: Vec<&str> = TRACEPOINTS.iter().map(|tp| tp.program).collect();
        // every tracepoint reads its socket: by namespace
        let mut config = config_with_netns_offsets();
        let mut hooks = Hooks::default();
        netns_index(&mut config, &mut hooks, &all);
        assert_eq!((config.sock_net, config.net_cookie), (48, 120));
        assert!(hooks.missing.is_empty());
        // the SYN-ACK tracepoint looks no flow up: its socket does not matter
        config.synack_tp.skaddr = TracepointOffsets::ABSENT;
        netns_index(&mut config, &mut hooks, &all);
        assert_eq!(config.sock_net, 48);
        // the state tracepoint does
        config.state_tp.skaddr = TracepointOffsets::ABSENT;
        netns_index(&mut config, &mut hooks, &all);
        assert_eq!(
            (config.sock_net, config.net_cookie),
            (TracepointOffsets::ABSENT, TracepointOffsets::ABSENT)
        );
        assert_eq!(hooks.missing.len(), 1, "{:?}", hooks.missing);
        assert!(hooks.missing[0].1.contains("inet_sock_set_state"));
        // unless it is not in use
        let mut config = config_with_netns_offsets();
        config.state_tp.skaddr = TracepointOffsets::ABSENT;
        netns_index(&mut config, &mut Hooks::default(), &["tcp_retransmit_skb"]);
        assert_eq!(config.sock_net, 48);
        // BTF without the members: missing once, with the BTF's reason (listed before)
        let mut config = Config::DEFAULT;
        let mut hooks = Hooks::default();
        netns_index(&mut config, &mut hooks, &all);
        assert!(hooks.missing.is_empty());
    }
}
