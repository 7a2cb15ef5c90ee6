//! tracefs: mounting it when the host did not, and reading tracepoint record layouts.
//!
//! Tracepoint field offsets differ between kernel versions (6.x added `err` to
//! `tcp_retransmit_skb`, older kernels lack `protocol` in `inet_sock_set_state`, ...). Rust eBPF
//! has no CO-RE, so the loader parses the `format` file and hands the offsets to the programs.
use std::{collections::HashMap, fs, path::PathBuf};

use anyhow::{bail, Context as _, Result};
use scaletrace_common::TracepointOffsets;

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Returns the tracefs root, mounting tracefs at /sys/kernel/tracing if nothing is mounted.
pub fn ensure_mounted() -> Result<PathBuf> {
    for dir in CANDIDATES {
        if PathBuf::from(dir).join("events").is_dir() {
            return Ok(dir.into());
        }
    }
    let target = CANDIDATES[0];
    nix::mount::mount(
        Some("tracefs"),
        target,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .with_context(|| format!("tracefs is not mounted and mounting it at {target} failed"))?;
    Ok(target.into())
}

/// One `field:` line of a tracepoint `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u16,
    pub size: u16,
}

/// Parses a tracefs `format` file into fields by name (array suffixes like `[4]` removed).
pub fn parse_format(text: &str) -> Result<HashMap<String, Field>> {
    let mut fields = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = Some(
                    v.parse::<u16>()
                        .with_context(|| format!("bad offset in `{line}`"))?,
                );
            } else if let Some(v) = part.strip_prefix("size:") {
                size = Some(
                    v.parse::<u16>()
                        .with_context(|| format!("bad size in `{line}`"))?,
                );
            } else if decl.is_none() && !part.is_empty() && !part.starts_with("signed:") {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            bail!("malformed field line `{line}`");
        };
        // The name is the last word of the declaration, e.g. `__u8 saddr[4]` -> `saddr`.
        let name = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*')
            .next()
            .unwrap_or(decl);
        let name = name.split('[').next().unwrap_or(name).to_string();
        fields.insert(name.clone(), Field { name, offset, size });
    }
    if fields.is_empty() {
        bail!("no fields found");
    }
    Ok(fields)
}

/// Maps parsed fields onto the offsets the eBPF side reads. `state_field` names the field that
/// goes into `oldstate` (`state` for tcp_retransmit_skb, `oldstate` for inet_sock_set_state).
/// Fails when a field the programs cannot do without is missing or has an unexpected size.
pub fn offsets(
    fields: &HashMap<String, Field>,
    state_field: Option<&str>,
) -> Result<TracepointOffsets> {
    let get = |name: &str, size: u16, required: bool| -> Result<u16> {
        match fields.get(name) {
            Some(f) if f.size == size => Ok(f.offset),
            Some(f) => bail!("field `{name}` has size {} (expected {size})", f.size),
            None if required => bail!("field `{name}` is missing"),
            None => Ok(TracepointOffsets::ABSENT),
        }
    };
    Ok(TracepointOffsets {
        oldstate: match state_field {
            Some(name) => get(name, 4, false)?,
            None => TracepointOffsets::ABSENT,
        },
        newstate: get("newstate", 4, false)?,
        sport: get("sport", 2, true)?,
        dport: get("dport", 2, true)?,
        family: get("family", 2, true)?,
        protocol: get("protocol", 2, false)?,
        saddr: get("saddr", 4, true)?,
        daddr: get("daddr", 4, true)?,
        saddr_v6: get("saddr_v6", 16, true)?,
        daddr_v6: get("daddr_v6", 16, true)?,
        // optional and only informative: a layout it does not expect drops it, not the hook
        err: get("err", 4, false).unwrap_or(TracepointOffsets::ABSENT),
        // optional: without it, flows are told apart by tuple alone
        skaddr: get("skaddr", 8, false).unwrap_or(TracepointOffsets::ABSENT),
    })
}

/// Reads and parses the format of `category/name` under the tracefs root.
pub fn tracepoint_offsets(
    root: &std::path::Path,
    category: &str,
    name: &str,
    state_field: Option<&str>,
) -> Result<TracepointOffsets> {
    let path = root.join("events").join(category).join(name).join("format");
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "tracepoint {category}:{name} not available ({})",
            path.display()
        )
    })?;
    let fields = parse_format(&text).with_context(|| format!("parsing {}", path.display()))?;
    offsets(&fields, state_field).with_context(|| format!("tracepoint {category}:{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Verbatim from Linux 6.18.
    const RETRANSMIT_6_18: &str = "name: tcp_retransmit_skb
ID: 1541
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:const void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int state;\toffset:24;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:28;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:30;\tsize:2;\tsigned:0;
\tfield:__u16 family;\toffset:32;\tsize:2;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:34;\tsize:4;\tsigned:0;
\tfield:__u8 daddr[4];\toffset:38;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:42;\tsize:16;\tsigned:0;
\tfield:__u8 daddr_v6[16];\toffset:58;\tsize:16;\tsigned:0;
\tfield:int err;\toffset:76;\tsize:4;\tsigned:1;

print fmt: \"skbaddr=%p\"
";

    #[test]
    fn parses_retransmit_format() {
        let fields = parse_format(RETRANSMIT_6_18).unwrap();
        assert_eq!(fields["skaddr"].offset, 16);
        assert_eq!(fields["saddr_v6"].size, 16);
        assert_eq!(fields["common_pid"].offset, 4);
        let off = offsets(&fields, Some("state")).unwrap();
        assert_eq!(off.skaddr, 16);
        assert_eq!(off.oldstate, 24);
        assert_eq!(off.sport, 28);
        assert_eq!(off.family, 32);
        assert_eq!(off.saddr, 34);
        assert_eq!(off.daddr_v6, 58);
        assert_eq!(off.newstate, TracepointOffsets::ABSENT);
        assert_eq!(off.protocol, TracepointOffsets::ABSENT);
    }

    #[test]
    fn missing_required_field_is_an_error() {
        let text = RETRANSMIT_6_18.replace("field:__u16 family;", "field:__u16 fam;");
        let err = offsets(&parse_format(&text).unwrap(), None).unwrap_err();
        assert!(err.to_string().contains("`family` is missing"), "{err}");
    }

    #[test]
    fn wrong_size_is_an_error() {
        let text = RETRANSMIT_6_18.replace(
            "__u16 sport;\toffset:28;\tsize:2",
            "__u32 sport;\toffset:28;\tsize:4",
        );
        let err = offsets(&parse_format(&text).unwrap(), None).unwrap_err();
        assert!(err.to_string().contains("size 4"), "{err}");
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(parse_format("hello\nworld").is_err());
        assert!(parse_format("\tfield:int x;\toffset:abc;\tsize:4;").is_err());
    }
}
