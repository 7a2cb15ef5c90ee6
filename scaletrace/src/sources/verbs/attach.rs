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
/// `<prefix>_post_send` / `<prefix>_poll_cq`. Distribution builds strip these static functions;
/// then one line says so instead of one per library.
pub fn attach_verbs_providers(
    ebpf: &mut Ebpf,
    libs: &[std::path::PathBuf],
    pid: Option<u32>,
    hooks: &mut Hooks,
) {
    let scope = uprobe_scope(pid);
    let mut found = false;
    for lib in libs {
        for prefix in scaletrace_common::VERBS_PROVIDER_PREFIXES {
            let post = format!("{prefix}_post_send");
            let poll = format!("{prefix}_poll_cq");
            let (Ok(post_at), Ok(poll_at)) = (
                elf_symbols::function_offset(lib, &post),
                elf_symbols::function_offset(lib, &poll),
            ) else {
                continue;
            };
            found = true;
            let hook = format!("verbs-data-path({prefix}):{}", lib.display());
            let result = attach_uprobe_at(ebpf, "verbs_post_send", post_at, lib, scope)
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq", poll_at, lib, scope))
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq_ret", poll_at, lib, scope));
            match result {
                Ok(()) => hooks.attached.push(hook),
                Err(e) => hooks.missing.push((hook, short_error(&e))),
            }
        }
    }
    if !found && !libs.is_empty() {
        hooks.missing.push((
            "verbs-data-path".into(),
            format!(
                "no provider among {} exports post_send/poll_cq symbols (stripped; install the rdma-core debug symbols or pass --verbs-provider-lib)",
                libs.len()
            ),
        ));
    }
}
