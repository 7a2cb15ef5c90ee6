//! `scaletrace record` flags and their translation into the eBPF filter configuration.
use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ipnet::IpNet;
use scaletrace_common::{Config, AF_INET, AF_INET6};

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Stop after this long (e.g. 30s, 5m, 1h). Without it, record until Ctrl-C or SIGTERM.
    #[arg(short, long, value_parser = parse_record_duration)]
    pub duration: Option<Duration>,

    /// Directory for the Parquet files; each table goes to <OUT>/<table>/<run-id>.parquet.
    #[arg(short, long, default_value = crate::layout::DEFAULT_DIR)]
    pub out: PathBuf,

    /// Only flows whose local or remote port is PORT or in LOW-HIGH (e.g. 29500-29600).
    #[arg(long, value_name = "PORT|LOW-HIGH", value_parser = parse_port_range)]
    pub port: Option<(u16, u16)>,

    /// Only flows whose local or remote address is in this CIDR (e.g. 10.0.0.0/8, fd00::/64).
    #[arg(long, value_name = "CIDR", value_parser = parse_cidr)]
    pub cidr: Option<IpNet>,

    /// Only flows in this network namespace: a name from `ip netns` or a path like
    /// /proc/PID/ns/net.
    #[arg(long, value_name = "NAME|PATH")]
    pub netns: Option<String>,

    /// Only flows of processes in this cgroup v2 directory (sock_ops is attached there instead
    /// of the root of the hierarchy).
    #[arg(long, value_name = "DIR", conflicts_with = "pid")]
    pub cgroup: Option<PathBuf>,

    /// Only this process: flows of its cgroup v2 (e.g. the training job's container or systemd
    /// unit), and NCCL calls of this process (its mapped libnccl is found in /proc/PID/maps).
    #[arg(long)]
    pub pid: Option<u32>,

    /// libnccl to trace with uprobes (repeatable). Default: the libnccl mapped by --pid, else
    /// the one in the dynamic linker cache; without any, collective tracing is off.
    #[arg(long = "nccl-lib", value_name = "PATH")]
    pub nccl_libs: Vec<PathBuf>,

    /// libibverbs to trace with uprobes (repeatable); found like --nccl-lib when not given.
    #[arg(long = "verbs-lib", value_name = "PATH")]
    pub verbs_libs: Vec<PathBuf>,

    /// RDMA provider library (e.g. libmlx5) whose post_send/poll_cq to probe for the data path
    /// (repeatable). Default: the providers --pid has mapped, else the system's provider
    /// directory. Needs the functions in the library's symbol table (unstripped or with debug
    /// symbols installed).
    #[arg(long = "verbs-provider-lib", value_name = "PATH")]
    pub verbs_provider_libs: Vec<PathBuf>,

    /// Send one successful RDMA completion in N to the verbs_completions table (failed ones
    /// always); every completion is still counted per QP in qp_traffic.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub verbs_sample_every: u64,

    /// Minimum spacing of RTT samples per flow written to the `rtt` table. Every RTT update
    /// still feeds the per-flow aggregates in `flows`.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub rtt_sample_interval: Duration,

    /// Length of the windows of the `flow_windows` table: per flow and window, the kernel
    /// counts every RTT update (each ACK that measured one) into a histogram, which gives exact
    /// counts, minimum and maximum, and percentiles within 12.5 % (below 3.67 s) whatever the
    /// --rtt-sample-interval, with the bytes, retransmits and timeouts of the window. Windows
    /// start on whole multiples of it in UTC, so every node's line up. 0s turns them off. From
    /// 10ms to 1h.
    #[arg(long, default_value = "1s", value_parser = parse_flow_window)]
    pub flow_window: Duration,

    /// Per-CPU limit on retransmit events per second sent to userspace; beyond it they are
    /// counted (capture.retransmits_over_rate) but not recorded one by one.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_retransmit_rate: u64,

    /// Size of the kernel-to-userspace ring buffer in KiB: a power of two, at least one page.
    /// Larger absorbs longer bursts; every event lost to a full buffer is counted in `capture`.
    #[arg(long, default_value_t = 8192, value_name = "KIB", value_parser = parse_ring_kib)]
    pub ring_buffer_kib: u32,

    /// Most TCP connections tracked at once. Kernel memory: an index allocated up front, about
    /// 120 bytes each (8 MB at the default), and for each connection open, its aggregate and
    /// open window (`flow_windows`) in the socket's own storage: about 700 bytes each, 1 KiB
    /// with the kernel allocator's rounding. Beyond it new connections are not tracked; how many is counted in `capture`, the status files and
    /// the summary, with a warning the first time.
    #[arg(long, default_value_t = scaletrace_common::MAX_FLOWS, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1024..=4_194_304))]
    pub max_flows: u32,

    /// Most RDMA queue pairs whose data path (posts, bytes, completions) is aggregated in the
    /// kernel (allocated up front: about 160 bytes each). Beyond it the least recently used QP is evicted with its
    /// totals; how many is counted in `capture.qps_evicted` and said at the end.
    #[arg(long, default_value_t = scaletrace_common::MAX_QPS, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1024..=1_048_576))]
    pub max_qps: u32,

    /// GPU sampling interval (NVML), 10ms or more. GPUs are sampled when NVML finds any.
    #[arg(long, default_value = "100ms", value_parser = parse_gpu_interval)]
    pub gpu_interval: Duration,

    /// NIC counter sampling interval (sysfs class/net and class/infiniband), also the interval
    /// at which RDMA queue pairs are read over RDMA netlink (`qp_counters`); 0s disables both.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub nic_interval: Duration,

    /// Root of the sysfs tree read for NIC counters and GPU-NIC topology (for containers
    /// that mount the host's /sys elsewhere, and for tests).
    #[arg(long, default_value = "/sys", value_name = "DIR")]
    pub sysfs_root: PathBuf,

    /// Do not sample GPUs.
    #[arg(long)]
    pub no_gpu: bool,

    /// Benchmarks only: turn every getppid() of this process into an RTT sample (a synthetic
    /// source fast enough to load the ring buffer and the loader; bench/bench.py uses it).
    #[arg(long, hide = true, value_name = "PID")]
    pub bench_source_pid: Option<u32>,

    /// No live status line (warnings and the final summary of what was kept and lost are
    /// still printed).
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let port = |p: &str| p.trim().parse::<u16>().ok();
    // clap's line names the whole value: a part is named only where there are two
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => {
            let part = |p: &str| port(p).ok_or(format!("`{p}` is not a port number (0-65535)"));
            (part(lo)?, part(hi)?)
        }
        None => {
            let p = port(s).ok_or("not a port number (0-65535)")?;
            (p, p)
        }
    };
    if lo > hi {
        return Err("the range is empty (its low end is above its high end)".into());
    }
    Ok((lo, hi))
}

/// `--duration`: more than nothing (0s attached everything, wrote 17 empty tables and said
/// it had succeeded).
fn parse_record_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(
            "a recording of no time records nothing (leave --duration out to record until stopped)"
                .into(),
        );
    }
    Ok(d)
}

/// `--cidr`: an address and a prefix length; a prefix too long for its address family says
/// so (the parser's own error called 10.0.0.0/33 "invalid IP address syntax").
fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>().map_err(|_| match s.split_once('/') {
        Some((addr, len)) if addr.parse::<std::net::IpAddr>().is_ok() => {
            let most = if addr.contains(':') { 128 } else { 32 };
            format!("the prefix length {len} is not a number from 0 to {most}")
        }
        Some((addr, _)) => format!("{addr} is not an IPv4 or IPv6 address"),
        None => "expected ADDRESS/PREFIX_LENGTH, e.g. 10.0.0.0/8".into(),
    })
}

pub fn parse_gpu_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) {
        return Err("NVML samples no faster than every 10ms".into());
    }
    Ok(d)
}

pub fn parse_flow_window(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if !d.is_zero() && (d < Duration::from_millis(10) || d > Duration::from_secs(3600)) {
        return Err("a flow window is from 10ms to 1h (0s turns them off)".into());
    }
    Ok(d)
}

pub fn parse_ring_kib(s: &str) -> Result<u32, String> {
    let kib: u64 = s
        .parse()
        .map_err(|_| "not a whole number of KiB".to_string())?;
    if kib < 4 || !kib.is_power_of_two() || kib > 1 << 20 {
        return Err("the ring buffer must be a power of two between 4 KiB and 1 GiB".into());
    }
    Ok(kib as u32)
}

/// How often the loader drains the ring buffer without being woken: the longest an event
/// waits in the kernel when few arrive.
pub const RING_DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The eBPF programs wake the loader only once a quarter of the ring buffer is in use (below
/// that, the drain timer collects the events): a wakeup per event cost more than the per-ACK
/// work itself. Three quarters stay free for the events that arrive while the loader wakes up;
/// at the default 8 MiB that is ~60 k RTT samples.
fn ring_wakeup_bytes(ring_buffer_kib: u32) -> u64 {
    u64::from(ring_buffer_kib) * 1024 / 4
}

impl RecordArgs {
    /// The libraries given with a probe family's flag (`AttachTarget::explicit_libraries`).
    pub fn explicit_libraries(&self, flag: &str) -> Vec<PathBuf> {
        match flag {
            "nccl-lib" => self.nccl_libs.clone(),
            "verbs-lib" => self.verbs_libs.clone(),
            "verbs-provider-lib" => self.verbs_provider_libs.clone(),
            other => {
                // a family naming a flag this list lacks is a bug of the build, not of the input
                log::error!("no command-line flag --{other}: its libraries are found without it");
                Vec::new()
            }
        }
    }

    /// The eBPF configuration for these flags; `netns_cookie` is resolved by the caller.
    pub fn config(&self, netns_cookie: u64) -> Result<Config> {
        let mut cfg = Config::DEFAULT;
        if let Some((lo, hi)) = self.port {
            cfg.port_min = lo;
            cfg.port_max = hi;
        }
        if let Some(net) = self.cidr {
            let net = net.trunc();
            match net {
                IpNet::V4(v4) => {
                    cfg.cidr_family = AF_INET;
                    cfg.cidr_addr[..4].copy_from_slice(&v4.addr().octets());
                }
                IpNet::V6(v6) => {
                    cfg.cidr_family = AF_INET6;
                    cfg.cidr_addr = v6.addr().octets();
                }
            }
            cfg.cidr_prefix_len = net.prefix_len() as u16;
        }
        cfg.netns_cookie = netns_cookie;
        let interval = self.rtt_sample_interval.as_nanos();
        if interval > u64::MAX as u128 {
            bail!("--rtt-sample-interval is too large");
        }
        cfg.rtt_sample_interval_ns = interval as u64;
        cfg.flow_window_ns = self.flow_window.as_nanos() as u64;
        cfg.flow_window_offset_ns = (crate::clock::now_ns(libc::CLOCK_REALTIME)
            - crate::clock::now_ns(libc::CLOCK_MONOTONIC))
            as u64;
        cfg.verbs_sample_every = self.verbs_sample_every;
        cfg.retransmit_events_per_sec = self.max_retransmit_rate;
        cfg.retransmit_burst = self.max_retransmit_rate.clamp(1, 10_000);
        cfg.ring_wakeup_bytes = ring_wakeup_bytes(self.ring_buffer_kib);
        cfg.bench_source_tgid = self.bench_source_pid.unwrap_or(0);
        Ok(cfg)
    }

    /// The cgroup to attach sock_ops to, from `--cgroup` or `--pid`.
    pub fn cgroup_dir(&self, cgroup2_mount: &std::path::Path) -> Result<Option<PathBuf>> {
        if let Some(dir) = &self.cgroup {
            return Ok(Some(dir.clone()));
        }
        let Some(pid) = self.pid else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .with_context(|| format!("--pid {pid}: no such process"))?;
        let rel = crate::job_labels::cgroup_v2_path(&text)
            .with_context(|| format!("--pid {pid}: the process is not in a cgroup v2 hierarchy"))?;
        Ok(Some(cgroup2_mount.join(rel.trim_start_matches('/'))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RecordArgs,
    }

    /// Every flag a probe family asks for by name is this command line's, and its values reach
    /// the family.
    #[test]
    fn each_probe_familys_library_flag_reaches_it() {
        use clap::CommandFactory;
        let flags: Vec<&str> = crate::sources::probe_families()
            .iter()
            .flat_map(|f| f.library_flags().iter().copied())
            .collect();
        assert!(flags.len() >= 3, "{flags:?}");
        let command = Cli::command();
        for flag in &flags {
            assert!(
                command.get_arguments().any(|a| a.get_long() == Some(flag)),
                "--{flag} is not a flag of record"
            );
        }
        let mut argv = vec!["record".to_string()];
        for flag in &flags {
            argv.extend([format!("--{flag}"), format!("/libs/{flag}.so")]);
        }
        let cli = Cli::try_parse_from(argv).unwrap();
        for flag in &flags {
            assert_eq!(
                cli.args.explicit_libraries(flag),
                [PathBuf::from(format!("/libs/{flag}.so"))]
            );
        }
    }

    /// The kernel memory `--help` states per flow and per QP is what their map entries take, to
    /// the nearest 10 bytes: key, value, and the 64 bytes of the kernel's element header and
    /// bucket (bpftool's memlock of a cookie-keyed flow hash on 6.18: 18,351,520 B for 65,536
    /// entries of 8 + 208 B, 280 B each). It said 192 for a flow, which has an entry in TRACKED
    /// and its aggregate. The aggregate is in socket storage now: its element is 64 bytes of
    /// header (the data is cache-line aligned), 8 of map pointer and the value, the same 704.
    #[test]
    fn help_states_the_kernel_tables_entry_sizes() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let help = |id: &str| {
            cli.get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap()
        };
        let about = |n: usize| format!("about {} bytes each", (n + 5) / 10 * 10);
        let entry = |key: usize, value: usize| key + value + 64;
        let index = entry(size_of::<scaletrace_common::TrackedKey>(), size_of::<u64>());
        let open = entry(size_of::<u64>(), size_of::<scaletrace_common::FlowStats>());
        let qp = entry(
            size_of::<scaletrace_common::QpKey>(),
            size_of::<scaletrace_common::QpTraffic>(),
        );
        let max_flows = help("max_flows").replace('\n', " ");
        assert!(max_flows.contains(&about(index)), "{max_flows}");
        assert!(
            max_flows.contains(&format!("about {} bytes each", (open + 5) / 10 * 10)),
            "{max_flows}"
        );
        assert!(help("max_qps").contains(&about(qp)), "{}", help("max_qps"));
    }

    fn parse(argv: &[&str]) -> Result<RecordArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("record").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("5201"), Ok((5201, 5201)));
        assert_eq!(parse_port_range("29500-29600"), Ok((29500, 29600)));
        assert!(parse_port_range("70000")
            .unwrap_err()
            .contains("not a port"));
        assert!(parse_port_range("10-5").unwrap_err().contains("empty"));
        assert!(parse_port_range("x-5").is_err());
    }

    #[test]
    fn filters_become_config() {
        let a = parse(&[
            "--port",
            "5000-6000",
            "--cidr",
            "10.1.2.3/16",
            "--rtt-sample-interval",
            "1ms",
        ])
        .unwrap();
        let c = a.config(77).unwrap();
        assert_eq!((c.port_min, c.port_max), (5000, 6000));
        assert_eq!(c.cidr_family, AF_INET);
        assert_eq!(c.cidr_prefix_len, 16);
        assert_eq!(&c.cidr_addr[..4], &[10, 1, 0, 0]); // host bits cleared
        assert_eq!(c.netns_cookie, 77);
        assert_eq!(c.rtt_sample_interval_ns, 1_000_000);
        let v6 = parse(&["--cidr", "fd00::1/64"]).unwrap().config(0).unwrap();
        assert_eq!(v6.cidr_family, AF_INET6);
        assert_eq!(v6.cidr_addr[0], 0xfd);
        assert_eq!(v6.cidr_addr[15], 0);
    }

    #[test]
    fn defaults_select_everything() {
        let c = parse(&[]).unwrap().config(0).unwrap();
        assert_eq!(c.ring_wakeup_bytes, 2 * 1024 * 1024);
        assert_eq!(
            (c.port_min, c.port_max, c.cidr_family, c.netns_cookie),
            (0, 65535, 0, 0)
        );
        assert_eq!(c.rtt_sample_interval_ns, 10_000_000);
        assert_eq!(c.flow_window_ns, 1_000_000_000);
        // the wall clock less the monotonic one: the windows' UTC alignment
        let offset = crate::clock::now_ns(libc::CLOCK_REALTIME)
            - crate::clock::now_ns(libc::CLOCK_MONOTONIC);
        assert!((c.flow_window_offset_ns as i64 - offset).abs() < 1_000_000_000);
    }

    #[test]
    fn flow_windows_are_from_10ms_to_an_hour_or_off() {
        let window =
            |s: &str| parse(&["--flow-window", s]).map(|a| a.config(0).unwrap().flow_window_ns);
        assert_eq!(window("0s").unwrap(), 0);
        assert_eq!(window("250ms").unwrap(), 250_000_000);
        assert!(window("1ms").is_err());
        assert!(window("2h").is_err());
    }

    #[test]
    fn bad_flags_are_rejected() {
        assert!(parse(&["--duration", "ten"]).is_err());
        assert!(parse(&["--cidr", "10.0.0.0/33"]).is_err());
        assert!(parse(&["--max-retransmit-rate", "0"]).is_err());
        assert!(parse(&["--cgroup", "/x", "--pid", "1"]).is_err());
        assert!(parse(&["--ring-buffer-kib", "3000"]).is_err());
        assert!(parse(&["--ring-buffer-kib", "2"]).is_err());
        assert!(parse(&["--gpu-interval", "5ms"]).is_err());
        assert_eq!(
            parse(&["--gpu-interval", "10ms"]).unwrap().gpu_interval,
            Duration::from_millis(10)
        );
        assert_eq!(
            parse(&["--ring-buffer-kib", "64"]).unwrap().ring_buffer_kib,
            64
        );
    }
}
