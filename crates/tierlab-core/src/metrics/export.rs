//! Writers: summary JSON, series CSV, latency CDF CSV, state-timeline VCD.
//! Numbers are written from integers with a fixed number of decimals, so
//! the same results give the same bytes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::summary::{SimMetrics, scaled};
use crate::NS_PER_S;
use crate::device::DeviceState;

/// Writes `k / 10^decimals` with exactly `decimals` decimals.
fn write_fixed(w: &mut impl Write, k: u128, decimals: u32) -> io::Result<()> {
    let scale = 10u128.pow(decimals);
    write!(
        w,
        "{}.{:0width$}",
        k / scale,
        k % scale,
        width = decimals as usize
    )
}

/// `num / den` to 3 decimals, or nothing (an empty CSV field) if den = 0.
fn write_ratio3(w: &mut impl Write, num: u128, den: u128) -> io::Result<()> {
    match scaled(num, den, 3) {
        Some(k) => write_fixed(w, k, 3),
        None => Ok(()),
    }
}

/// A latency in ns as µs with 3 decimals (exact).
fn write_us(w: &mut impl Write, ns: Option<u64>) -> io::Result<()> {
    match ns {
        Some(ns) => write_fixed(w, ns as u128, 3),
        None => Ok(()),
    }
}

/// File names `write_files` uses.
pub const SUMMARY_FILE: &str = "summary.json";
pub const SERIES_FILE: &str = "series.csv";
pub const CDF_FILE: &str = "latency_cdf.csv";
pub const VCD_FILE: &str = "timeline.vcd";

/// Width of a VCD state signal: enough bits for every `DeviceState` code.
const VCD_STATE_BITS: usize = 3;
const _: () = assert!(DeviceState::ALL.len() <= 1 << VCD_STATE_BITS);

impl SimMetrics {
    /// Writes summary.json, series.csv, latency_cdf.csv and (when the
    /// timeline was kept) timeline.vcd into `dir`, which must exist.
    pub fn write_files(&self, dir: &Path) -> io::Result<()> {
        let create = |name: &str| {
            let path = dir.join(name);
            File::create(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        self.write_summary_json(create(SUMMARY_FILE)?)?;
        self.write_series_csv(create(SERIES_FILE)?)?;
        self.write_cdf_csv(create(CDF_FILE)?)?;
        if self.timeline.is_some() {
            self.write_vcd(create(VCD_FILE)?)?;
        }
        Ok(())
    }

    /// The summary as pretty JSON (fields in declaration order).
    pub fn write_summary_json(&self, w: impl Write) -> io::Result<()> {
        let mut w = BufWriter::new(w);
        serde_json::to_writer_pretty(&mut w, self)?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// The per-interval series in long form: per interval one `all` row
    /// (host IOs) then one `device:NAME` row per device. Columns that do
    /// not apply to a row, or are undefined (no IOs, zero length), are
    /// empty. See docs/metrics.md for each column.
    pub fn write_series_csv(&self, w: impl Write) -> io::Result<()> {
        let mut w = BufWriter::new(w);
        writeln!(
            w,
            "start_ns,end_ns,scope,ios,iops,bytes,mb_per_s,mean_latency_us,p99_latency_us,\
             max_latency_us,util_percent,avg_queue_size,io_ticks_ns,time_in_queue_ns"
        )?;
        let devices = self.devices.len();
        for (k, host) in self.host_series.iter().enumerate() {
            let length = (host.end_ns - host.start_ns) as u128;
            let rates = |w: &mut BufWriter<_>, ios: u64, bytes: u64| -> io::Result<()> {
                write!(w, "{ios},")?;
                write_ratio3(w, ios as u128 * NS_PER_S as u128, length)?;
                write!(w, ",{bytes},")?;
                write_ratio3(w, bytes as u128 * 1_000, length)?;
                w.write_all(b",")
            };
            write!(w, "{},{},all,", host.start_ns, host.end_ns)?;
            rates(&mut w, host.ios, host.data_bytes)?;
            write_ratio3(&mut w, host.latency_sum_ns as u128, host.ios as u128 * 1000)?;
            w.write_all(b",")?;
            write_us(&mut w, host.p99_latency_ns)?;
            w.write_all(b",")?;
            write_us(&mut w, host.max_latency_ns)?;
            w.write_all(b",,,,\n")?;
            for (dev, summary) in self.devices.iter().enumerate() {
                let d = &self.device_series[k * devices + dev];
                write!(
                    w,
                    "{},{},device:{},",
                    host.start_ns, host.end_ns, summary.name
                )?;
                rates(&mut w, d.ios, d.data_bytes)?;
                write_ratio3(&mut w, d.latency_sum_ns as u128, d.ios as u128 * 1000)?;
                w.write_all(b",,,")?;
                write_ratio3(&mut w, d.io_ticks_ns as u128 * 100, length)?;
                w.write_all(b",")?;
                write_ratio3(&mut w, d.time_in_queue_ns as u128, length)?;
                writeln!(w, ",{},{}", d.io_ticks_ns, d.time_in_queue_ns)?;
            }
        }
        w.flush()
    }

    /// The latency CDF of every non-empty histogram:
    /// `scope,latency_us,cumulative_fraction`, one row per non-empty HDR
    /// bucket, ascending; the fraction of the scope's IOs whose latency is
    /// ≤ latency_us (9 decimals; the last row of a scope is 1.000000000).
    pub fn write_cdf_csv(&self, w: impl Write) -> io::Result<()> {
        let mut w = BufWriter::new(w);
        writeln!(w, "scope,latency_us,cumulative_fraction")?;
        for (scope, h) in &self.histograms {
            let total = h.count() as u128;
            for (latency_ns, cumulative) in h.cdf() {
                write!(w, "{scope},")?;
                write_fixed(&mut w, latency_ns as u128, 3)?;
                w.write_all(b",")?;
                let fraction = scaled(cumulative as u128, total, 9).expect("non-empty histogram");
                write_fixed(&mut w, fraction, 9)?;
                w.write_all(b"\n")?;
            }
        }
        w.flush()
    }

    /// The device state timelines as a VCD file: `$timescale 1 ns`, one
    /// 3-bit `wire` per device holding its `DeviceState` code (the codes
    /// are listed in a `$comment`), initial values at `start_ns`, changes
    /// in time order, a final timestamp at `end_ns`. If the timeline was
    /// truncated every signal becomes `x` (unknown) from that time on.
    /// Fails when the recorder kept no timeline.
    pub fn write_vcd(&self, w: impl Write) -> io::Result<()> {
        let Some(changes) = &self.timeline else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no device state timeline was recorded: set MetricsConfig::timeline",
            ));
        };
        let mut w = BufWriter::new(w);
        let all_names: Vec<&str> = self
            .devices
            .iter()
            .map(|d| d.name.as_str())
            .chain(self.timeline_signals.iter().map(String::as_str))
            .collect();
        let names = vcd_references(all_names.iter().copied());
        let ids: Vec<String> = (0..names.len()).map(vcd_identifier).collect();

        writeln!(w, "$version tierlab {} $end", env!("CARGO_PKG_VERSION"))?;
        // No $date: the same run must give the same bytes.
        writeln!(w, "$comment")?;
        write!(w, "  Device state codes:")?;
        for state in DeviceState::ALL {
            write!(w, " {}={}", state as u8, state.as_str())?;
        }
        writeln!(w)?;
        for (name, reference) in all_names.iter().zip(&names) {
            writeln!(w, "  signal {reference} is device {name}")?;
        }
        writeln!(w, "$end")?;
        writeln!(w, "$timescale 1 ns $end")?;
        writeln!(w, "$scope module tierlab $end")?;
        for (reference, id) in names.iter().zip(&ids) {
            writeln!(w, "$var wire {VCD_STATE_BITS} {id} {reference} $end")?;
        }
        writeln!(w, "$upscope $end")?;
        writeln!(w, "$enddefinitions $end")?;

        // Events as (time, device, value): `None` is unknown (x), used
        // from the truncation time on.
        let devices = names.len();
        let truncation = self
            .timeline_truncated_at_ns
            .into_iter()
            .flat_map(|t| (0..devices).map(move |dev| (t, dev, None)));
        let mut events = changes
            .iter()
            .map(|c| (c.time_ns, c.device as usize, Some(c.state)))
            .chain(truncation)
            .peekable();

        // Changes at start_ns are the initial values.
        let mut shown: Vec<Option<DeviceState>> = vec![Some(DeviceState::Idle); devices];
        while let Some(&(t, dev, value)) = events.peek() {
            if t > self.start_ns {
                break;
            }
            shown[dev] = value;
            events.next();
        }
        writeln!(w, "#{}", self.start_ns)?;
        writeln!(w, "$dumpvars")?;
        for (value, id) in shown.iter().zip(&ids) {
            write_vcd_value(&mut w, *value, id)?;
        }
        writeln!(w, "$end")?;

        let mut last_time_ns = self.start_ns;
        let mut group: Vec<Option<Option<DeviceState>>> = vec![None; devices];
        while let Some(&(t, _, _)) = events.peek() {
            // Collapse every event at time t into its final value.
            while let Some(&(te, dev, value)) = events.peek() {
                if te != t {
                    break;
                }
                group[dev] = Some(value);
                events.next();
            }
            let mut stamped = false;
            for dev in 0..devices {
                let Some(value) = group[dev].take() else {
                    continue;
                };
                if value == shown[dev] {
                    continue;
                }
                if !stamped {
                    writeln!(w, "#{t}")?;
                    stamped = true;
                    last_time_ns = t;
                }
                shown[dev] = value;
                write_vcd_value(&mut w, value, &ids[dev])?;
            }
        }
        if self.end_ns > last_time_ns {
            // Marks the end, so viewers show the last states' duration.
            writeln!(w, "#{}", self.end_ns)?;
        }
        w.flush()
    }
}

fn write_vcd_value(w: &mut impl Write, value: Option<DeviceState>, id: &str) -> io::Result<()> {
    match value {
        Some(state) => writeln!(w, "b{:0width$b} {id}", state as u8, width = VCD_STATE_BITS),
        None => writeln!(w, "b{} {id}", "x".repeat(VCD_STATE_BITS)),
    }
}

/// VCD identifier codes: printable ASCII `!`..`~` (94 symbols), in base 94
/// for the 95th device on.
pub(super) fn vcd_identifier(mut index: usize) -> String {
    let mut id = String::new();
    loop {
        id.push((b'!' + (index % 94) as u8) as char);
        index /= 94;
        if index == 0 {
            return id;
        }
        index -= 1;
    }
}

/// Signal names: the device name with every character other than ASCII
/// letters, digits and `_` replaced by `_` (viewers treat `.` and `/` as
/// hierarchy), made unique with a `_N` suffix (N = device index).
fn vcd_references<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, name) in names.enumerate() {
        let mut reference: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if reference.starts_with(|c: char| c.is_ascii_digit()) {
            // Verilog identifiers cannot start with a digit.
            reference.insert(0, '_');
        }
        while out.contains(&reference) {
            reference = format!("{reference}_{i}");
        }
        out.push(reference);
    }
    out
}
