//! Host FLUSH: which writes a FLUSH waits for, and when it completes.

use super::*;

impl Cache {
    /// Flushes every dirty page (issued now where possible, the rest as the
    /// writes they wait for complete) — e.g. before shutdown.
    pub fn flush_all(&mut self, out: &mut Outbox) {
        self.flush_all = true;
        self.try_flush(out);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Every dirty page is to be flushed now (not just down to a watermark).
    pub(super) fn flushing_everything(&self) -> bool {
        self.flush_all
            || self.idle_flushing
            || self.draining
            || self.flush_waits.iter().any(|w| !w.pages.is_empty())
    }

    /// A host FLUSH: every write acknowledged before it must be where a
    /// restart reads it (the executor syncs every device once the FLUSH
    /// completes).
    ///
    /// Persistent mode: a restart recovers every dirty page from its slot,
    /// so dirty data stays where it is — the FLUSH waits only for the
    /// metadata commit that makes the entries of the pages written before
    /// it durable (one begun after it arrived when such changes are
    /// pending; the running one when it already holds them all; none when
    /// nothing a recovery sees changed). FLUSHes arriving together share
    /// one commit (group commit). Write-back keeps its own pace.
    ///
    /// Otherwise a restart starts cold and only the backing device counts:
    /// the FLUSH completes when every page dirty now has been written back
    /// at this generation or a later one. Write-through and write-around
    /// hold nothing dirty: their FLUSH completes at once.
    pub(super) fn host_flush(&mut self, io: HostIo, out: &mut Outbox) {
        self.host_flushes += 1;
        self.retry_failed_write_backs();
        let pages: HashMap<u64, (u64, u64)> =
            if self.persist.is_some() || self.broken_flush_skips_write_back {
                HashMap::default()
            } else {
                self.dirty_set
                    .iter()
                    .map(|p| {
                        let e = &self.map[p];
                        (*p, (e.incarnation, e.generation))
                    })
                    .collect()
            };
        let commits_needed = match &self.persist {
            Some(m) if m.table.recoverable_changes_pending() => m.table.commits + 1,
            Some(m) if m.table.state != CommitState::Idle => m.table.commits,
            Some(m) => m.commits_done,
            None => 0,
        };
        let w = FlushWait {
            host: io.id,
            pages,
            commits_needed,
        };
        if self.flush_wait_done(&w) {
            out.complete.push((io.id, TIER_BACKING));
            return;
        }
        if !w.pages.is_empty() {
            self.stats.flush_waits += 1;
        } else {
            self.stats.flush_commit_waits += 1;
        }
        self.flush_waits.push(w);
        self.try_flush(out);
        self.try_commit(out);
    }

    pub(super) fn flush_wait_done(&self, w: &FlushWait) -> bool {
        w.pages.is_empty()
            && self
                .persist
                .as_ref()
                .is_none_or(|m| m.commits_done >= w.commits_needed)
    }

    /// FLUSHes whose pages are written back and whose commits are done
    /// complete.
    pub(super) fn complete_flush_waits(&mut self, out: &mut Outbox) {
        let done: Vec<bool> = self
            .flush_waits
            .iter()
            .map(|w| self.flush_wait_done(w))
            .collect();
        let mut i = 0;
        self.flush_waits.retain(|w| {
            i += 1;
            if done[i - 1] {
                out.complete.push((w.host, TIER_BACKING));
                false
            } else {
                true
            }
        });
    }

    /// Page `page` (incarnation `inc`) reached the backing device at
    /// `generation`, or left the cache (`None`: trimmed, or dropped once
    /// clean): FLUSHes waiting for it may complete.
    pub(super) fn flush_waits_page_done(
        &mut self,
        page: u64,
        inc: u64,
        generation: Option<u64>,
        out: &mut Outbox,
    ) {
        if self.flush_waits.is_empty() {
            return;
        }
        for w in &mut self.flush_waits {
            if let Some(&(i, need)) = w.pages.get(&page)
                && i == inc
                && generation.is_none_or(|g| g >= need)
            {
                w.pages.remove(&page);
            }
        }
        self.complete_flush_waits(out);
    }
}
