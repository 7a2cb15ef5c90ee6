//! scaletrace: makes the network fabric of distributed GPU training visible.
mod agent;
mod analyze;
mod atomic_file;
mod clock;
mod columns;
mod comms;
mod decode;
mod environment;
mod hooks;
mod import;
mod interfaces;
mod job_labels;
mod kernel_btf;
mod kineto;
mod layout;
mod merge;
mod netlink;
mod node;
mod parquet_sink;
mod probe;
mod record;
mod tables;
mod trace_time;
mod tracefs;
mod wording;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "scaletrace",
    version,
    about = "Capture per-flow TCP latency, throughput and retransmits with eBPF and write them as Parquet",
    long_about = "scaletrace attaches eBPF programs to the kernel's TCP paths (sock_ops, tcp and sock \
tracepoints) and writes per-flow latency, throughput, retransmit and lifecycle data as Parquet files \
that DuckDB, pandas or Spark read directly. It is meant to run privileged on every node of a \
training cluster; the tables are documented in docs/schema.md (`scaletrace schema`).",
    after_help = "Example:\n  sudo scaletrace record --duration 30s --port 29500-29600 --out ./traces\n  \
duckdb -c \"SELECT * FROM read_parquet('traces/flows/*.parquet')\""
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Record TCP flows, RTT samples, retransmits and state changes to Parquet (needs root).
    Record(record::RecordArgs),
    /// Run as a node service: record until stopped, rotate into a Hive-partitioned spool,
    /// upload to S3-compatible storage, write health files (needs root).
    #[command(args_override_self = true)]
    Agent(agent::AgentArgs),
    /// Import PyTorch profiler (Kineto) Chrome traces into the gpu_events table.
    Import(import::ImportArgs),
    /// Join GPU and network tables into per-window rows (the windows table).
    Merge(merge::MergeArgs),
    /// Find the causes of poor scaling in recorded tables (ranked summary + HTML report).
    Analyze(analyze::AnalyzeArgs),
    /// Print the analysis as a DuckDB script (table views, thresholds, diagnosis views).
    Sql(analyze::SqlArgs),
    /// Print the documentation of every table (the text of docs/schema.md).
    Schema,
}

/// Long flag names of `agent`, the keys a config file may use.
fn agent_flags() -> Vec<String> {
    use clap::CommandFactory;
    Cli::command()
        .find_subcommand("agent")
        .map(|c| {
            c.get_arguments()
                .filter_map(|a| a.get_long().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(|buf, record| {
            use std::io::Write;
            writeln!(
                buf,
                "scaletrace: {}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            )
        })
        .init();
    // `agent --config FILE` stands for the flags in the file, placed before the others.
    let argv = match agent::config::expand(std::env::args().collect(), "agent", &agent_flags()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("scaletrace: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse_from(argv);
    let result = match cli.command {
        Command::Record(args) => record::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Import(args) => import::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Sql(args) => analyze::sql(args).and_then(|text| to_stdout(&text)),
        Command::Schema => to_stdout(&schema_doc::render()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the context chain, outermost first.
            eprintln!("scaletrace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command's output. A reader that stops early (`| head`) is not an error: `print!` would
/// panic on the broken pipe, with a backtrace.
pub fn to_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

mod schema_doc;
mod sources;
