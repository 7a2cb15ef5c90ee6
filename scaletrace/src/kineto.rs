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
use serde_json::{value::RawValue, Value};

use crate::trace_time::{check_utc, micros_text_to_ns};

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

/// The arguments scaletrace keeps. Values are taken loosely (`Value`): their JSON types differ
/// between PyTorch versions, and an unexpected type must not fail an import.
#[derive(Debug, Default, Deserialize)]
pub struct EventArgs {
    pub device: Option<Value>,
    pub stream: Option<Value>,
    pub correlation: Option<Value>,
    /// `record_param_comms` and NCCL kernels (PyTorch ≥ 2.1): `allreduce`, `broadcast`, ...
    #[serde(rename = "Collective name")]
    pub collective_name: Option<Value>,
    #[serde(rename = "Process Group Name")]
    pub process_group: Option<Value>,
    #[serde(rename = "Process Group Description")]
    pub process_group_desc: Option<Value>,
    #[serde(rename = "Group size")]
    pub group_size: Option<Value>,
    /// The process group's sequence number of the collective (newer PyTorch).
    #[serde(rename = "Seq")]
    pub seq: Option<Value>,
    #[serde(rename = "In msg nelems")]
    pub in_msg_nelems: Option<Value>,
    #[serde(rename = "Out msg nelems")]
    pub out_msg_nelems: Option<Value>,
    pub dtype: Option<Value>,
}

/// A string argument, or a number argument as text (`"Process Group Name": "0"` or `0`).
pub fn text_arg(v: &Option<Value>) -> Option<String> {
    match v.as_ref()? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An integer argument given as a JSON integer (not the loose digit scan of ids).
pub fn int_arg(v: &Option<Value>) -> Option<i64> {
    match v.as_ref()? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
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
    /// Microseconds, relative to `baseTimeNanoseconds` when the trace has it; kept as the
    /// number's text so that nanosecond fractions survive (see `trace_time`).
    pub ts: Option<Box<RawValue>>,
    /// Microseconds, as text.
    pub dur: Option<Box<RawValue>>,
    #[serde(default)]
    pub args: Option<EventArgs>,
}

impl TraceEvent {
    /// `ts` in nanoseconds on the trace's own axis.
    pub fn ts_ns(&self) -> Result<Option<i64>> {
        self.ts
            .as_ref()
            .map(|t| micros_text_to_ns(t.get()).context("ts"))
            .transpose()
    }

    /// `dur` in nanoseconds.
    pub fn dur_ns(&self) -> Result<Option<i64>> {
        self.dur
            .as_ref()
            .map(|t| micros_text_to_ns(t.get()).context("dur"))
            .transpose()
    }
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
    shape: &'a mut Shape,
}

/// What the top level of the file turned out to be, to tell a JSON file that is no trace at
/// all from a trace that is damaged.
#[derive(Default)]
struct Shape {
    /// The top level is an object.
    object: bool,
    /// The object ended without a `traceEvents` key.
    no_events: bool,
    /// It had one of the keys a Kineto trace writes beside its events: such a file is a trace
    /// that lost its events (or a broken one), not some other JSON.
    trace_keys: bool,
}

/// Keys a PyTorch profiler (Kineto) trace writes at its top level beside `traceEvents`.
const TRACE_HEADER_KEYS: [&str; 6] = [
    "distributedInfo",
    "baseTimeNanoseconds",
    "schemaVersion",
    "deviceProperties",
    "displayTimeUnit",
    "traceName",
];

/// A JSON file that is no profiler trace (its top level is not an object with a `traceEvents`
/// array), as opposed to a trace that is damaged. A directory given to `import` can hold such
/// files beside its traces (`analyze --json` findings, a run's settings): they are skipped
/// there, where a damaged trace is still an error.
#[derive(Debug)]
pub struct NotATrace;

impl fmt::Display for NotATrace {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "not a profiler trace (PyTorch's profiler writes a JSON object with a traceEvents array)",
        )
    }
}

impl std::error::Error for NotATrace {}

impl<'de, F: FnMut(TraceEvent) -> Result<()>> Visitor<'de> for TopLevel<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace JSON object with a traceEvents array")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.shape.object = true;
        let mut saw_events = false;
        while let Some(key) = map.next_key::<String>()? {
            self.shape.trace_keys |= TRACE_HEADER_KEYS.contains(&key.as_str());
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
                    let value = map.next_value::<Option<Value>>()?;
                    self.header.base_time_ns =
                        base_time(value).map_err(|e| serde::de::Error::custom(format!("{e:#}")))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_events {
            self.shape.no_events = true;
            return Err(serde::de::Error::custom("no traceEvents array"));
        }
        Ok(())
    }
}

/// `baseTimeNanoseconds`: an integer (or a string of only digits) of UTC nanoseconds in
/// 2000..2100. Anything else is refused rather than guessed from (`"build 42 at 1.7e18"`).
fn base_time(value: Option<Value>) -> Result<Option<i64>> {
    let ns = match &value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    let text = value.map(|v| v.to_string()).unwrap_or_default();
    let ns = ns.ok_or_else(|| {
        anyhow!("baseTimeNanoseconds {text} is not an integer number of nanoseconds")
    })?;
    check_utc(ns, &format!("baseTimeNanoseconds {ns}"))?;
    Ok(Some(ns))
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

/// A pass over a trace: the header keys seen, and the error that stopped it, if any.
struct Pass {
    header: TraceHeader,
    fault: Option<serde_json::Error>,
    /// The file is valid JSON of another shape (the fault is that, not damage).
    not_a_trace: bool,
}

fn parse<F: FnMut(TraceEvent) -> Result<()>>(reader: Box<dyn Read>, events: Option<F>) -> Pass {
    let mut header = TraceHeader::default();
    let mut shape = Shape::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    let visitor = TopLevel {
        header: &mut header,
        events,
        shape: &mut shape,
    };
    let fault = de.deserialize_map(visitor).and_then(|()| de.end()).err();
    // a type error before any object was entered: an array, a string, a number at the top
    let not_a_trace = fault
        .as_ref()
        .is_some_and(|e| e.classify() == serde_json::error::Category::Data)
        && (!shape.object || (shape.no_events && !shape.trace_keys));
    Pass {
        header,
        fault,
        not_a_trace,
    }
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

/// What the first pass found: the header, and whether the file is cut or damaged (`damage`).
/// A trace whose writer was killed ends early, and Kineto writes `baseTimeNanoseconds` after
/// the events, so a damaged file still yields its events, only perhaps without a time base.
#[derive(Debug)]
pub struct HeaderScan {
    pub header: TraceHeader,
    pub damage: Option<anyhow::Error>,
}

/// First pass: the header, skipping the events. Content that is wrong (a time base that is not
/// a time) is an error; a file that is cut short or broken is reported as `damage`.
pub fn scan_header(path: &Path) -> Result<HeaderScan> {
    let pass = parse::<fn(TraceEvent) -> Result<()>>(open(path)?, None);
    if pass.not_a_trace {
        return Err(anyhow::Error::new(NotATrace).context(path.display().to_string()));
    }
    let damage = match pass.fault {
        None => None,
        Some(e) if e.classify() == serde_json::error::Category::Data => {
            return Err(located(&e).context(path.display().to_string()))
        }
        Some(e) => Some(located(&e).context(path.display().to_string())),
    };
    Ok(HeaderScan {
        header: pass.header,
        damage,
    })
}

/// Second pass: every event in file order; stops at the first error, after delivering the
/// events before it.
pub fn for_each_event(path: &Path, callback: impl FnMut(TraceEvent) -> Result<()>) -> Result<()> {
    match parse(open(path)?, Some(callback)).fault {
        None => Ok(()),
        Some(e) => Err(located(&e).context(path.display().to_string())),
    }
}

/// The `ts` (ns on the trace's axis) of the first event that has one, reading no further than
/// that event.
pub fn first_event_ts(path: &Path) -> Result<Option<i64>> {
    let mut first = None;
    let result = for_each_event(path, |e| match e.ts_ns()? {
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
        let scan = scan_header(&p).unwrap();
        assert!(scan.damage.is_none());
        let h = scan.header;
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
            (k.cat.as_str(), k.ts_ns().unwrap(), k.dur_ns().unwrap()),
            ("kernel", Some(10_500), Some(2_250))
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
        assert_eq!(scan_header(&p).unwrap().header.rank, Some(3));
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
    fn a_cut_trace_is_damage_not_failure_and_keeps_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let cut = &TRACE[..TRACE.find("\"ph\": \"M\"").unwrap()];
        let p = write(&dir, "cut.json", cut);
        let scan = scan_header(&p).unwrap();
        assert_eq!(scan.header.rank, Some(3));
        assert_eq!(
            scan.header.base_time_ns, None,
            "the base comes after the cut"
        );
        let msg = format!("{:#}", scan.damage.unwrap());
        assert!(msg.contains("truncated trace at line 8"), "{msg}");
        // A cut gzip stream: the decoder's error is damage too.
        let gz_path = dir.path().join("cut.json.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(TRACE.as_bytes()).unwrap();
        let bytes = gz.finish().unwrap();
        std::fs::write(&gz_path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(scan_header(&gz_path).unwrap().damage.is_some());
    }

    #[test]
    fn time_bases_that_are_not_times_are_refused_with_their_location() {
        let dir = tempfile::tempdir().unwrap();
        for (base, expect) in [
            (
                "\"build 42 at 1.7e18\"",
                "not an integer number of nanoseconds",
            ),
            ("9223372036854775000", "outside 2000..2100"),
            ("12", "outside 2000..2100"),
            ("1.7e18", "not an integer number of nanoseconds"),
        ] {
            let text = format!("{{\"traceEvents\": [],\n \"baseTimeNanoseconds\": {base}}}");
            let p = write(&dir, "base.json", &text);
            let msg = format!("{:#}", scan_header(&p).unwrap_err());
            assert!(
                msg.contains(expect) && msg.contains("line 2"),
                "{base}: {msg}"
            );
        }
        let p = write(
            &dir,
            "ok.json",
            "{\"traceEvents\": [], \"baseTimeNanoseconds\": \"1700000000000000000\"}",
        );
        assert_eq!(
            scan_header(&p).unwrap().header.base_time_ns,
            Some(1_700_000_000_000_000_000)
        );
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
        // valid JSON of another shape is no trace, told apart from a damaged trace
        for (name, text) in [
            ("noevents.json", "{\"a\": 1}"),
            ("findings.json", "[{\"category\": \"slowdown\"}]"),
            ("text.json", "\"a string\""),
        ] {
            let p = write(&dir, name, text);
            let e = scan_header(&p).unwrap_err();
            assert!(e.downcast_ref::<NotATrace>().is_some(), "{name}: {e:#}");
            assert!(format!("{e:#}").contains(name), "{e:#}");
        }
        for (name, text) in [
            ("cut.json", "{\"traceEvents\": [{\"ph\": \"X\"}"),
            (
                "badbase.json",
                "{\"traceEvents\": [], \"baseTimeNanoseconds\": \"soon\"}",
            ),
            (
                "badinfo.json",
                "{\"distributedInfo\": 7, \"traceEvents\": []}",
            ),
            // a trace's header without its events: a rank would go missing without a word
            (
                "noevents-trace.json",
                "{\"distributedInfo\": {\"rank\": 3}, \"baseTimeNanoseconds\": 1700000000000000000}",
            ),
        ] {
            let p = write(&dir, name, text);
            let refused = scan_header(&p).err();
            assert!(
                refused.is_none_or(|e| e.downcast_ref::<NotATrace>().is_none()),
                "{name}: a damaged trace, not another kind of file"
            );
        }
        let p = write(
            &dir,
            "wrongtype.json",
            "{\"traceEvents\": [{\"ts\": \"soon\"}]}",
        );
        // The number's text is converted by the importer's callback: its error is located too.
        let msg = format!(
            "{:#}",
            for_each_event(&p, |e| e.ts_ns().map(|_| ())).unwrap_err()
        );
        assert!(msg.contains("unexpected trace content at line 1"), "{msg}");
    }

    #[test]
    fn loose_ints() {
        assert_eq!(loose_int(&Some(Value::from(7))), Some(7));
        assert_eq!(loose_int(&Some(Value::from("stream 12"))), Some(12));
        assert_eq!(loose_int(&Some(Value::from("Spans"))), None);
        assert_eq!(loose_int(&None), None);
    }
}
