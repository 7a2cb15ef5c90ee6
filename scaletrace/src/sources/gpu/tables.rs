//! The tables of the GPU source: devices, samples and the processes using them.
use crate::columns::*;

table! {
    /// One GPU of the node, recorded once per run or file interval, with its nearest NIC.
    pub struct GpuDeviceRow in "gpu_devices" {
        description: "The node's GPUs (NVML), once per run (`agent`: once per file interval, so every \
        hour partition has them), with the NIC nearest to each in the PCIe tree: GPU-NIC locality \
        is a classic cause of one slow rank. Empty where NVML found no GPU.",
        host: String => str_col("Node hostname."),
        run_id: String => str_col("Run of `scaletrace record`."),
        index: u32 => u32_col("", "NVML device index."),
        uuid: String => str_col("GPU UUID."),
        name: String => str_col("Product name."),
        pci_bus_id: String => str_col("PCI bus id as NVML reports it."),
        numa_node: Option<i64> => opt_i64_col("", "NUMA node of the GPU (sysfs)."),
        memory_total_bytes: Option<u64> => opt_u64_col("bytes", "GPU memory."),
        nearest_nic: Option<String> => opt_str_col("Nearest network or RDMA device (sysfs class/net, class/infiniband)."),
        nic_numa_node: Option<i64> => opt_i64_col("", "NUMA node of that NIC."),
        nic_locality: Option<String> => opt_str_col("`PIX` (common PCIe switch), `PHB` (same host bridge), `NODE` (same NUMA node), `SYS` (across NUMA nodes), as in `nvidia-smi topo -m`."),
    }
}

table! {
    /// One NVML sample of one GPU. Metrics the GPU does not support are null.
    pub struct GpuSampleRow in "gpu_samples" {
        description: "NVML samples of every GPU at `--gpu-interval` (default 100 ms) during `record`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        index: u32 => u32_col("", "NVML device index; joins to `gpu_devices.index`."),
        sm_util_pct: Option<u32> => opt_u32_col("%", "Share of the last sample period with a kernel running."),
        mem_util_pct: Option<u32> => opt_u32_col("%", "Share of the period with device memory being read or written."),
        sm_clock_mhz: Option<u32> => opt_u32_col("MHz", "SM clock."),
        mem_clock_mhz: Option<u32> => opt_u32_col("MHz", "Memory clock."),
        power_mw: Option<u32> => opt_u32_col("mW", "Power draw."),
        temperature_c: Option<u32> => opt_u32_col("°C", "GPU temperature."),
        memory_used_bytes: Option<u64> => opt_u64_col("bytes", "Device memory in use."),
        pcie_tx_bytes_per_s: Option<u64> => opt_u64_col("bytes/s", "PCIe transmit throughput (NVML, 20 ms window)."),
        pcie_rx_bytes_per_s: Option<u64> => opt_u64_col("bytes/s", "PCIe receive throughput."),
        throttle_reasons: Option<String> => opt_str_col("Active clock throttle reasons, comma-separated; empty when none."),
        nvlink_tx_bytes_per_s: Option<f64> => opt_f64_col("bytes/s", "NVLink data transmitted over all links since the device's previous sample (NVML field 138); null without NVLink and in a device's first sample."),
        nvlink_rx_bytes_per_s: Option<f64> => opt_f64_col("bytes/s", "NVLink data received over all links since the previous sample (NVML field 139)."),
        nvlink_crc_errors: Option<u64> => opt_u64_col("count", "NVLink CRC (flit) errors over all links since the driver loaded (NVML field 45): a count that rises is a bad link."),
        nvlink_replay_errors: Option<u64> => opt_u64_col("count", "NVLink replays over all links since the driver loaded (NVML field 52)."),
        nvlink_recovery_errors: Option<u64> => opt_u64_col("count", "NVLink recoveries over all links since the driver loaded (NVML field 59)."),
    }
}

table! {
    /// Per-process GPU utilization, keyed by pid so it joins to `flows.pid`.
    pub struct GpuProcessRow in "gpu_processes" {
        description: "Per-process utilization samples where NVML offers them (`nvmlDeviceGetProcessUtilization`).",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time (NVML's own timestamp of the sample)."),
        index: u32 => u32_col("", "NVML device index."),
        pid: u32 => u32_col("", "Process id; joins to `flows.pid`."),
        cgroup: Option<String> => opt_str_col("The process's cgroup v2 path (`/proc/PID/cgroup` at the sample); null if it is not visible to the recorder."),
        pod_uid: Option<String> => opt_str_col("Kubernetes pod UID, from the cgroup path; null outside a pod."),
        container_id: Option<String> => opt_str_col("Container runtime's id, from the cgroup path; null outside a container."),
        slurm_job: Option<String> => opt_str_col("Slurm job id, from the cgroup path; null outside a Slurm job."),
        sm_util_pct: u32 => u32_col("%", "SM utilization by this process."),
        mem_util_pct: u32 => u32_col("%", "Memory utilization by this process."),
    }
}
