//! [`GpuSource`] on NVML (nvml-wrapper loads libnvidia-ml.so at run time, so the binary builds
//! and runs on machines without the NVIDIA driver).
use anyhow::Result;
use nvml_wrapper::{
    enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor},
    enums::device::SampleValue,
    struct_wrappers::device::FieldValueSample,
    structs::device::FieldId,
    Device, Nvml,
};

/// NVML field ids (nvml.h NVML_FI_DEV_*), totals over all NVLinks.
const NVLINK_FIELDS: [u32; 5] = [138, 139, 45, 52, 59]; // tx KiB, rx KiB, CRC, replay, recovery

fn sample_u64(s: &Result<FieldValueSample, nvml_wrapper::error::NvmlError>) -> Option<u64> {
    match s.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U64(v) => Some(*v),
        SampleValue::U32(v) => Some(*v as u64),
        SampleValue::I64(v) => u64::try_from(*v).ok(),
        SampleValue::F64(v) => Some(*v as u64),
    }
}

/// NVLink counters, or all None on GPUs without NVLink.
fn nvlink_counters(d: &Device) -> [Option<u64>; 5] {
    let ids: Vec<FieldId> = NVLINK_FIELDS.iter().map(|&f| FieldId(f)).collect();
    match d.field_values_for(&ids) {
        Ok(values) if values.len() == 5 => std::array::from_fn(|i| sample_u64(&values[i])),
        _ => [None; 5],
    }
}

use super::{GpuInfo, GpuMetrics, GpuSource, ProcessUtil};

pub struct NvmlSource {
    nvml: Nvml,
}

impl NvmlSource {
    pub fn init() -> Result<Self, String> {
        Nvml::init()
            .map(|nvml| NvmlSource { nvml })
            .map_err(|e| format!("NVML unavailable ({e}): no NVIDIA driver or GPU on this node"))
    }
}

impl GpuSource for NvmlSource {
    fn devices(&self) -> Result<Vec<GpuInfo>> {
        let count = self.nvml.device_count()?;
        let mut out = Vec::new();
        for index in 0..count {
            let d = self.nvml.device_by_index(index)?;
            out.push(GpuInfo {
                index,
                uuid: d.uuid().unwrap_or_default(),
                name: d.name().unwrap_or_default(),
                pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                memory_total_bytes: d.memory_info().ok().map(|m| m.total),
            });
        }
        Ok(out)
    }

    fn metrics(&self, index: u32) -> GpuMetrics {
        let Ok(d) = self.nvml.device_by_index(index) else {
            return GpuMetrics::default();
        };
        let util = d.utilization_rates().ok();
        let [nvlink_tx_kib, nvlink_rx_kib, nvlink_crc_errors, nvlink_replay_errors, nvlink_recovery_errors] =
            nvlink_counters(&d);
        GpuMetrics {
            nvlink_tx_kib,
            nvlink_rx_kib,
            nvlink_crc_errors,
            nvlink_replay_errors,
            nvlink_recovery_errors,
            sm_util_pct: util.as_ref().map(|u| u.gpu),
            mem_util_pct: util.as_ref().map(|u| u.memory),
            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
            mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
            power_mw: d.power_usage().ok(),
            temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
            memory_used_bytes: d.memory_info().ok().map(|m| m.used),
            pcie_tx_kib_per_s: d.pcie_throughput(PcieUtilCounter::Send).ok(),
            pcie_rx_kib_per_s: d.pcie_throughput(PcieUtilCounter::Receive).ok(),
            throttle_reasons: d.current_throttle_reasons().ok().map(|r| {
                r.iter_names()
                    .map(|(name, _)| name.to_ascii_lowercase())
                    .collect()
            }),
        }
    }

    fn processes(&self, index: u32, since_us: u64) -> Vec<ProcessUtil> {
        let Ok(d) = self.nvml.device_by_index(index) else {
            return Vec::new();
        };
        d.process_utilization_stats(since_us)
            .map(|v| {
                v.into_iter()
                    .map(|p| ProcessUtil {
                        pid: p.pid,
                        timestamp_us: p.timestamp,
                        sm_util_pct: p.sm_util,
                        mem_util_pct: p.mem_util,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}
