//! Write-back that does not hurt the foreground: while host IO is active,
//! watermark write-back is paced to a rate, after bcache's writeback rate
//! controller (its `writeback_rate_p_term_inverse` is 40: the dirty bytes
//! above the target ÷ 40 per second). Here the target is the low
//! watermark and the rate has a floor; after `writeback_idle_ms` without a
//! host IO, write-back runs at full speed (`flush_iodepth` batches), as it
//! always did. FLUSH write-backs (without persistent metadata), `drain`,
//! idle flushing and evictions are never paced: something waits for them.
//!
//! A token bucket of bytes, refilled at the rate, at most one batch deep
//! (so an idle spell does not bank a burst): a batch goes when the bucket
//! is not empty and its bytes are charged (the bucket may go into debt);
//! otherwise a timer wakes the flusher when it will be.

use tierlab_core::{NS_PER_S, TimeNs};

pub(super) struct Pacer {
    /// Seconds to write back the excess at the proportional rate; 0: off.
    p_s: f64,
    min_bytes_per_s: f64,
    idle_ns: u64,
    /// Bytes that may go now (negative: debt).
    tokens_bytes: f64,
    burst_bytes: f64,
    refilled_ns: TimeNs,
    /// A pacing timer is armed for this time.
    pub(super) timer_at: Option<TimeNs>,
    /// Batches that waited for the rate.
    pub(super) waits: u64,
}

impl Pacer {
    pub(super) fn new(p_s: f64, min_bytes_per_s: f64, idle_ns: u64, burst_bytes: f64) -> Pacer {
        assert!(p_s >= 0.0 && min_bytes_per_s > 0.0 && burst_bytes > 0.0);
        Pacer {
            p_s,
            min_bytes_per_s,
            idle_ns,
            tokens_bytes: burst_bytes,
            burst_bytes,
            refilled_ns: 0,
            timer_at: None,
            waits: 0,
        }
    }

    /// Whether write-back is paced now: pacing is on and a host IO came
    /// within the idle time.
    pub(super) fn active(&self, now_ns: TimeNs, last_host_ns: TimeNs) -> bool {
        self.p_s > 0.0 && now_ns < last_host_ns.saturating_add(self.idle_ns)
    }

    /// The rate for `excess_bytes` dirty above the target, bytes/s.
    pub(super) fn rate(&self, excess_bytes: f64) -> f64 {
        (excess_bytes / self.p_s).max(self.min_bytes_per_s)
    }

    fn refill(&mut self, now_ns: TimeNs, rate: f64) {
        let dt_s = now_ns.saturating_sub(self.refilled_ns) as f64 / NS_PER_S as f64;
        self.tokens_bytes = (self.tokens_bytes + rate * dt_s).min(self.burst_bytes);
        self.refilled_ns = now_ns;
    }

    /// Whether a batch may go now at `rate`.
    pub(super) fn may_go(&mut self, now_ns: TimeNs, rate: f64) -> bool {
        self.refill(now_ns, rate);
        self.tokens_bytes > 0.0
    }

    /// A batch of `bytes` went.
    pub(super) fn charge(&mut self, bytes: u64) {
        self.tokens_bytes -= bytes as f64;
    }

    /// When the bucket holds a byte again at `rate`.
    pub(super) fn wake_ns(&self, now_ns: TimeNs, rate: f64) -> TimeNs {
        let short = (1.0 - self.tokens_bytes).max(0.0);
        now_ns + ((short / rate) * NS_PER_S as f64).ceil().max(1.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: 1 MiB/s, a 256 KiB bucket, 256 KiB batches: the full bucket
    /// lets one batch go at once and (empty, not in debt) one more a byte's
    /// time later; that one is owed, so the next waits 0.25 s for the debt.
    #[test]
    fn batches_go_at_the_rate() {
        let kib = 1024.0;
        let mut p = Pacer::new(40.0, 1024.0 * kib, 100_000_000, 256.0 * kib);
        let rate = p.rate(0.0);
        assert_eq!(rate, 1024.0 * kib, "the floor");
        assert_eq!(
            p.rate(80.0 * 1024.0 * kib),
            2048.0 * kib,
            "80 MiB excess / 40 s"
        );
        assert!(p.may_go(0, rate));
        p.charge(256 * 1024);
        assert!(!p.may_go(0, rate), "empty");
        let wake = p.wake_ns(0, rate);
        assert!(wake <= 1_000, "{wake}: a byte at 1 MiB/s");
        assert!(p.may_go(wake, rate));
        p.charge(256 * 1024);
        let wake = p.wake_ns(wake, rate);
        assert!((250_000_000..=250_002_000).contains(&wake), "{wake}");
        assert!(!p.may_go(wake - 2_000_000, rate));
        assert!(p.may_go(wake, rate));
        // Idle for a minute: the bucket holds one batch, not sixty.
        assert!(p.may_go(60_000_000_000, rate));
        p.charge(256 * 1024);
        assert!(!p.may_go(60_000_000_000, rate));
        // Active only within the idle time after a host IO.
        assert!(p.active(50_000_000, 0) && !p.active(100_000_000, 0));
    }
}
