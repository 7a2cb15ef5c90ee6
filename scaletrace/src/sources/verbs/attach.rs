//! Attaching the verbs source: the control path (libibverbs' public API, as a uprobe family) and
//! the data path (post_send/poll_cq of the RDMA provider libraries, found here).
use aya::Ebpf;

use crate::{
    hooks::{short_error, Hooks},
    sources::uprobes::{attach_uprobe_at, elf_symbols, uprobe_scope, UprobeFamily},
};

pub const VERBS: UprobeFamily = UprobeFamily {
    label: "verbs",
    functions: &scaletrace_common::VERBS_FUNCTIONS,
    program: str::to_string,
    flag: "verbs-lib",
    lib_prefix: "libibverbs.so",
    soname: "libibverbs.so.1",
};

/// The flag that names the RDMA provider libraries (their data path).
pub const PROVIDER_FLAG: &str = "verbs-provider-lib";

/// Attaches the data-path probes to each provider library whose symbol table has
/// `<prefix>_post_send` / `<prefix>_poll_cq`. Distribution builds strip these static functions:
/// among the libraries found on the system, that is one line, not one per library; a library
/// named on the command line (`explicit`) that cannot serve gets its own line with the reason.
pub fn attach_verbs_providers(
    ebpf: &mut Ebpf,
    libs: &[std::path::PathBuf],
    explicit: bool,
    pid: Option<u32>,
    hooks: &mut Hooks,
) {
    let scope = uprobe_scope(pid);
    let mut found = false;
    for lib in libs {
        let table = match elf_symbols::FunctionTable::read(lib) {
            Ok(table) => table,
            Err(e) if explicit => {
                let why = if lib.exists() || lib.is_symlink() {
                    short_error(&e)
                } else {
                    "no such file".into()
                };
                hooks
                    .missing
                    .push((format!("verbs-data-path:{}", lib.display()), why));
                continue;
            }
            Err(_) => continue,
        };
        let mut provides = false;
        for prefix in scaletrace_common::VERBS_PROVIDER_PREFIXES {
            let (Some(post_at), Some(poll_at)) = (
                table.offset(&format!("{prefix}_post_send")),
                table.offset(&format!("{prefix}_poll_cq")),
            ) else {
                continue;
            };
            provides = true;
            let hook = format!("verbs-data-path({prefix}):{}", lib.display());
            let result = attach_uprobe_at(ebpf, "verbs_post_send", post_at, lib, scope)
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq", poll_at, lib, scope))
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq_ret", poll_at, lib, scope));
            match result {
                Ok(()) => hooks.attached.push(hook),
                Err(e) => hooks.missing.push((hook, short_error(&e))),
            }
        }
        if !provides && explicit {
            hooks.missing.push((
                format!("verbs-data-path:{}", lib.display()),
                format!(
                    "exports no <provider>_post_send/_poll_cq of the providers known ({}): not an RDMA provider library, or one whose symbols are stripped",
                    scaletrace_common::VERBS_PROVIDER_PREFIXES.join(", ")
                ),
            ));
        }
        found |= provides;
    }
    if !found && !explicit && !libs.is_empty() {
        hooks.missing.push((
            "verbs-data-path".into(),
            format!(
                "none of the {} RDMA provider libraries found exports post_send/poll_cq symbols (stripped: install the rdma-core debug symbols, or name an unstripped provider with --{PROVIDER_FLAG})",
                libs.len()
            ),
        ));
    }
}
