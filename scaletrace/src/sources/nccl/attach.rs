//! Attaching the NCCL source: an entry and a return uprobe on each function of NCCL's public API.
use crate::sources::uprobes::UprobeFamily;

pub const NCCL: UprobeFamily = UprobeFamily {
    label: "nccl",
    functions: &scaletrace_common::NCCL_FUNCTIONS,
    program: nccl_program,
    flag: "nccl-lib",
    lib_prefix: "libnccl.so",
    soname: "libnccl.so",
};

/// eBPF program name of the entry probe of an NCCL function: ncclAllReduce -> nccl_all_reduce.
pub fn nccl_program(symbol: &str) -> String {
    let mut snake = String::from("nccl");
    for c in symbol.trim_start_matches("nccl").chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}
