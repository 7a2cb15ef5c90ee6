//! Streaming reader for the Chrome trace JSON written by the PyTorch profiler (Kineto).
//!
//! A trace can be several GB, so the `traceEvents` array is never held in memory: a serde
//! visitor hands each event to a callback as it is parsed. Top-level keys such as
//! `baseTimeNanoseconds` may come after the events, so `scan_header` makes a first pass that
//! skips the events, and `for_each_event` a second one that delivers them.
use std::{
    fmt,
    fs::File,
    io::{BufReader, Read},
    path::Path,
};

use anyhow::{anyhow, Context as _, Result};
use serde::{
    de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer,
};
use serde_json::Value;

/// What a trace says about itself outside `traceEvents`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TraceHeader {
    pub rank: Option<i64>,
    pub world_size: Option<i64>,
    pub base_time_ns: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
struct DistributedInfo {
    rank: Option<i64>,
    world_size: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct EventArgs {
    pub device: Option<Value>,
    pub stream: Option<Value>,
    pub correlation: Option<Value>,
}

/// One trace event, with only the fields scaletrace uses.
#[derive(Debug, Default, Deserialize)]
pub struct TraceEvent {
    #[serde(default)]
    pub ph: String,
    #[serde(default)]
    pub cat: String,
    #[serde(default)]
    pub name: String,
    pub pid: Option<Value>,
    pub tid: Option<Value>,
    /// Microseconds, relative to `baseTimeNanoseconds` when the trace has it.
    pub ts: Option<f64>,
    /// Microseconds.
    pub dur: Option<f64>,
    #[serde(default)]
    pub args: Option<EventArgs>,
}

/// An integer from a JSON number or from the first digits in a string ("stream 7",
/// "thread 5 (python)").
pub fn loose_int(v: &Option<Value>) -> Option<i64> {
    match v.as_ref()? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => {
            let start = s.find(|c: char| c.is_ascii_digit())?;
            let digits: String = s[start..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        }
        _ => None,
    }
}

/// Opens a trace, decompressing `.gz` files.
fn open(path: &Path) -> Result<Box<dyn Read>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(BufReader::new(flate2::read::GzDecoder::new(
            reader,
        ))))
    } else {
        Ok(Box::new(reader))
    }
}

/// Visits the top-level object: header keys are collected, `traceEvents` is handed to `events`.
struct TopLevel<'a, F> {
    header: &'a mut TraceHeader,
    events: Option<F>,
}

impl<'de, F: FnMut(TraceEvent) -> Result<()>> Visitor<'de> for TopLevel<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace JSON object with a traceEvents array")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut saw_events = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => {
                    saw_events = true;
                    match self.events.as_mut() {
                        Some(callback) => map.next_value_seed(EventsSeed(callback))?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                "distributedInfo" => {
                    let info: Option<DistributedInfo> = map.next_value()?;
                    if let Some(info) = info {
                        self.header.rank = info.rank;
                        self.header.world_size = info.world_size;
                    }
                }
                "baseTimeNanoseconds" => {
                    self.header.base_time_ns = map
                        .next_value::<Option<Value>>()?
                        .and_then(|v| loose_int(&Some(v)));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_events {
            return Err(serde::de::Error::custom("no traceEvents array"));
        }
        Ok(())
    }
}

struct EventsSeed<'a, F>(&'a mut F);

impl<'de, F: FnMut(TraceEvent) -> Result<()>> DeserializeSeed<'de> for EventsSeed<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(TraceEvent) -> Result<()>> Visitor<'de> for EventsSeed<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element::<TraceEvent>()? {
            (self.0)(event).map_err(|e| serde::de::Error::custom(format!("{e:#}")))?;
        }
        Ok(())
    }
}

fn parse<F: FnMut(TraceEvent) -> Result<()>>(
    reader: Box<dyn Read>,
    events: Option<F>,
) -> Result<TraceHeader> {
    let mut header = TraceHeader::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    let visitor = TopLevel {
        header: &mut header,
        events,
    };
    de.deserialize_map(visitor).map_err(|e| located(&e))?;
    de.end().map_err(|e| located(&e))?;
    Ok(header)
}

/// serde_json errors carry line and column; say them the way an editor would want them.
fn located(e: &serde_json::Error) -> anyhow::Error {
    let what = match e.classify() {
        serde_json::error::Category::Eof => "truncated trace",
        serde_json::error::Category::Syntax => "malformed JSON",
        serde_json::error::Category::Data => "unexpected trace content",
        serde_json::error::Category::Io => "read error",
    };
    anyhow!("{what} at line {}, column {}: {e}", e.line(), e.column())
}

/// First pass: the header, skipping the events.
pub fn scan_header(path: &Path) -> Result<TraceHeader> {
    parse::<fn(TraceEvent) -> Result<()>>(open(path)?, None)
        .with_context(|| path.display().to_string())
}

/// Second pass: every event in file order.
pub fn for_each_event(path: &Path, callback: impl FnMut(TraceEvent) -> Result<()>) -> Result<()> {
    parse(open(path)?, Some(callback))
        .map(|_| ())
        .with_context(|| path.display().to_string())
}

/// The `ts` of the first event that has one, reading no further than that event.
pub fn first_event_ts(path: &Path) -> Result<Option<f64>> {
    let mut first = None;
    let result = for_each_event(path, |e| match e.ts {
        // Stops the pass: there is no need to read a multi-GB file for one number.
        Some(ts) => {
            first = Some(ts);
            Err(anyhow!("first timestamp found"))
        }
        None => Ok(()),
    });
    match (result, first) {
        (_, Some(ts)) => Ok(Some(ts)),
        (Ok(()), None) => Ok(None),
        (Err(e), None) => Err(e),
    }
}

/// The collective of an NCCL kernel name: `ncclDevKernel_AllReduce_Sum_f32_RING_LL` and
/// `ncclKernel_AllGather_RING_LL_Sum_int8_t` give `AllReduce` and `AllGather`.
pub fn nccl_collective(kernel_name: &str) -> Option<&str> {
    let rest = kernel_name
        .strip_prefix("ncclDevKernel_")
        .or_else(|| kernel_name.strip_prefix("ncclKernel_"))?;
    let op = rest.split(['_', '(']).next().filter(|s| !s.is_empty())?;
    Some(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.path().join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        p
    }

    const TRACE: &str = r#"{
      "schemaVersion": 1,
      "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
      "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25, "args": {"device": 0, "stream": 7, "correlation": 99, "grid": [1,1,1]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1234, "tid": "thread 5 (python)", "ts": 1.0, "dur": 3.0},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}
      ],
      "traceName": "x",
      "baseTimeNanoseconds": 1700000000000000000
    }"#;

    #[test]
    fn header_after_events_is_found_and_events_stream() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "t.json", TRACE);
        let h = scan_header(&p).unwrap();
        assert_eq!(
            h,
            TraceHeader {
                rank: Some(3),
                world_size: Some(8),
                base_time_ns: Some(1_700_000_000_000_000_000)
            }
        );
        let mut seen = Vec::new();
        for_each_event(&p, |e| {
            seen.push(e);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 3);
        let k = &seen[0];
        assert_eq!(
            (k.cat.as_str(), k.ts, k.dur),
            ("kernel", Some(10.5), Some(2.25))
        );
        let args = k.args.as_ref().unwrap();
        assert_eq!(
            (loose_int(&args.stream), loose_int(&args.correlation)),
            (Some(7), Some(99))
        );
        assert_eq!(loose_int(&seen[1].tid), Some(5));
    }

    #[test]
    fn gzip_traces_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json.gz");
        let mut gz =
            flate2::write::GzEncoder::new(File::create(&p).unwrap(), flate2::Compression::fast());
        gz.write_all(TRACE.as_bytes()).unwrap();
        gz.finish().unwrap();
        assert_eq!(scan_header(&p).unwrap().rank, Some(3));
    }

    #[test]
    fn truncated_trace_reports_line_and_column_after_delivering_what_it_could() {
        let dir = tempfile::tempdir().unwrap();
        let cut = &TRACE[..TRACE.find("\"ph\": \"M\"").unwrap()];
        let p = write(&dir, "cut.json", cut);
        let mut n = 0;
        let err = for_each_event(&p, |_| {
            n += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(n, 2, "events before the cut are delivered");
        let msg = format!("{err:#}");
        assert!(msg.contains("truncated trace at line 8"), "{msg}");
    }

    #[test]
    fn malformed_json_is_located() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "bad.json",
            "{\"traceEvents\": [\n {\"ph\": \"X\",, }]}",
        );
        let msg = format!("{:#}", for_each_event(&p, |_| Ok(())).unwrap_err());
        assert!(msg.contains("malformed JSON at line 2"), "{msg}");
        let p = write(&dir, "noevents.json", "{\"a\": 1}");
        assert!(format!("{:#}", scan_header(&p).unwrap_err()).contains("no traceEvents"));
        let p = write(
            &dir,
            "wrongtype.json",
            "{\"traceEvents\": [{\"ts\": \"soon\"}]}",
        );
        let msg = format!("{:#}", for_each_event(&p, |_| Ok(())).unwrap_err());
        assert!(msg.contains("unexpected trace content at line 1"), "{msg}");
    }

    #[test]
    fn loose_ints() {
        assert_eq!(loose_int(&Some(Value::from(7))), Some(7));
        assert_eq!(loose_int(&Some(Value::from("stream 12"))), Some(12));
        assert_eq!(loose_int(&Some(Value::from("Spans"))), None);
        assert_eq!(loose_int(&None), None);
    }

    #[test]
    fn collective_names() {
        assert_eq!(
            nccl_collective("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"),
            Some("AllReduce")
        );
        assert_eq!(
            nccl_collective("ncclKernel_AllGather_RING_LL_Sum_int8_t"),
            Some("AllGather")
        );
        assert_eq!(
            nccl_collective("ncclDevKernel_SendRecv(x)"),
            Some("SendRecv")
        );
        assert_eq!(nccl_collective("volta_sgemm_128x64_nn"), None);
    }
}
