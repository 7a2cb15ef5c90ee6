//! Which trace events are communication, and which collective each one is.
//!
//! The rule (documented in docs/schema.md through the `gpu_events` columns):
//! - `nccl_kernel`: GPU kernels named `ncclKernel_*` / `ncclDevKernel_*` (NCCL and RCCL).
//! - `comm_kernel`: other GPU kernels of communication libraries, recognised by name: DeepEP
//!   (`deep_ep::` dispatch/combine, the all-to-all of expert parallelism), NVSHMEM, MSCCL++,
//!   TransformerEngine userbuffers, vLLM's `cross_device_reduce`, PyTorch symmetric-memory
//!   all-reduce kernels, and any kernel whose name spells a collective (`all_reduce`,
//!   `allgather`, `reduce_scatter`, `all_to_all`, ...). Everything else on the GPU is compute.
//! - `c10d`: the CPU-side `c10d::<op>_` operators every PyTorch backend goes through (gloo,
//!   NCCL, MPI, UCC): the call into the process group, on the thread that issued it.
//! - `backend`: the backend's own annotation of the operation (`gloo:all_reduce`,
//!   `nccl:all_reduce`, `ucc:...`, `mpi:...`); for gloo this spans the data transfer itself.
//! - `param_comms`: `record_param_comms`, which carries the process group, message size, data
//!   type and (in newer PyTorch) the sequence number in its arguments.

/// How an event was recognised as communication (the `comm_source` column).
pub const NCCL_KERNEL: &str = "nccl_kernel";
pub const COMM_KERNEL: &str = "comm_kernel";
pub const C10D: &str = "c10d";
pub const BACKEND: &str = "backend";
pub const PARAM_COMMS: &str = "param_comms";

/// The collective of an NCCL kernel name: `ncclDevKernel_AllReduce_Sum_f32_RING_LL` and
/// `ncclKernel_AllGather_RING_LL_Sum_int8_t` give `AllReduce` and `AllGather`.
pub fn nccl_collective(kernel_name: &str) -> Option<&str> {
    let rest = kernel_name
        .strip_prefix("ncclDevKernel_")
        .or_else(|| kernel_name.strip_prefix("ncclKernel_"))?;
    let op = rest.split(['_', '(']).next().filter(|s| !s.is_empty())?;
    Some(op)
}

/// A collective named in snake case or lower case by PyTorch (`all_reduce`, `allreduce`,
/// `_allgather_base`, `reduce_scatter_tensor_coalesced`, `alltoall_base`, `send`, `recv`,
/// `barrier`) in the names scaletrace uses for NCCL kernels (`AllReduce`, ...).
pub fn canonical_collective(op: &str) -> Option<&'static str> {
    let squashed: String = op
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    // Longest names first: `reducescatter` contains `reduce`, `allreduce` contains `reduce`.
    const NAMES: [(&str, &str); 14] = [
        ("reducescatter", "ReduceScatter"),
        ("allreduce", "AllReduce"),
        ("allgather", "AllGather"),
        ("alltoall", "AllToAll"),
        ("broadcast", "Broadcast"),
        ("sendrecv", "SendRecv"),
        ("barrier", "Barrier"),
        ("gather", "Gather"),
        ("scatter", "Scatter"),
        ("reduce", "Reduce"),
        ("dispatch", "AllToAll"),
        ("combine", "AllToAll"),
        ("send", "Send"),
        ("recv", "Recv"),
    ];
    NAMES
        .iter()
        .find(|(key, _)| squashed.contains(key))
        .map(|&(_, name)| name)
}

/// Library prefixes of GPU kernels that move data between GPUs.
const COMM_KERNEL_MARKERS: [&str; 9] = [
    "deep_ep::",
    "nvshmem",
    "mscclpp",
    "userbuffers",
    "cross_device_reduce",
    "one_shot_all_reduce",
    "two_shot_all_reduce",
    "multimem_all_reduce",
    "symm_mem",
];
/// Collective spellings that name a communication kernel wherever they appear.
const COLLECTIVE_SPELLINGS: [&str; 8] = [
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "all_to_all",
    "alltoall",
];

/// A communication event: how it was recognised and its collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm {
    pub source: &'static str,
    pub collective: &'static str,
}

/// Classifies one complete event by its category and name; `collective_arg` is the
/// `Collective name` argument some events carry (`record_param_comms`, NCCL kernels).
pub fn classify(on_gpu: bool, name: &str, collective_arg: Option<&str>) -> Option<Comm> {
    let from_arg = collective_arg.and_then(canonical_collective);
    if on_gpu {
        if let Some(op) = nccl_collective(name) {
            let collective = canonical_collective(op).or(from_arg).unwrap_or("Other");
            return Some(Comm {
                source: NCCL_KERNEL,
                collective,
            });
        }
        let lower = name.to_ascii_lowercase();
        let library = COMM_KERNEL_MARKERS.iter().any(|m| lower.contains(m));
        let spelled = COLLECTIVE_SPELLINGS.iter().any(|m| lower.contains(m));
        if !(library || spelled) {
            return None;
        }
        let kernel = lower.split('(').next().unwrap_or(&lower);
        return Some(Comm {
            source: COMM_KERNEL,
            collective: from_arg
                .or_else(|| canonical_collective(kernel))
                .unwrap_or("Other"),
        });
    }
    if name == "record_param_comms" {
        return Some(Comm {
            source: PARAM_COMMS,
            collective: from_arg.unwrap_or("Other"),
        });
    }
    if let Some(op) = name.strip_prefix("c10d::") {
        // `c10d::wait`, `c10d::allreduce_` ... only collectives, not the helpers around them.
        return canonical_collective(op).map(|collective| Comm {
            source: C10D,
            collective,
        });
    }
    for backend in ["gloo:", "nccl:", "ucc:", "mpi:", "xccl:"] {
        if let Some(op) = name.strip_prefix(backend) {
            return canonical_collective(op).map(|collective| Comm {
                source: BACKEND,
                collective,
            });
        }
    }
    None
}

/// Bytes per element of the `dtype` names PyTorch writes in `record_param_comms`.
pub fn dtype_bytes(dtype: &str) -> Option<i64> {
    Some(match dtype {
        "Double" | "Long" | "ComplexFloat" | "UInt64" => 8,
        "Float" | "Int" | "UInt32" => 4,
        "Half" | "BFloat16" | "Short" | "UInt16" => 2,
        "Byte" | "Char" | "Bool" | "Float8_e4m3fn" | "Float8_e5m2" | "Float8_e4m3fnuz"
        | "Float8_e5m2fnuz" => 1,
        "ComplexDouble" => 16,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_kernels() {
        assert_eq!(
            nccl_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"),
            Some("AllReduce")
        );
        assert_eq!(
            nccl_collective("ncclKernel_AllGather_RING_LL_Sum_int8_t"),
            Some("AllGather")
        );
        assert_eq!(nccl_collective("volta_sgemm_128x64_nn"), None);
        let c = classify(
            true,
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            None,
        )
        .unwrap();
        assert_eq!((c.source, c.collective), (NCCL_KERNEL, "SendRecv"));
    }

    #[test]
    fn cpu_side_collectives_of_every_backend() {
        let cases = [
            ("c10d::allreduce_", C10D, "AllReduce"),
            ("c10d::_allgather_base_", C10D, "AllGather"),
            ("c10d::alltoall_base_", C10D, "AllToAll"),
            (
                "c10d::reduce_scatter_tensor_coalesced_",
                C10D,
                "ReduceScatter",
            ),
            ("c10d::broadcast_", C10D, "Broadcast"),
            ("gloo:all_reduce", BACKEND, "AllReduce"),
            ("gloo:broadcast", BACKEND, "Broadcast"),
            ("nccl:_all_gather_base", BACKEND, "AllGather"),
            ("nccl:all_to_all", BACKEND, "AllToAll"),
            ("c10d::barrier", C10D, "Barrier"),
            ("c10d::send", C10D, "Send"),
        ];
        for (name, source, collective) in cases {
            assert_eq!(
                classify(false, name, None),
                Some(Comm { source, collective }),
                "{name}"
            );
        }
        assert_eq!(
            classify(false, "record_param_comms", Some("allreduce")),
            Some(Comm {
                source: PARAM_COMMS,
                collective: "AllReduce"
            })
        );
        assert_eq!(classify(false, "c10d::wait", None), None);
        assert_eq!(classify(false, "aten::mm", None), None);
        assert_eq!(classify(false, "ProfilerStep#4", None), None);
    }

    #[test]
    fn other_communication_kernels() {
        let dispatch = classify(
            true,
            "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)",
            None,
        )
        .unwrap();
        assert_eq!(
            (dispatch.source, dispatch.collective),
            (COMM_KERNEL, "AllToAll")
        );
        let ar = classify(
            true,
            "void vllm::cross_device_reduce_1stage<float, 8>(x)",
            None,
        );
        assert_eq!(ar.map(|c| c.source), Some(COMM_KERNEL));
        assert_eq!(classify(true, "volta_sgemm_128x64_nn", None), None);
        // `Reduce` and `gather` inside compute kernels' names are not communication.
        assert_eq!(
            classify(true, "void at::native::reduce_kernel<512, 1>(x)", None),
            None
        );
        assert_eq!(
            classify(true, "void at::native::index_gather_kernel(x)", None),
            None
        );
    }

    #[test]
    fn dtypes() {
        assert_eq!(dtype_bytes("Float"), Some(4));
        assert_eq!(dtype_bytes("BFloat16"), Some(2));
        assert_eq!(dtype_bytes("Mystery"), None);
    }
}
