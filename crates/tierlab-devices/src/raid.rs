//! RAID controller: a composite [`DeviceModel`] over any member models.
//!
//! The controller turns each host IO into member IOs (the layout of each
//! level is documented in docs/raid.md), counts them back in, and reports
//! the host IO when its last member IO completes. RAID 5 partial-stripe
//! writes are two-phase: the reads a write needs (old data and old parity
//! for read-modify-write, the untouched data for reconstruct-write) go out
//! first, and the data and parity writes are submitted at the time the last
//! of those reads completes.
//!
//! Like every model it is sans-IO: members are advanced only from inside
//! `advance`/`submit`, in time order, and the controller owns no clock.
//! Per-host-IO state lives in a slot vector with a free list, so the steady
//! state allocates nothing per IO.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};
use tierlab_core::device::{Background, DeviceModel, DeviceState};
use tierlab_core::{Completion, DeviceIo, Op, ParamError, TimeNs};

use crate::DeviceConfig;

/// Default stripe unit (chunk): md's default and the QoS experiment's
/// stripe (spec/qos.md: RAID 5 of 6 HDDs, 64 KiB).
pub const DEFAULT_STRIPE_UNIT_BYTES: u64 = 64 * 1024;
/// Stripe units are whole sectors so member IOs stay sector-aligned.
pub const SECTOR_BYTES: u64 = 512;
/// Member IO sizes are `u32`; 1 GiB keeps every member IO well inside that.
pub const STRIPE_UNIT_BYTES_MAX: u64 = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RaidLevel {
    /// Striping, no redundancy.
    Raid0,
    /// Mirroring: every member holds every byte.
    Raid1,
    /// Striping with one rotating parity unit per stripe (left-symmetric).
    Raid5,
    /// Striping over mirrored pairs (members 0+1, 2+3, ...).
    Raid10,
}

impl RaidLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            RaidLevel::Raid0 => "raid0",
            RaidLevel::Raid1 => "raid1",
            RaidLevel::Raid5 => "raid5",
            RaidLevel::Raid10 => "raid10",
        }
    }
}

/// Which copy serves a read on a mirrored level (RAID 1, RAID 10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadPolicy {
    /// Copies take turns, skipping failed members.
    RoundRobin,
    /// The copy expected to finish the read first: the fewest IOs in
    /// flight, a copy running background GC (as the member reports it,
    /// docs/raid.md) counting as two more, and among equals one that is idle
    /// inside (no program, GC or erase); ties go to the next copy in
    /// round-robin order so that an idle array still spreads reads instead
    /// of piling them on member 0.
    #[default]
    LeastOutstanding,
    /// Always the lowest-numbered surviving copy (a primary/backup pair).
    PrimaryOnly,
}

fn default_stripe_unit_bytes() -> u64 {
    DEFAULT_STRIPE_UNIT_BYTES
}

/// A RAID device as written in a config file (`model = "raid"`). Members
/// are device configs (`M = DeviceConfig`) for the simulator; the real
/// executor parses the same keys with each member its backing store
/// (`RaidParams<toml::Table>`), so both share one parser and
/// [`RaidParams::validate_shape`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaidParams<M = DeviceConfig> {
    pub level: RaidLevel,
    /// Bytes of one member's share of a stripe (the chunk).
    #[serde(default = "default_stripe_unit_bytes")]
    pub stripe_unit_bytes: u64,
    /// Mirrored levels only; ignored by RAID 0 and RAID 5.
    #[serde(default)]
    pub read_policy: ReadPolicy,
    /// Members (indices into `members`) that are failed from the start.
    #[serde(default)]
    pub failed_members: Vec<usize>,
    /// Each member configured separately, in member order.
    pub members: Vec<M>,
}

impl<M> RaidParams<M> {
    /// Checks the level, stripe unit, member count and failed members
    /// (not the members themselves).
    pub fn validate_shape(&self) -> Result<(), RaidError> {
        validate_shape(
            self.level,
            self.stripe_unit_bytes,
            self.members.len(),
            &self.failed_members,
        )
    }
}

impl RaidParams {
    /// Checks the array and, recursively, every member's parameters, so a
    /// bad config is reported before any member is built.
    pub fn validate(&self) -> Result<(), RaidError> {
        self.validate_shape()?;
        for (i, m) in self.members.iter().enumerate() {
            m.validate()
                .map_err(|e| e.within(format!("members[{i}]")))?;
        }
        self.capacity().map(|_| ())
    }

    /// Addressable bytes of the array this config builds (0 if invalid).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity().unwrap_or(0)
    }

    fn capacity(&self) -> Result<u64, RaidError> {
        let min_member_bytes = self.members.iter().map(|m| m.capacity_bytes()).min();
        array_capacity_bytes(
            self.level,
            self.stripe_unit_bytes,
            self.members.len(),
            min_member_bytes.unwrap_or(0),
        )
    }
}

/// The seed of member `member` of an array built with `seed`: distinct
/// per member (so six HDDs do not start with the same platter angle) and a
/// pure function of both (so runs stay reproducible). SplitMix64's mix.
pub fn member_seed(seed: u64, member: usize) -> u64 {
    let mut z = seed.wrapping_add((member as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Every member contributes the same whole number of stripe units (the
/// smallest member's, rounded down); the level decides how many members'
/// worth hold data.
pub fn array_capacity_bytes(
    level: RaidLevel,
    stripe_unit_bytes: u64,
    n_members: usize,
    min_member_bytes: u64,
) -> Result<u64, RaidError> {
    let member_usable_bytes = min_member_bytes / stripe_unit_bytes * stripe_unit_bytes;
    if member_usable_bytes == 0 {
        return err(
            "members",
            format!("a smallest member of {min_member_bytes} bytes"),
            format!(
                "members of at least one stripe unit (`stripe_unit_bytes` = {stripe_unit_bytes})"
            ),
        );
    }
    let data_members = match level {
        RaidLevel::Raid0 => n_members,
        RaidLevel::Raid1 => 1,
        RaidLevel::Raid5 => n_members - 1,
        RaidLevel::Raid10 => n_members / 2,
    } as u64;
    member_usable_bytes
        .checked_mul(data_members)
        .ok_or_else(|| {
            ParamError::new(
                "members",
                format!("{n_members} members of {member_usable_bytes} bytes"),
                "an array of less than 2^64 bytes",
            )
        })
}

/// A configuration the controller refuses: the parameter at fault, its
/// value and what is allowed, in the words the other models use.
pub type RaidError = ParamError;

fn err<T>(
    key: &str,
    found: impl fmt::Display,
    expected: impl Into<String>,
) -> Result<T, RaidError> {
    Err(ParamError::new(key, found, expected))
}

fn validate_shape(
    level: RaidLevel,
    stripe_unit_bytes: u64,
    n_members: usize,
    failed_members: &[usize],
) -> Result<(), RaidError> {
    if stripe_unit_bytes == 0
        || stripe_unit_bytes % SECTOR_BYTES != 0
        || stripe_unit_bytes > STRIPE_UNIT_BYTES_MAX
    {
        return err(
            "stripe_unit_bytes",
            stripe_unit_bytes,
            format!(
                "a positive multiple of {SECTOR_BYTES}, at most {STRIPE_UNIT_BYTES_MAX} (default \
                 {DEFAULT_STRIPE_UNIT_BYTES})"
            ),
        );
    }
    let (min_members, rule) = match level {
        RaidLevel::Raid0 => (1, "at least 1"),
        RaidLevel::Raid1 => (2, "at least 2"),
        RaidLevel::Raid5 => (3, "at least 3"),
        RaidLevel::Raid10 => (4, "an even number, at least 4"),
    };
    if n_members < min_members || (level == RaidLevel::Raid10 && n_members % 2 != 0) {
        return err(
            "members",
            format!("{n_members} devices"),
            format!("{rule} devices for {}", level.as_str()),
        );
    }
    let mut failed = vec![false; n_members];
    for &m in failed_members {
        if m >= n_members {
            return err(
                "failed_members",
                format!("member {m}, which does not exist"),
                format!("members 0 ..= {}", n_members - 1),
            );
        }
        if failed[m] {
            return err(
                "failed_members",
                format!("member {m} twice"),
                "each member at most once",
            );
        }
        failed[m] = true;
    }
    check_tolerance(level, &failed)
}

/// The data would be lost with these failures. The simulator has no data to
/// lose, so instead of letting IOs "succeed" on an array that could not
/// serve them, such a configuration (or `fail_member` call) is refused.
fn check_tolerance(level: RaidLevel, failed: &[bool]) -> Result<(), RaidError> {
    let n_failed = failed.iter().filter(|&&f| f).count();
    let list = || {
        let v: Vec<usize> = (0..failed.len()).filter(|&i| failed[i]).collect();
        format!("{v:?}")
    };
    match level {
        RaidLevel::Raid0 if n_failed > 0 => err(
            "failed_members",
            list(),
            "no failed member: raid0 has no redundancy",
        ),
        RaidLevel::Raid1 if n_failed == failed.len() => err(
            "failed_members",
            list(),
            "at least one surviving member for raid1",
        ),
        RaidLevel::Raid5 if n_failed > 1 => err(
            "failed_members",
            list(),
            "at most 1 failed member for raid5",
        ),
        RaidLevel::Raid10 => {
            for pair in 0..failed.len() / 2 {
                if failed[2 * pair] && failed[2 * pair + 1] {
                    return err(
                        "failed_members",
                        format!(
                            "{}, which loses raid10 mirror pair {pair} (members {} and {})",
                            list(),
                            2 * pair,
                            2 * pair + 1
                        ),
                        "at most one member of each mirror pair",
                    );
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Counters of what the controller did, for metrics ("RMW count" etc.; see
/// docs/raid.md for the exact definitions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaidStats {
    pub member_reads: u64,
    pub member_writes: u64,
    /// Member trims and flushes.
    pub member_other: u64,
    /// RAID 5 stripes written by read-modify-write.
    pub rmw_stripes: u64,
    /// RAID 5 partial stripes written by reconstruct-write.
    pub rcw_stripes: u64,
    /// RAID 5 stripes written whole, with no reads.
    pub full_stripe_writes: u64,
    /// RAID 5 stripes written while degraded: parity lost (data only), or a
    /// lost data unit rebuilt from every survivor before writing.
    pub degraded_stripe_writes: u64,
    /// RAID 5 stripes whose read needed a lost unit, rebuilt from the others.
    pub degraded_stripe_reads: u64,
}

/// A member and whether it has failed. Wrapping lets `members()` show a
/// failed member as `Failed` in waveforms while it keeps the model intact.
struct Member {
    model: Box<dyn DeviceModel>,
    failed: bool,
}

impl DeviceModel for Member {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        self.model.submit(now_ns, io)
    }
    fn next_event_ns(&self) -> Option<TimeNs> {
        self.model.next_event_ns()
    }
    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        self.model.advance(now_ns, done)
    }
    fn capacity_bytes(&self) -> u64 {
        self.model.capacity_bytes()
    }
    fn state(&self) -> DeviceState {
        // IOs issued before the failure still drain; show them until done.
        if self.failed && self.model.in_flight() == 0 {
            DeviceState::Failed
        } else {
            self.model.state()
        }
    }
    fn in_flight(&self) -> usize {
        self.model.in_flight()
    }
    fn members(&self) -> Vec<&dyn DeviceModel> {
        self.model.members()
    }
    fn counters(&self) -> Vec<(&'static str, f64)> {
        self.model.counters()
    }
    fn background(&self) -> Background {
        self.model.background()
    }
    fn set_background_allowed(&mut self, now_ns: TimeNs, allowed: bool) {
        self.model.set_background_allowed(now_ns, allowed)
    }
}

/// Member tags: the host slot in the high bits, and in the low bits what
/// the completion means: a plain member IO, or a read that RAID 5 write
/// phase `k` (one per partial stripe, at most two per host IO) waits for.
const TAG_KIND_BITS: u32 = 2;
const TAG_PLAIN: u64 = 0;

/// A RAID 5 stripe write waiting for its reads. The write set is computed
/// again when the reads are done (from the range alone), so a member that
/// fails meanwhile is skipped.
#[derive(Clone, Copy, Debug, Default)]
struct PendingStripe {
    reads_left: u32,
    stripe: u64,
    /// Data bytes of the stripe written, as offsets into its data units
    /// laid end to end: [lo, hi).
    lo: u64,
    hi: u64,
}

#[derive(Clone, Copy, Debug)]
struct HostSlot {
    host_tag: u64,
    op: Op,
    /// Submission order: orders ties and finds the oldest IO for `state()`.
    seq: u64,
    member_ios_left: u64,
    in_use: bool,
    pending: [PendingStripe; 2],
}

#[derive(Clone, Copy, Debug)]
struct Finished {
    done_ns: TimeNs,
    seq: u64,
    host_tag: u64,
}

// ---- Layout, shared with the real executor (tierlab-real's raid.rs) ------

/// How a RAID 5 stripe write gets the parity right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raid5WriteMode {
    /// Read old data and old parity of the written range.
    ReadModifyWrite,
    /// Read the data the write leaves alone; no parity read. With nothing
    /// left alone this is a full-stripe write.
    ReconstructWrite,
    /// The parity member is lost: write the data, nothing to read.
    NoParity,
    /// A written data unit is lost and its old bytes are needed: read every
    /// survivor over the parity range, then write.
    Rebuild,
}

/// Where a RAID 5 stripe's units live: `n` members, row `stripe` (every
/// unit of the row at member offset `stripe × stripe_unit_bytes`).
#[derive(Clone, Copy, Debug)]
pub struct Raid5Stripe {
    pub n: usize,
    pub stripe: u64,
}

impl Raid5Stripe {
    pub fn parity_member(self) -> usize {
        // Left-symmetric: parity starts on the last member and moves left
        // one member per stripe.
        self.n - 1 - (self.stripe % self.n as u64) as usize
    }
    /// Member holding data unit `j` (0-based within the stripe): data
    /// starts just right of the parity and wraps around.
    pub fn data_member(self, j: usize) -> usize {
        (self.parity_member() + 1 + j) % self.n
    }
}

/// A byte range [lo, hi): inside one stripe unit, or (in plans) on a member.
pub type UnitRange = (u64, u64);

/// RAID 5: the part of data unit `j` that the stripe range [lo, hi) (bytes
/// of the row's data, `0 ..= (n-1) × u`) covers, relative to the unit.
pub fn raid5_unit_range(stripe_unit_bytes: u64, j: usize, lo: u64, hi: u64) -> Option<UnitRange> {
    let u = stripe_unit_bytes;
    let start = j as u64 * u;
    let a = lo.max(start);
    let b = hi.min(start + u);
    (a < b).then(|| (a - start, b - start))
}

/// RAID 5: the parity bytes a write of [lo, hi) changes: the hull of the
/// written ranges of each unit. A write within one unit changes the parity
/// under it only; a write crossing a unit boundary touches the end of one
/// unit and the start of the next, so the whole unit.
pub fn raid5_parity_range(stripe_unit_bytes: u64, lo: u64, hi: u64) -> UnitRange {
    let u = stripe_unit_bytes;
    if lo / u == (hi - 1) / u {
        (lo % u, (hi - 1) % u + 1)
    } else {
        (0, u)
    }
}

/// RAID 5: how a write of [lo, hi) into row `geo` keeps parity right, given
/// which members have failed. The fewer member reads wins (each one costs a
/// positioning on a disk), ties to read-modify-write, which disturbs fewer
/// members; a lost member forces the mode that does not read it.
pub fn raid5_write_mode(
    geo: Raid5Stripe,
    stripe_unit_bytes: u64,
    lo: u64,
    hi: u64,
    failed: impl Fn(usize) -> bool,
) -> Raid5WriteMode {
    if failed(geo.parity_member()) {
        return Raid5WriteMode::NoParity;
    }
    let parity = raid5_parity_range(stripe_unit_bytes, lo, hi);
    let mut rmw_reads = 1; // the old parity
    let mut rmw_ok = true;
    let mut rcw_reads = 0;
    let mut rcw_ok = true;
    for j in 0..geo.n - 1 {
        let lost = failed(geo.data_member(j));
        let w = raid5_unit_range(stripe_unit_bytes, j, lo, hi);
        if w.is_some() {
            rmw_reads += 1;
            rmw_ok &= !lost;
        }
        if rcw_need(w, parity).is_some() {
            rcw_reads += 1;
            rcw_ok &= !lost;
        }
    }
    match (rmw_ok, rcw_ok) {
        (true, true) if rcw_reads < rmw_reads => Raid5WriteMode::ReconstructWrite,
        (true, _) => Raid5WriteMode::ReadModifyWrite,
        (false, true) => Raid5WriteMode::ReconstructWrite,
        (false, false) => Raid5WriteMode::Rebuild,
    }
}

/// RAID 0 / 1 / 10: the first piece of host range [offset, end) on an
/// array of `groups` mirror groups (members for RAID 0, pairs for RAID 10,
/// one for RAID 1): (group, member offset, length). Unit `k` lives on group
/// `k mod groups` at row `k div groups`; RAID 1 (one group) holds the host
/// address space as is and is not split.
pub fn striped_piece(
    stripe_unit_bytes: u64,
    groups: u64,
    offset: u64,
    end: u64,
) -> (usize, u64, u64) {
    if groups == 1 {
        return (0, offset, end - offset);
    }
    let u = stripe_unit_bytes;
    let unit = offset / u;
    let within = offset % u;
    let len = (u - within).min(end - offset);
    ((unit % groups) as usize, (unit / groups) * u + within, len)
}

/// A RAID array over member models (module docs; docs/raid.md). Build it
/// from a config with [`Raid::build`], or over models in hand with
/// [`Raid::new`].
pub struct Raid {
    level: RaidLevel,
    stripe_unit_bytes: u64,
    read_policy: ReadPolicy,
    members: Vec<Member>,
    capacity_bytes: u64,
    /// Members per mirror group (1 for RAID 0, n for RAID 1, 2 for RAID 10).
    group_size: usize,
    /// Next member to try, per mirror group, as an index within the group.
    rr_cursor: Vec<usize>,
    slots: Vec<HostSlot>,
    free_slots: Vec<u32>,
    live_slots: usize,
    /// (seq, slot) of host IOs in submission order; stale entries are
    /// dropped from the front, so the front is the oldest in flight.
    order: VecDeque<(u64, u32)>,
    next_seq: u64,
    /// Host completions not yet handed out by `advance`.
    finished: Vec<Finished>,
    /// Reused buffers: member completions of one step, and the reads of a
    /// RAID 5 stripe write as (member, [start, end) member byte offsets).
    member_done: Vec<Completion>,
    step_events: Vec<(usize, Completion)>,
    plan: Vec<(usize, UnitRange)>,
    stats: RaidStats,
    /// Per mirror group, the member allowed to run deferrable background
    /// work (staggered GC, docs/raid.md).
    background_holder: Vec<Option<usize>>,
}

impl fmt::Debug for Raid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Raid")
            .field("level", &self.level)
            .field("stripe_unit_bytes", &self.stripe_unit_bytes)
            .field("members", &self.members.len())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Raid {
    /// Builds the controller from its config and the members built from
    /// `params.members` (in the same order).
    pub fn from_params(
        params: &RaidParams,
        members: Vec<Box<dyn DeviceModel>>,
    ) -> Result<Raid, RaidError> {
        if members.len() != params.members.len() {
            return err(
                "members",
                format!("{} member models", members.len()),
                format!("one per configured member ({})", params.members.len()),
            );
        }
        Raid::new(
            params.level,
            params.stripe_unit_bytes,
            params.read_policy,
            &params.failed_members,
            members,
        )
    }

    /// Builds the members of `params` (member `i` with
    /// `member_seed(seed, i)`) and the array over them.
    pub fn build(params: &RaidParams, seed: u64) -> Result<Raid, RaidError> {
        params.validate()?;
        let mut members = Vec::with_capacity(params.members.len());
        for (i, m) in params.members.iter().enumerate() {
            let member = crate::build(m, member_seed(seed, i))
                .map_err(|e| e.within(format!("members[{i}]")))?;
            members.push(member);
        }
        Raid::from_params(params, members)
    }

    pub fn new(
        level: RaidLevel,
        stripe_unit_bytes: u64,
        read_policy: ReadPolicy,
        failed_members: &[usize],
        members: Vec<Box<dyn DeviceModel>>,
    ) -> Result<Raid, RaidError> {
        let n = members.len();
        validate_shape(level, stripe_unit_bytes, n, failed_members)?;
        let min_member_bytes = members.iter().map(|m| m.capacity_bytes()).min();
        let capacity_bytes =
            array_capacity_bytes(level, stripe_unit_bytes, n, min_member_bytes.unwrap_or(0))?;
        let group_size = match level {
            RaidLevel::Raid0 | RaidLevel::Raid5 => 1,
            RaidLevel::Raid1 => n,
            RaidLevel::Raid10 => 2,
        };
        let mut members: Vec<Member> = members
            .into_iter()
            .map(|model| Member {
                model,
                failed: false,
            })
            .collect();
        for &m in failed_members {
            members[m].failed = true;
        }
        if group_size > 1 {
            // Mirrors stagger background work: every member that lets its
            // host defer it waits for its group's turn
            // (`coordinate_background`).
            for m in &mut members {
                m.model.set_background_allowed(0, false);
            }
        }
        Ok(Raid {
            level,
            stripe_unit_bytes,
            read_policy,
            members,
            capacity_bytes,
            group_size,
            rr_cursor: vec![0; n / group_size],
            slots: Vec::new(),
            free_slots: Vec::new(),
            live_slots: 0,
            order: VecDeque::new(),
            next_seq: 0,
            finished: Vec::new(),
            member_done: Vec::new(),
            step_events: Vec::new(),
            plan: Vec::new(),
            stats: RaidStats::default(),
            background_holder: vec![None; n / group_size],
        })
    }

    pub fn level(&self) -> RaidLevel {
        self.level
    }

    pub fn stripe_unit_bytes(&self) -> u64 {
        self.stripe_unit_bytes
    }

    pub fn stats(&self) -> RaidStats {
        self.stats
    }

    pub fn is_failed(&self, member: usize) -> bool {
        self.members.get(member).is_some_and(|m| m.failed)
    }

    /// Marks a member failed from now on. IOs already sent to it still
    /// complete (the failure happens after them); no new IO is sent to it.
    /// Refused, leaving the array unchanged, if the index does not exist or
    /// the level cannot survive the failure. Failing a failed member is a
    /// no-op.
    pub fn fail_member(&mut self, member: usize) -> Result<(), RaidError> {
        let n = self.members.len();
        if member >= n {
            return err(
                "failed_members",
                format!("member {member}, which does not exist"),
                format!("members 0 ..= {}", n - 1),
            );
        }
        let mut failed: Vec<bool> = self.members.iter().map(|m| m.failed).collect();
        failed[member] = true;
        check_tolerance(self.level, &failed)?;
        self.members[member].failed = true;
        Ok(())
    }

    // ---- host IO bookkeeping -------------------------------------------

    fn alloc_slot(&mut self, host_tag: u64, op: Op) -> usize {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = HostSlot {
            host_tag,
            op,
            seq,
            member_ios_left: 0,
            in_use: true,
            pending: [PendingStripe::default(); 2],
        };
        let i = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i as usize
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.live_slots += 1;
        self.order.push_back((seq, i as u32));
        i
    }

    fn finish(&mut self, slot: usize, done_ns: TimeNs) {
        let s = &mut self.slots[slot];
        debug_assert!(s.in_use && s.member_ios_left == 0);
        s.in_use = false;
        self.finished.push(Finished {
            done_ns,
            seq: s.seq,
            host_tag: s.host_tag,
        });
        self.free_slots.push(slot as u32);
        self.live_slots -= 1;
        while let Some(&(seq, i)) = self.order.front() {
            let s = &self.slots[i as usize];
            if s.in_use && s.seq == seq {
                break;
            }
            self.order.pop_front();
        }
    }

    fn issue(
        &mut self,
        now_ns: TimeNs,
        member: usize,
        tag: u64,
        op: Op,
        offset_bytes: u64,
        size_bytes: u64,
    ) {
        debug_assert!(
            !self.members[member].failed,
            "IO sent to failed member {member}"
        );
        debug_assert!(size_bytes <= u32::MAX as u64);
        match op {
            Op::Read => self.stats.member_reads += 1,
            Op::Write => self.stats.member_writes += 1,
            Op::Trim | Op::Flush => self.stats.member_other += 1,
        }
        self.members[member].model.submit(
            now_ns,
            DeviceIo {
                tag,
                op,
                offset_bytes,
                size_bytes: size_bytes as u32,
            },
        );
    }

    // ---- time ----------------------------------------------------------

    /// Processes every member event at or before `now_ns`, in time order.
    /// A member completion may issue new member IOs (RAID 5 write phase)
    /// at its own time, which may complete before `now_ns` too, so this
    /// loops until no member has an event left at or before `now_ns`.
    fn run_until(&mut self, now_ns: TimeNs) {
        let mut events = std::mem::take(&mut self.step_events);
        let mut member_done = std::mem::take(&mut self.member_done);
        loop {
            let step_ns = self
                .members
                .iter()
                .filter_map(|m| m.model.next_event_ns())
                .filter(|&t| t <= now_ns)
                .min();
            let Some(step_ns) = step_ns else { break };
            // Advance only to the earliest event: every member is then at or
            // before `step_ns`, so IOs issued at `step_ns` are never in a
            // member's past.
            events.clear();
            for (i, m) in self.members.iter_mut().enumerate() {
                if m.model.next_event_ns().is_some_and(|t| t <= step_ns) {
                    member_done.clear();
                    m.model.advance(step_ns, &mut member_done);
                    events.extend(member_done.iter().map(|&c| (i, c)));
                }
            }
            // Same-time completions from different members: member order,
            // so the result never depends on anything but the inputs.
            events.sort_by_key(|&(i, c)| (c.done_ns, i));
            for &(_, c) in &events {
                self.on_member_completion(step_ns, c);
            }
            self.coordinate_background(step_ns);
        }
        self.step_events = events;
        self.member_done = member_done;
    }

    fn on_member_completion(&mut self, now_ns: TimeNs, c: Completion) {
        let slot = (c.tag >> TAG_KIND_BITS) as usize;
        let kind = c.tag & ((1 << TAG_KIND_BITS) - 1);
        let Some(s) = self.slots.get_mut(slot).filter(|s| s.in_use) else {
            // A member reported an IO this controller never sent: a member
            // model bug. Ignore it rather than corrupt another IO's count.
            debug_assert!(false, "member completed unknown tag {}", c.tag);
            return;
        };
        s.member_ios_left -= 1;
        if kind != TAG_PLAIN {
            let p = &mut s.pending[kind as usize - 1];
            p.reads_left -= 1;
            if p.reads_left == 0 {
                let p = *p;
                let writes = self.raid5_issue_writes(now_ns, slot, p.stripe, p.lo, p.hi);
                self.slots[slot].member_ios_left += writes;
            }
        }
        if self.slots[slot].member_ios_left == 0 {
            self.finish(slot, c.done_ns);
        }
    }

    /// Staggered background work on mirrors: at most one member of each
    /// group runs background work that can wait (GC between watermarks);
    /// the others defer theirs, so reads find a copy free of it. The turn
    /// goes to the member whose work is most urgent (ties: lowest index)
    /// and is kept until its work is done. Members that report nothing
    /// (models without host-controlled background work) are left alone.
    /// Runs after every member event and host submission, so a member
    /// never waits for a turn that is free.
    fn coordinate_background(&mut self, now_ns: TimeNs) {
        let gs = self.group_size;
        if gs == 1 {
            return;
        }
        for g in 0..self.background_holder.len() {
            if let Some(h) = self.background_holder[g] {
                let status = self.members[h].model.background();
                if !self.members[h].failed
                    && matches!(status, Background::Running | Background::Urgent)
                {
                    continue;
                }
                self.members[h].model.set_background_allowed(now_ns, false);
                self.background_holder[g] = None;
            }
            let mut next: Option<(usize, Background)> = None;
            for m in g * gs..(g + 1) * gs {
                if self.members[m].failed {
                    continue;
                }
                let status = self.members[m].model.background();
                if status >= Background::Deferred && next.is_none_or(|(_, b)| status > b) {
                    next = Some((m, status));
                }
            }
            if let Some((m, _)) = next {
                self.members[m].model.set_background_allowed(now_ns, true);
                self.background_holder[g] = Some(m);
            }
        }
    }

    // ---- RAID 0 / 1 / 10: striped mirror groups --------------------------

    /// Picks the member of mirror group `g` that serves a read.
    fn pick_reader(&mut self, g: usize) -> usize {
        let gs = self.group_size;
        let first = g * gs;
        if gs == 1 {
            return first;
        }
        let start = match self.read_policy {
            ReadPolicy::PrimaryOnly => 0,
            _ => self.rr_cursor[g],
        };
        let mut best: Option<(usize, usize)> = None; // (member, in_flight)
        for k in 0..gs {
            let m = first + (start + k) % gs;
            if self.members[m].failed {
                continue;
            }
            match self.read_policy {
                ReadPolicy::LeastOutstanding => {
                    // Expected completion, in half IOs: the IOs in flight;
                    // background GC the member reports, as two more IOs (a
                    // read there waits for the collection step under way);
                    // among equals one not busy inside (a buffered write's
                    // program, GC, an erase): a read there does not wait
                    // behind it.
                    let model = &self.members[m].model;
                    let busy = model.state() != DeviceState::Idle;
                    let background =
                        matches!(model.background(), Background::Running | Background::Urgent);
                    let q = 2 * model.in_flight() + 4 * background as usize + busy as usize;
                    if best.is_none_or(|(_, bq)| q < bq) {
                        best = Some((m, q));
                    }
                }
                ReadPolicy::RoundRobin | ReadPolicy::PrimaryOnly => {
                    best = Some((m, 0));
                    break;
                }
            }
        }
        // validate_shape/check_tolerance keep one survivor per group.
        let m = best.map_or(first, |(m, _)| m);
        self.rr_cursor[g] = (m - first + 1) % gs;
        m
    }

    fn submit_mirrored(&mut self, now_ns: TimeNs, slot: usize, io: DeviceIo) -> u64 {
        let u = self.stripe_unit_bytes;
        let gs = self.group_size;
        let groups = (self.members.len() / gs) as u64;
        let tag = (slot as u64) << TAG_KIND_BITS | TAG_PLAIN;
        let mut issued = 0;
        let mut offset = io.offset_bytes;
        let end = io.end_bytes();
        while offset < end {
            let (g, member_offset, len) = striped_piece(u, groups, offset, end);
            if io.op == Op::Read {
                let m = self.pick_reader(g);
                self.issue(now_ns, m, tag, Op::Read, member_offset, len);
                issued += 1;
            } else {
                for m in g * gs..(g + 1) * gs {
                    if !self.members[m].failed {
                        self.issue(now_ns, m, tag, io.op, member_offset, len);
                        issued += 1;
                    }
                }
            }
            offset += len;
        }
        issued
    }

    // ---- RAID 5 ------------------------------------------------------------

    fn raid5_stripe(&self, stripe: u64) -> Raid5Stripe {
        Raid5Stripe {
            n: self.members.len(),
            stripe,
        }
    }

    fn unit_range(&self, j: usize, lo: u64, hi: u64) -> Option<UnitRange> {
        raid5_unit_range(self.stripe_unit_bytes, j, lo, hi)
    }

    fn parity_range(&self, lo: u64, hi: u64) -> UnitRange {
        raid5_parity_range(self.stripe_unit_bytes, lo, hi)
    }

    /// Fills `self.plan` with the reads a write of [lo, hi) into `stripe`
    /// needs and returns how it keeps parity right (`raid5_write_mode`).
    fn raid5_plan_write(&mut self, stripe: u64, lo: u64, hi: u64) -> Raid5WriteMode {
        let geo = self.raid5_stripe(stripe);
        let d = geo.n - 1;
        let (pa, pb) = self.parity_range(lo, hi);
        self.plan.clear();
        let mode = raid5_write_mode(geo, self.stripe_unit_bytes, lo, hi, |m| {
            self.members[m].failed
        });
        let row = stripe * self.stripe_unit_bytes;
        match mode {
            Raid5WriteMode::ReadModifyWrite => {
                for j in 0..d {
                    if let Some(w) = self.unit_range(j, lo, hi) {
                        self.plan.push((geo.data_member(j), (row + w.0, row + w.1)));
                    }
                }
                self.plan.push((geo.parity_member(), (row + pa, row + pb)));
            }
            Raid5WriteMode::ReconstructWrite => {
                for j in 0..d {
                    if let Some(r) = rcw_need(self.unit_range(j, lo, hi), (pa, pb)) {
                        self.plan.push((geo.data_member(j), (row + r.0, row + r.1)));
                    }
                }
            }
            Raid5WriteMode::Rebuild => {
                for m in 0..geo.n {
                    if !self.members[m].failed {
                        self.plan.push((m, (row + pa, row + pb)));
                    }
                }
            }
            Raid5WriteMode::NoParity => {}
        }
        mode
    }

    /// Issues the data and parity writes of a stripe write, skipping a
    /// failed member; returns how many were issued.
    fn raid5_issue_writes(
        &mut self,
        now_ns: TimeNs,
        slot: usize,
        stripe: u64,
        lo: u64,
        hi: u64,
    ) -> u64 {
        let geo = self.raid5_stripe(stripe);
        let row = stripe * self.stripe_unit_bytes;
        let tag = (slot as u64) << TAG_KIND_BITS | TAG_PLAIN;
        let mut issued = 0;
        for j in 0..geo.n - 1 {
            let m = geo.data_member(j);
            if self.members[m].failed {
                continue;
            }
            if let Some(w) = self.unit_range(j, lo, hi) {
                self.issue(now_ns, m, tag, Op::Write, row + w.0, w.1 - w.0);
                issued += 1;
            }
        }
        let p = geo.parity_member();
        if !self.members[p].failed {
            let (pa, pb) = self.parity_range(lo, hi);
            self.issue(now_ns, p, tag, Op::Write, row + pa, pb - pa);
            issued += 1;
        }
        issued
    }

    /// Reads of [lo, hi) of one stripe. A lost data unit in the range is
    /// rebuilt from every survivor (the other data units and the parity)
    /// over its range; each survivor is read once, over the hull of what it
    /// must give.
    fn raid5_read_stripe(
        &mut self,
        now_ns: TimeNs,
        tag: u64,
        stripe: u64,
        lo: u64,
        hi: u64,
    ) -> u64 {
        let geo = self.raid5_stripe(stripe);
        let row = stripe * self.stripe_unit_bytes;
        let d = geo.n - 1;
        let lost = (0..d).find_map(|j| {
            let m = geo.data_member(j);
            if self.members[m].failed {
                self.unit_range(j, lo, hi)
            } else {
                None
            }
        });
        let mut issued = 0;
        if let Some(lost) = lost {
            self.stats.degraded_stripe_reads += 1;
            for m in 0..geo.n {
                if self.members[m].failed {
                    continue;
                }
                let own = (0..d)
                    .find(|&j| geo.data_member(j) == m)
                    .and_then(|j| self.unit_range(j, lo, hi));
                let (a, b) = match own {
                    Some(w) => (w.0.min(lost.0), w.1.max(lost.1)),
                    None => lost,
                };
                self.issue(now_ns, m, tag, Op::Read, row + a, b - a);
                issued += 1;
            }
        } else {
            for j in 0..d {
                if let Some(w) = self.unit_range(j, lo, hi) {
                    self.issue(
                        now_ns,
                        geo.data_member(j),
                        tag,
                        Op::Read,
                        row + w.0,
                        w.1 - w.0,
                    );
                    issued += 1;
                }
            }
        }
        issued
    }

    fn submit_raid5(&mut self, now_ns: TimeNs, slot: usize, io: DeviceIo) -> u64 {
        let u = self.stripe_unit_bytes;
        let n = self.members.len();
        let stripe_data_bytes = (n as u64 - 1) * u;
        let end = io.end_bytes();
        if io.size_bytes == 0 {
            return 0;
        }
        let first_stripe = io.offset_bytes / stripe_data_bytes;
        let last_stripe = (end - 1) / stripe_data_bytes;
        let plain_tag = (slot as u64) << TAG_KIND_BITS | TAG_PLAIN;
        let mut issued = 0;
        for stripe in first_stripe..=last_stripe {
            let base = stripe * stripe_data_bytes;
            let lo = io.offset_bytes.max(base) - base;
            let hi = end.min(base + stripe_data_bytes) - base;
            match io.op {
                Op::Read => issued += self.raid5_read_stripe(now_ns, plain_tag, stripe, lo, hi),
                Op::Write => {
                    issued += self.raid5_write_stripe(
                        now_ns,
                        slot,
                        stripe,
                        lo,
                        hi,
                        stripe == first_stripe,
                    )
                }
                Op::Trim => {
                    // Like md: only whole stripes are discarded (data and
                    // parity together); a partial trim changes nothing.
                    if lo == 0 && hi == stripe_data_bytes {
                        for m in 0..n {
                            if !self.members[m].failed {
                                self.issue(now_ns, m, plain_tag, Op::Trim, stripe * u, u);
                                issued += 1;
                            }
                        }
                    }
                }
                Op::Flush => unreachable!("flushes are handled by submit"),
            }
        }
        issued
    }

    fn raid5_write_stripe(
        &mut self,
        now_ns: TimeNs,
        slot: usize,
        stripe: u64,
        lo: u64,
        hi: u64,
        first: bool,
    ) -> u64 {
        let mode = self.raid5_plan_write(stripe, lo, hi);
        let full = lo == 0 && hi == (self.members.len() as u64 - 1) * self.stripe_unit_bytes;
        match mode {
            Raid5WriteMode::ReadModifyWrite => self.stats.rmw_stripes += 1,
            // Nothing left alone to read: only a write of the whole stripe
            // (degraded or not) gets here.
            Raid5WriteMode::ReconstructWrite if self.plan.is_empty() => {
                debug_assert!(full);
                self.stats.full_stripe_writes += 1
            }
            Raid5WriteMode::ReconstructWrite => self.stats.rcw_stripes += 1,
            Raid5WriteMode::NoParity | Raid5WriteMode::Rebuild => {
                self.stats.degraded_stripe_writes += 1
            }
        }
        if self.plan.is_empty() {
            return self.raid5_issue_writes(now_ns, slot, stripe, lo, hi);
        }
        // Only a host IO's first and last stripes can be partial, so two
        // phases per host IO suffice: index 0 for the first, 1 for the last.
        let k = if first { 0 } else { 1 };
        debug_assert_eq!(self.slots[slot].pending[k].reads_left, 0);
        let plan = std::mem::take(&mut self.plan);
        self.slots[slot].pending[k] = PendingStripe {
            reads_left: plan.len() as u32,
            stripe,
            lo,
            hi,
        };
        let tag = (slot as u64) << TAG_KIND_BITS | (k as u64 + 1);
        for &(m, (a, b)) in &plan {
            self.issue(now_ns, m, tag, Op::Read, a, b - a);
        }
        let issued = plan.len() as u64;
        self.plan = plan;
        issued
    }
}

/// What reconstruct-write must read of a data unit: the parity range minus
/// what the write overwrites. With the parity range the hull of the written
/// ranges, the remainder is one interval (or none).
pub fn rcw_need(written: Option<UnitRange>, parity: UnitRange) -> Option<UnitRange> {
    let (pa, pb) = parity;
    match written {
        None => Some((pa, pb)),
        Some((wa, wb)) => {
            let left = wa > pa;
            let right = wb < pb;
            debug_assert!(
                !(left && right),
                "written range strictly inside the parity range"
            );
            match (left, right) {
                (false, false) => None,
                (true, false) => Some((pa, wa)),
                (false, true) => Some((wb, pb)),
                // Not reachable (see above); reading the whole range is safe.
                (true, true) => Some((pa, pb)),
            }
        }
    }
}

impl DeviceModel for Raid {
    fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
        // The executor may submit before advancing this device to `now_ns`;
        // catch up first so that member events before `now_ns` (which may
        // issue member IOs at their own, earlier time) come before these.
        self.run_until(now_ns);
        let slot = self.alloc_slot(io.tag, io.op);
        let issued = match io.op {
            Op::Flush => {
                let tag = (slot as u64) << TAG_KIND_BITS | TAG_PLAIN;
                let mut issued = 0;
                for m in 0..self.members.len() {
                    if !self.members[m].failed {
                        self.issue(now_ns, m, tag, Op::Flush, 0, 0);
                        issued += 1;
                    }
                }
                issued
            }
            _ if self.level == RaidLevel::Raid5 => self.submit_raid5(now_ns, slot, io),
            _ => self.submit_mirrored(now_ns, slot, io),
        };
        self.slots[slot].member_ios_left += issued;
        self.coordinate_background(now_ns);
        if self.slots[slot].member_ios_left == 0 {
            // Nothing to do on any member (an empty IO, a partial-stripe
            // trim): done at once, reported by the next `advance`.
            self.finish(slot, now_ns);
        }
    }

    fn next_event_ns(&self) -> Option<TimeNs> {
        let members = self
            .members
            .iter()
            .filter_map(|m| m.model.next_event_ns())
            .min();
        let reported = self.finished.iter().map(|f| f.done_ns).min();
        match (members, reported) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
        self.run_until(now_ns);
        // Completion order, ties in host submission order.
        self.finished.sort_unstable_by_key(|f| (f.done_ns, f.seq));
        done.extend(self.finished.drain(..).map(|f| Completion {
            tag: f.host_tag,
            done_ns: f.done_ns,
        }));
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn state(&self) -> DeviceState {
        match self.order.front() {
            None => DeviceState::Idle,
            Some(&(_, i)) => match self.slots[i as usize].op {
                Op::Read => DeviceState::Read,
                // Trims and flushes change the media; show them as writes.
                Op::Write | Op::Trim | Op::Flush => DeviceState::Write,
            },
        }
    }

    fn in_flight(&self) -> usize {
        self.live_slots + self.finished.len()
    }

    fn members(&self) -> Vec<&dyn DeviceModel> {
        self.members.iter().map(|m| m as &dyn DeviceModel).collect()
    }

    /// The controller's member IO counts, and the array's energy: every
    /// `energy_*` counter summed over the members that report it (each
    /// member's own counters are reported under its own name).
    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = self.stats;
        let mut out: Vec<(&'static str, f64)> = vec![
            ("member_reads", s.member_reads as f64),
            ("member_writes", s.member_writes as f64),
            ("member_other", s.member_other as f64),
        ];
        if self.level == RaidLevel::Raid5 {
            out.extend([
                ("rmw_stripes", s.rmw_stripes as f64),
                ("rcw_stripes", s.rcw_stripes as f64),
                ("full_stripe_writes", s.full_stripe_writes as f64),
                ("degraded_stripe_writes", s.degraded_stripe_writes as f64),
                ("degraded_stripe_reads", s.degraded_stripe_reads as f64),
            ]);
        }
        let first = out.len();
        for m in &self.members {
            for (name, value) in m.counters() {
                if !name.starts_with("energy_") {
                    continue;
                }
                match out[first..].iter_mut().find(|(n, _)| *n == name) {
                    Some(entry) => entry.1 += value,
                    None => out.push((name, value)),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    const KIB: u64 = 1024;

    /// One member IO as the member saw it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Seen {
        member: usize,
        submit_ns: TimeNs,
        op: Op,
        offset_bytes: u64,
        size_bytes: u32,
    }

    type Log = Rc<RefCell<Vec<Seen>>>;

    /// A test member: serves one IO at a time, first come first served,
    /// each in `service_ns`, and logs every IO it receives. It also checks
    /// that the controller never submits or advances it back in time.
    struct FixedDevice {
        member: usize,
        service_ns: u64,
        capacity_bytes: u64,
        clock_ns: TimeNs,
        current: Option<(DeviceIo, TimeNs)>,
        queue: VecDeque<DeviceIo>,
        log: Log,
    }

    impl DeviceModel for FixedDevice {
        fn submit(&mut self, now_ns: TimeNs, io: DeviceIo) {
            assert!(
                now_ns >= self.clock_ns,
                "member {} submitted in its past",
                self.member
            );
            assert!(
                io.end_bytes() <= self.capacity_bytes,
                "member IO past the end: {io:?}"
            );
            self.clock_ns = now_ns;
            self.log.borrow_mut().push(Seen {
                member: self.member,
                submit_ns: now_ns,
                op: io.op,
                offset_bytes: io.offset_bytes,
                size_bytes: io.size_bytes,
            });
            if self.current.is_none() {
                self.current = Some((io, now_ns + self.service_ns));
            } else {
                self.queue.push_back(io);
            }
        }
        fn next_event_ns(&self) -> Option<TimeNs> {
            self.current.map(|(_, t)| t)
        }
        fn advance(&mut self, now_ns: TimeNs, done: &mut Vec<Completion>) {
            assert!(
                now_ns >= self.clock_ns,
                "member {} advanced back in time",
                self.member
            );
            self.clock_ns = now_ns;
            while let Some((io, t)) = self.current.filter(|&(_, t)| t <= now_ns) {
                done.push(Completion {
                    tag: io.tag,
                    done_ns: t,
                });
                // Queued IOs arrived before `t` (the controller catches
                // members up before submitting), so the next starts at `t`.
                self.current = self.queue.pop_front().map(|q| (q, t + self.service_ns));
            }
        }
        fn capacity_bytes(&self) -> u64 {
            self.capacity_bytes
        }
        fn state(&self) -> DeviceState {
            match self.current {
                None => DeviceState::Idle,
                Some((io, _)) if io.op == Op::Read => DeviceState::Read,
                Some(_) => DeviceState::Write,
            }
        }
        fn in_flight(&self) -> usize {
            self.queue.len() + self.current.is_some() as usize
        }
    }

    fn members(service_ns: &[u64], capacity_bytes: u64, log: &Log) -> Vec<Box<dyn DeviceModel>> {
        service_ns
            .iter()
            .enumerate()
            .map(|(member, &service_ns)| {
                Box::new(FixedDevice {
                    member,
                    service_ns,
                    capacity_bytes,
                    clock_ns: 0,
                    current: None,
                    queue: VecDeque::new(),
                    log: log.clone(),
                }) as Box<dyn DeviceModel>
            })
            .collect()
    }

    /// An array under test with its own clock: each `one` starts well after
    /// the previous one finished, and reports times relative to its start.
    struct Array {
        raid: Raid,
        log: Log,
        base_ns: TimeNs,
        /// Start of the last `one`.
        round_ns: TimeNs,
    }

    fn array(level: RaidLevel, unit: u64, service_ns: &[u64], failed: &[usize]) -> Array {
        array_with(level, unit, ReadPolicy::RoundRobin, service_ns, failed)
    }

    fn array_with(
        level: RaidLevel,
        unit: u64,
        policy: ReadPolicy,
        service_ns: &[u64],
        failed: &[usize],
    ) -> Array {
        let log = Log::default();
        let raid = Raid::new(
            level,
            unit,
            policy,
            failed,
            members(service_ns, 1 << 30, &log),
        )
        .unwrap();
        Array {
            raid,
            log,
            base_ns: 0,
            round_ns: 0,
        }
    }

    fn io(tag: u64, op: Op, offset_bytes: u64, size_bytes: u64) -> DeviceIo {
        DeviceIo {
            tag,
            op,
            offset_bytes,
            size_bytes: size_bytes as u32,
        }
    }

    fn seen(member: usize, submit_ns: TimeNs, op: Op, offset_bytes: u64, size_bytes: u64) -> Seen {
        Seen {
            member,
            submit_ns,
            op,
            offset_bytes,
            size_bytes: size_bytes as u32,
        }
    }

    impl Array {
        /// Submits one IO `at_ns` after this round starts, runs it to the
        /// end event by event, returns its completion (relative time).
        fn one(&mut self, at_ns: TimeNs, host: DeviceIo) -> Completion {
            self.log.borrow_mut().clear();
            self.round_ns = self.base_ns;
            self.raid.submit(self.base_ns + at_ns, host);
            let mut done = Vec::new();
            while let Some(t) = self.raid.next_event_ns() {
                self.raid.advance(t, &mut done);
            }
            assert_eq!(done.len(), 1);
            assert_eq!(self.raid.in_flight(), 0);
            let c = Completion {
                tag: done[0].tag,
                done_ns: done[0].done_ns - self.base_ns,
            };
            self.base_ns = done[0].done_ns + 1_000_000;
            c
        }
        /// Member IOs of the last `one`, at times relative to its start,
        /// sorted by (time, member) so expectations do not depend on issue
        /// order within an instant.
        fn seen(&self) -> Vec<Seen> {
            let log = self.log.borrow();
            let rebase = |s: &Seen| Seen {
                submit_ns: s.submit_ns - self.round_ns,
                ..*s
            };
            let mut v: Vec<Seen> = log.iter().map(rebase).collect();
            v.sort_by_key(|s| (s.submit_ns, s.member, s.offset_bytes));
            v
        }
        fn count(&self, op: Op) -> usize {
            self.log.borrow().iter().filter(|s| s.op == op).count()
        }
    }

    #[test]
    fn raid0_splits_at_units_and_maps_round_robin() {
        let u = 4 * KIB;
        let mut a = array(RaidLevel::Raid0, u, &[1000; 3], &[]);
        // Units 5, 6, 7: members 5 % 3 = 2, 0, 1; rows 5 / 3 = 1, 2, 2.
        let c = a.one(0, io(9, Op::Read, 5 * u + 100, 2 * u));
        assert_eq!(
            a.seen(),
            vec![
                seen(0, 0, Op::Read, 2 * u, u),
                seen(1, 0, Op::Read, 2 * u, 100),
                seen(2, 0, Op::Read, u + 100, u - 100),
            ]
        );
        // Three members in parallel: one service time.
        assert_eq!(
            c,
            Completion {
                tag: 9,
                done_ns: 1000
            }
        );
    }

    #[test]
    fn raid0_pieces_on_one_member_queue_behind_each_other() {
        let u = 4 * KIB;
        let mut a = array(RaidLevel::Raid0, u, &[1000; 2], &[]);
        // Units 0..4: members 0, 1, 0, 1: two IOs per member, served in turn.
        let c = a.one(50, io(1, Op::Write, 0, 4 * u));
        assert_eq!(a.count(Op::Write), 4);
        assert_eq!(c.done_ns, 50 + 2000);
    }

    #[test]
    fn raid5_left_symmetric_layout_for_four_members() {
        let u = 4 * KIB;
        let mut a = array(RaidLevel::Raid5, u, &[1000; 4], &[]);
        // docs/raid.md's table: D0 D1 D2 P / D4 D5 P D3 / D8 P D6 D7 / P D9 D10 D11.
        let data_member = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3];
        for (k, &m) in data_member.iter().enumerate() {
            let k = k as u64;
            a.one(0, io(k, Op::Read, k * u + 512, 512));
            let row = k / 3 * u;
            assert_eq!(
                a.seen(),
                vec![seen(m, 0, Op::Read, row + 512, 512)],
                "data unit {k}"
            );
        }
        // Parity: a small write to a stripe's first unit reads and writes it.
        let parity_member = [3, 2, 1, 0];
        for (s, &p) in parity_member.iter().enumerate() {
            let s = s as u64;
            let d0 = data_member[3 * s as usize];
            a.one(0, io(s, Op::Write, 3 * s * u, 512));
            let mut want = vec![
                seen(d0, 0, Op::Read, s * u, 512),
                seen(p, 0, Op::Read, s * u, 512),
                seen(d0, 1000, Op::Write, s * u, 512),
                seen(p, 1000, Op::Write, s * u, 512),
            ];
            want.sort_by_key(|s| (s.submit_ns, s.member, s.offset_bytes));
            assert_eq!(a.seen(), want, "stripe {s}");
        }
        // Stripe 4 has the same layout as stripe 0, one row down.
        a.one(0, io(0, Op::Read, 12 * u, 512));
        assert_eq!(a.seen(), vec![seen(0, 0, Op::Read, 4 * u, 512)]);
    }

    /// The QoS array: RAID 5 of 6 members, 64 KiB units. Member `i` takes
    /// `(i + 1)` µs so that the order of phases shows in the times.
    fn qos_array(failed: &[usize]) -> Array {
        array(
            RaidLevel::Raid5,
            64 * KIB,
            &[1000, 2000, 3000, 4000, 5000, 6000],
            failed,
        )
    }

    #[test]
    fn raid5_small_write_is_two_reads_then_two_writes() {
        let u = 64 * KIB;
        let mut a = qos_array(&[]);
        // Stripe 0: parity on member 5, data unit 3 on member (5 + 1 + 3) % 6 = 3.
        let c = a.one(0, io(7, Op::Write, 3 * u + 8192, 4096));
        assert_eq!(
            a.seen(),
            vec![
                seen(3, 0, Op::Read, 8192, 4096),
                seen(5, 0, Op::Read, 8192, 4096),
                // Both reads done at max(4000, 6000): writes go out then.
                seen(3, 6000, Op::Write, 8192, 4096),
                seen(5, 6000, Op::Write, 8192, 4096),
            ]
        );
        assert_eq!(
            c,
            Completion {
                tag: 7,
                done_ns: 6000 + 6000
            }
        );
        let st = a.raid.stats();
        assert_eq!(
            (st.rmw_stripes, st.member_reads, st.member_writes),
            (1, 2, 2)
        );
    }

    #[test]
    fn raid5_full_stripe_write_is_n_writes_and_no_read() {
        let u = 64 * KIB;
        let mut a = qos_array(&[]);
        // Stripe 1 (data bytes 5u..10u): parity on member 4.
        let c = a.one(0, io(1, Op::Write, 5 * u, 5 * u));
        let want: Vec<Seen> = (0..6).map(|m| seen(m, 0, Op::Write, u, u)).collect();
        assert_eq!(a.seen(), want);
        assert_eq!(c.done_ns, 6000);
        assert_eq!(a.raid.stats().full_stripe_writes, 1);
        assert_eq!(a.count(Op::Read), 0);
    }

    #[test]
    fn raid5_long_write_full_stripes_without_reads_partial_ends_with() {
        let u = 64 * KIB;
        let mut a = array(RaidLevel::Raid5, u, &[1000; 6], &[]);
        // Last unit of stripe 0 (small: RMW), stripe 1 whole, first unit of
        // stripe 2 (small: RMW).
        a.one(0, io(1, Op::Write, 4 * u, 7 * u));
        let st = a.raid.stats();
        assert_eq!((st.rmw_stripes, st.full_stripe_writes), (2, 1));
        assert_eq!(a.count(Op::Read), 4);
        assert_eq!(a.count(Op::Write), 2 + 6 + 2);
    }

    #[test]
    fn raid5_mostly_full_write_uses_reconstruct_write() {
        let u = 64 * KIB;
        let mut a = qos_array(&[]);
        // Units 0..4 whole and half of unit 4: RMW would read 5 data + parity
        // = 6; reconstruct-write reads the unwritten half of unit 4 only.
        let c = a.one(0, io(1, Op::Write, 0, 4 * u + u / 2));
        let mut want = vec![seen(4, 0, Op::Read, u / 2, u / 2)];
        want.extend((0..4).map(|m| seen(m, 5000, Op::Write, 0, u)));
        want.push(seen(4, 5000, Op::Write, 0, u / 2));
        want.push(seen(5, 5000, Op::Write, 0, u));
        assert_eq!(a.seen(), want);
        assert_eq!(c.done_ns, 5000 + 6000);
        assert_eq!(a.raid.stats().rcw_stripes, 1);
    }

    #[test]
    fn raid5_three_members_small_write_prefers_one_read() {
        let mut a = array(RaidLevel::Raid5, 4 * KIB, &[1000; 3], &[]);
        // Stripe 0: parity on 2, data on 0 and 1. RMW reads 2; reading the
        // other data unit alone (reconstruct-write) is 1.
        a.one(0, io(1, Op::Write, 0, 512));
        assert_eq!(
            a.seen(),
            vec![
                seen(1, 0, Op::Read, 0, 512),
                seen(0, 1000, Op::Write, 0, 512),
                seen(2, 1000, Op::Write, 0, 512),
            ]
        );
    }

    #[test]
    fn raid5_degraded_read_of_lost_unit_reads_the_n_minus_1_others() {
        let u = 64 * KIB;
        let mut a = qos_array(&[3]);
        let c = a.one(0, io(1, Op::Read, 3 * u + 8192, 4096));
        let want: Vec<Seen> = [0, 1, 2, 4, 5]
            .iter()
            .map(|&m| seen(m, 0, Op::Read, 8192, 4096))
            .collect();
        assert_eq!(a.seen(), want);
        assert_eq!(c.done_ns, 6000, "waits for the slowest survivor");
        // A read of a surviving unit is unaffected.
        a.one(0, io(2, Op::Read, 2 * u, 4096));
        assert_eq!(a.seen(), vec![seen(2, 0, Op::Read, 0, 4096)]);
        assert_eq!(a.raid.stats().degraded_stripe_reads, 1);
    }

    #[test]
    fn raid5_degraded_read_across_units_reads_each_survivor_once() {
        let u = 64 * KIB;
        let mut a = qos_array(&[3]);
        // Units 2 and 3 (member 3 lost): every survivor gives the whole unit.
        a.one(0, io(1, Op::Read, 2 * u, 2 * u));
        let want: Vec<Seen> = [0, 1, 2, 4, 5]
            .iter()
            .map(|&m| seen(m, 0, Op::Read, 0, u))
            .collect();
        assert_eq!(a.seen(), want);
    }

    #[test]
    fn raid5_degraded_writes_skip_the_lost_member() {
        let u = 64 * KIB;
        // Lost parity (member 5 in stripe 0): write the data, nothing else.
        let mut a = qos_array(&[5]);
        a.one(0, io(1, Op::Write, 3 * u, 4096));
        assert_eq!(a.seen(), vec![seen(3, 0, Op::Write, 0, 4096)]);

        // Lost data unit, wholly rewritten: parity = new data ^ the other
        // units, so read the four other data units, then write the parity.
        let mut a = qos_array(&[3]);
        a.one(0, io(1, Op::Write, 3 * u + 8192, 4096));
        let mut want: Vec<Seen> = [0, 1, 2, 4]
            .iter()
            .map(|&m| seen(m, 0, Op::Read, 8192, 4096))
            .collect();
        want.push(seen(5, 5000, Op::Write, 8192, 4096));
        assert_eq!(a.seen(), want);

        // Lost data unit partly rewritten (end of unit 2 + start of unit 3):
        // its old bytes must be rebuilt: every survivor over the parity range.
        let mut a = qos_array(&[3]);
        a.one(0, io(1, Op::Write, 3 * u - 4096, 8192));
        let mut want: Vec<Seen> = [0, 1, 2, 4, 5]
            .iter()
            .map(|&m| seen(m, 0, Op::Read, 0, u))
            .collect();
        want.push(seen(2, 6000, Op::Write, u - 4096, 4096));
        want.push(seen(5, 6000, Op::Write, 0, u));
        assert_eq!(a.seen(), want);
        assert_eq!(a.raid.stats().degraded_stripe_writes, 1);

        // Lost data unit untouched by the write: read-modify-write works
        // even where reconstruct-write would be cheaper (3 members).
        let mut a = array(RaidLevel::Raid5, 4 * KIB, &[1000; 3], &[1]);
        a.one(0, io(1, Op::Write, 0, 512));
        assert_eq!(
            a.seen(),
            vec![
                seen(0, 0, Op::Read, 0, 512),
                seen(2, 0, Op::Read, 0, 512),
                seen(0, 1000, Op::Write, 0, 512),
                seen(2, 1000, Op::Write, 0, 512),
            ]
        );

        // Full stripe: n - 1 writes.
        let mut a = qos_array(&[3]);
        a.one(0, io(1, Op::Write, 0, 5 * u));
        assert_eq!(a.count(Op::Write), 5);
        assert_eq!(a.count(Op::Read), 0);
    }

    #[test]
    fn failing_a_member_mid_write_skips_it_in_the_write_phase() {
        let u = 64 * KIB;
        let mut a = qos_array(&[]);
        a.raid.submit(0, io(1, Op::Write, 3 * u, 4096));
        a.raid.fail_member(5).unwrap();
        // The read already on member 5 still completes; the parity write
        // that would follow does not go out.
        let mut done = Vec::new();
        a.raid.advance(1_000_000, &mut done);
        assert_eq!(
            done,
            vec![Completion {
                tag: 1,
                done_ns: 6000 + 4000
            }]
        );
        assert_eq!(
            a.seen(),
            vec![
                seen(3, 0, Op::Read, 0, 4096),
                seen(5, 0, Op::Read, 0, 4096),
                seen(3, 6000, Op::Write, 0, 4096),
            ]
        );
        assert_eq!(a.raid.members()[5].state(), DeviceState::Failed);
        let e = a.raid.fail_member(0).unwrap_err();
        assert_eq!(e.key(), "failed_members");
        assert_eq!(e.expected, "at most 1 failed member for raid5");
        assert!(
            !a.raid.is_failed(0),
            "a refused failure leaves the array as it was"
        );
    }

    #[test]
    fn raid10_stripes_over_mirrored_pairs() {
        let u = 4 * KIB;
        let mut a = array(RaidLevel::Raid10, u, &[1000; 4], &[]);
        // Unit 3 -> pair 1 (members 2, 3), row 1; unit 4 -> pair 0, row 2.
        a.one(0, io(1, Op::Write, 3 * u, 2 * u));
        assert_eq!(
            a.seen(),
            vec![
                seen(0, 0, Op::Write, 2 * u, u),
                seen(1, 0, Op::Write, 2 * u, u),
                seen(2, 0, Op::Write, u, u),
                seen(3, 0, Op::Write, u, u),
            ]
        );
        // Reads take one copy, alternating within each pair.
        a.one(0, io(2, Op::Read, 3 * u, 2 * u));
        assert_eq!(
            a.seen(),
            vec![seen(0, 0, Op::Read, 2 * u, u), seen(2, 0, Op::Read, u, u)]
        );
        a.one(0, io(3, Op::Read, 3 * u, 2 * u));
        assert_eq!(
            a.seen(),
            vec![seen(1, 0, Op::Read, 2 * u, u), seen(3, 0, Op::Read, u, u)]
        );
    }

    #[test]
    fn mirrors_serve_from_the_surviving_copy() {
        let mut a = array_with(
            RaidLevel::Raid1,
            4 * KIB,
            ReadPolicy::PrimaryOnly,
            &[1000, 3000],
            &[],
        );
        a.one(0, io(1, Op::Read, 8192, 4096));
        assert_eq!(a.seen(), vec![seen(0, 0, Op::Read, 8192, 4096)]);
        // Writes go to both and wait for the slower.
        let c = a.one(0, io(2, Op::Write, 8192, 4096));
        assert_eq!(a.count(Op::Write), 2);
        assert_eq!(c.done_ns, 3000);
        a.raid.fail_member(0).unwrap();
        a.one(0, io(3, Op::Read, 8192, 4096));
        assert_eq!(a.seen(), vec![seen(1, 0, Op::Read, 8192, 4096)]);
        a.one(0, io(4, Op::Write, 8192, 4096));
        assert_eq!(a.seen(), vec![seen(1, 0, Op::Write, 8192, 4096)]);
        assert!(a.raid.fail_member(1).is_err(), "the last copy cannot fail");

        let mut a = array(RaidLevel::Raid10, 4 * KIB, &[1000; 4], &[1, 2]);
        for tag in 0..4 {
            a.one(0, io(tag, Op::Read, tag * 4 * KIB, 4096));
        }
        let members: Vec<usize> = a.log.borrow().iter().map(|s| s.member).collect();
        assert_eq!(members, vec![3], "only the last read is in the log");
        a.log.borrow_mut().clear();
        a.one(0, io(9, Op::Write, 0, 8 * KIB));
        let members: Vec<usize> = a.seen().iter().map(|s| s.member).collect();
        assert_eq!(members, vec![0, 3]);
    }

    /// Closed loop at `depth` outstanding IOs of `op` and `size_bytes` at
    /// random aligned offsets, for `duration_ns` (IOs complete by then
    /// count): (completed IOs, mean latency in ns).
    fn closed_loop(
        dev: &mut dyn DeviceModel,
        depth: u64,
        duration_ns: TimeNs,
        op: Op,
        size_bytes: u64,
    ) -> (u64, u64) {
        let slots = dev.capacity_bytes() / size_bytes;
        let mut rng = Lcg(depth);
        let mut submit_ns = Vec::new();
        let mut issue = |dev: &mut dyn DeviceModel, now: TimeNs, submit_ns: &mut Vec<TimeNs>| {
            let tag = submit_ns.len() as u64;
            submit_ns.push(now);
            let offset = rng.next() % slots * size_bytes;
            dev.submit(now, io(tag, op, offset, size_bytes));
        };
        for _ in 0..depth {
            issue(dev, 0, &mut submit_ns);
        }
        let mut done = Vec::new();
        let (mut completed, mut latency_sum_ns) = (0, 0);
        while let Some(t) = dev.next_event_ns().filter(|&t| t <= duration_ns) {
            done.clear();
            dev.advance(t, &mut done);
            for c in &done {
                completed += 1;
                latency_sum_ns += c.done_ns - submit_ns[c.tag as usize];
                issue(dev, t, &mut submit_ns);
            }
        }
        (completed, latency_sum_ns / completed.max(1))
    }

    fn closed_loop_reads(raid: &mut Raid, depth: u64, duration_ns: TimeNs) -> u64 {
        closed_loop(raid, depth, duration_ns, Op::Read, 4096).0
    }

    #[test]
    fn raid1_read_iops_scale_with_members() {
        let duration_ns = 1_000_000; // 1000 service times of 1 µs
        let single = {
            let log = Log::default();
            let mut raid = Raid::new(
                RaidLevel::Raid0,
                4096,
                ReadPolicy::RoundRobin,
                &[],
                members(&[1000], 1 << 30, &log),
            )
            .unwrap();
            closed_loop_reads(&mut raid, 4, duration_ns)
        };
        assert_eq!(single, 1000);
        for policy in [ReadPolicy::RoundRobin, ReadPolicy::LeastOutstanding] {
            for n in [2, 3, 4] {
                let mut a = array_with(RaidLevel::Raid1, 4096, policy, &vec![1000; n], &[]);
                let got = closed_loop_reads(&mut a.raid, n as u64, duration_ns);
                assert_eq!(got, n as u64 * single, "{policy:?} with {n} members");
            }
        }
        // Primary-only uses one copy: no gain.
        let mut a = array_with(
            RaidLevel::Raid1,
            4096,
            ReadPolicy::PrimaryOnly,
            &[1000; 4],
            &[],
        );
        assert_eq!(closed_loop_reads(&mut a.raid, 4, duration_ns), single);
    }

    #[test]
    fn least_outstanding_avoids_the_slow_copy() {
        // Member 1 is 4x slower. Round-robin splits reads evenly so its queue
        // grows; least-outstanding sends it about a fifth of them.
        let duration_ns = 1_000_000;
        let mut rr = array_with(
            RaidLevel::Raid1,
            4096,
            ReadPolicy::RoundRobin,
            &[1000, 4000],
            &[],
        );
        let mut lo = array_with(
            RaidLevel::Raid1,
            4096,
            ReadPolicy::LeastOutstanding,
            &[1000, 4000],
            &[],
        );
        let got_rr = closed_loop_reads(&mut rr.raid, 8, duration_ns);
        let got_lo = closed_loop_reads(&mut lo.raid, 8, duration_ns);
        // Round-robin is paced by the slow copy: 2 reads per 4 µs = 500/ms;
        // shortest queue approaches the sum of both rates, 1250/ms.
        assert!((490..=510).contains(&got_rr), "{got_rr}");
        assert!(got_lo >= 1200, "{got_lo}");
    }

    #[test]
    fn state_follows_the_oldest_host_io() {
        let mut a = array(RaidLevel::Raid1, 4096, &[1000, 1000], &[]);
        assert_eq!(a.raid.state(), DeviceState::Idle);
        a.raid.submit(0, io(1, Op::Read, 0, 4096));
        assert_eq!(a.raid.state(), DeviceState::Read);
        a.raid.submit(10, io(2, Op::Write, 0, 4096));
        assert_eq!(a.raid.state(), DeviceState::Read);
        assert_eq!(a.raid.in_flight(), 2);
        let mut done = Vec::new();
        a.raid.advance(1000, &mut done);
        assert_eq!(
            done,
            vec![Completion {
                tag: 1,
                done_ns: 1000
            }]
        );
        assert_eq!(a.raid.state(), DeviceState::Write);
        assert_eq!(a.raid.in_flight(), 1);
        a.raid.advance(5000, &mut done);
        // Write waits for the read on member 0: 1000 + 1000.
        assert_eq!(
            done[1],
            Completion {
                tag: 2,
                done_ns: 2000
            }
        );
        assert_eq!(a.raid.state(), DeviceState::Idle);
        assert_eq!(a.raid.next_event_ns(), None);
    }

    #[test]
    fn one_big_advance_runs_both_write_phases() {
        // The write phase starts at an instant inside a single advance: the
        // controller must loop until no member event is left before `now`.
        let mut a = qos_array(&[]);
        a.raid.submit(0, io(1, Op::Write, 0, 512));
        a.raid.submit(0, io(2, Op::Write, 70 * KIB, 512));
        assert_eq!(a.raid.next_event_ns(), Some(1000));
        let mut done = Vec::new();
        a.raid.advance(1_000_000, &mut done);
        assert_eq!(done.len(), 2);
        assert!(done.iter().all(|c| c.done_ns < 1_000_000));
        assert_eq!(a.raid.next_event_ns(), None);
    }

    #[test]
    fn capacity_per_level_in_whole_units() {
        let u = 64 * KIB;
        let sizes = [10 << 20, (9 << 20) + 5000, 12 << 20, 11 << 20];
        let usable = 9 << 20; // the smallest, rounded down to 64 KiB
        for (level, want) in [
            (RaidLevel::Raid0, 4 * usable),
            (RaidLevel::Raid1, usable),
            (RaidLevel::Raid5, 3 * usable),
            (RaidLevel::Raid10, 2 * usable),
        ] {
            let log = Log::default();
            let ms: Vec<Box<dyn DeviceModel>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let mut m = members(&[1000], c, &log);
                    let _ = i;
                    m.pop().unwrap()
                })
                .collect();
            let raid = Raid::new(level, u, ReadPolicy::default(), &[], ms).unwrap();
            assert_eq!(raid.capacity_bytes(), want, "{level:?}");
            assert_eq!(raid.members().len(), 4);
        }
    }

    fn new_err(level: RaidLevel, unit: u64, n: usize, failed: &[usize]) -> RaidError {
        let log = Log::default();
        Raid::new(
            level,
            unit,
            ReadPolicy::default(),
            failed,
            members(&vec![1000; n], 1 << 30, &log),
        )
        .unwrap_err()
    }

    #[test]
    fn bad_configs_name_the_parameter_and_what_is_allowed() {
        for unit in [0, 1000, 4 << 30] {
            let e = new_err(RaidLevel::Raid0, unit, 2, &[]);
            assert_eq!(
                (e.key(), e.found.clone()),
                ("stripe_unit_bytes".into(), unit.to_string())
            );
            assert!(e.expected.starts_with("a positive multiple of 512"), "{e}");
        }
        let e = new_err(RaidLevel::Raid1, 4096, 1, &[]);
        assert_eq!(
            e.to_string(),
            "key `members`: expected at least 2 devices for raid1, found 1 devices"
        );
        let e = new_err(RaidLevel::Raid5, 4096, 2, &[]);
        assert_eq!(
            e.to_string(),
            "key `members`: expected at least 3 devices for raid5, found 2 devices"
        );
        let e = new_err(RaidLevel::Raid10, 4096, 5, &[]);
        assert_eq!(
            e.to_string(),
            "key `members`: expected an even number, at least 4 devices for raid10, found 5 devices"
        );
        let e = new_err(RaidLevel::Raid5, 4096, 4, &[4]);
        assert_eq!(
            e.to_string(),
            "key `failed_members`: expected members 0 ..= 3, found member 4, which does not exist"
        );
        let e = new_err(RaidLevel::Raid5, 4096, 4, &[1, 1]);
        assert_eq!(
            e.to_string(),
            "key `failed_members`: expected each member at most once, found member 1 twice"
        );
        let e = new_err(RaidLevel::Raid5, 4096, 4, &[0, 2]);
        assert_eq!(
            e.to_string(),
            "key `failed_members`: expected at most 1 failed member for raid5, found [0, 2]"
        );
        let e = new_err(RaidLevel::Raid0, 4096, 2, &[0]);
        assert!(e.to_string().contains("raid0 has no redundancy"), "{e}");
        let e = new_err(RaidLevel::Raid10, 4096, 4, &[2, 3]);
        assert!(
            e.to_string()
                .contains("loses raid10 mirror pair 1 (members 2 and 3)"),
            "{e}"
        );
        let e = new_err(RaidLevel::Raid1, 4096, 2, &[0, 1]);
        assert!(
            e.to_string().contains("at least one surviving member"),
            "{e}"
        );
        // Members smaller than one unit.
        let log = Log::default();
        let e = Raid::new(
            RaidLevel::Raid0,
            8192,
            ReadPolicy::default(),
            &[],
            members(&[1], 4096, &log),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "key `members`: expected members of at least one stripe unit \
             (`stripe_unit_bytes` = 8192), found a smallest member of 4096 bytes"
        );
    }

    /// A small deterministic generator for the randomized tests.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    /// Open-loop random IOs over `raid`, advancing the way the simulator
    /// does (to the next arrival or event). `step_ns`, if set, adds an
    /// advance every `step_ns` too, which must not change any result.
    /// Checks the device contract on the way; returns every completion.
    fn random_run(
        raid: &mut Raid,
        seed: u64,
        ios: u64,
        step_ns: Option<TimeNs>,
    ) -> Vec<Completion> {
        let mut rng = Lcg(seed);
        let cap_sectors = raid.capacity_bytes() / 512;
        let mut arrivals = Vec::new();
        let mut t = 0;
        for tag in 0..ios {
            t += rng.next() % 3000;
            let op = match rng.next() % 10 {
                0..=5 => Op::Read,
                6..=8 => Op::Write,
                _ => Op::Trim,
            };
            let size = (1 + rng.next() % 512) * 512; // up to 256 KiB
            let offset = rng.next() % (cap_sectors - size / 512) * 512;
            arrivals.push((t, io(tag, op, offset, size)));
        }
        let mut submitted_ns = vec![TimeNs::MAX; ios as usize];
        let mut all = Vec::new();
        let mut done = Vec::new();
        let mut next_arrival = 0;
        let mut now = 0;
        loop {
            if next_arrival == arrivals.len() && raid.next_event_ns().is_none() {
                break;
            }
            let mut t = TimeNs::MAX;
            if let Some(&(a, _)) = arrivals.get(next_arrival) {
                t = a;
            }
            if let Some(e) = raid.next_event_ns() {
                assert!(e >= now, "next event {e} before now {now}");
                t = t.min(e);
            }
            if let Some(s) = step_ns {
                t = t.min(now + s);
            }
            now = t;
            done.clear();
            raid.advance(now, &mut done);
            for c in &done {
                assert!(c.done_ns <= now);
                assert!(
                    c.done_ns >= submitted_ns[c.tag as usize],
                    "completed before submitted"
                );
                if let Some(prev) = all.last() {
                    let prev: &Completion = prev;
                    assert!(
                        (prev.done_ns, prev.tag) < (c.done_ns, c.tag),
                        "out of order: {prev:?} then {c:?}"
                    );
                }
                all.push(*c);
            }
            while let Some(&(a, host)) = arrivals.get(next_arrival).filter(|(a, _)| *a <= now) {
                assert_eq!(a, now);
                submitted_ns[host.tag as usize] = now;
                raid.submit(now, host);
                next_arrival += 1;
            }
            assert_eq!(
                raid.in_flight() as u64,
                next_arrival as u64 - all.len() as u64
            );
        }
        assert_eq!(all.len() as u64, ios, "every IO completes exactly once");
        assert_eq!(raid.state(), DeviceState::Idle);
        all
    }

    #[test]
    fn random_workloads_keep_the_contract_and_are_deterministic() {
        let shapes: [(RaidLevel, &[u64], &[usize]); 6] = [
            (RaidLevel::Raid0, &[700, 900, 1100], &[]),
            (RaidLevel::Raid1, &[700, 2900], &[]),
            (RaidLevel::Raid5, &[700, 900, 1100, 1300, 1500], &[]),
            (RaidLevel::Raid5, &[700, 900, 1100, 1300, 1500], &[2]),
            (RaidLevel::Raid10, &[700, 900, 1100, 1300], &[]),
            (RaidLevel::Raid10, &[700, 900, 1100, 1300], &[0, 3]),
        ];
        for (level, service, failed) in shapes {
            for policy in [
                ReadPolicy::RoundRobin,
                ReadPolicy::LeastOutstanding,
                ReadPolicy::PrimaryOnly,
            ] {
                let run = |step| {
                    let log = Log::default();
                    let mut raid = Raid::new(
                        level,
                        16 * KIB,
                        policy,
                        failed,
                        members(service, 64 << 20, &log),
                    )
                    .unwrap();
                    let done = random_run(&mut raid, 42, 2000, step);
                    let seen = log.borrow().clone();
                    assert!(
                        seen.iter().all(|s| !failed.contains(&s.member)),
                        "IO sent to a failed member"
                    );
                    (done, seen, raid.stats())
                };
                let a = run(None);
                let b = run(None);
                assert_eq!(
                    a.0, b.0,
                    "{level:?} {policy:?}: same inputs, same completions"
                );
                assert_eq!(a.1, b.1);
                // Advancing more often must not change anything.
                if level == RaidLevel::Raid5 {
                    // The workload reaches every write path.
                    let st = a.2;
                    assert!(st.rmw_stripes > 0 && st.rcw_stripes > 0 && st.full_stripe_writes > 0);
                    assert_eq!(failed.is_empty(), st.degraded_stripe_reads == 0);
                    assert_eq!(failed.is_empty(), st.degraded_stripe_writes == 0);
                }
                let c = run(Some(333));
                assert_eq!(
                    a.0, c.0,
                    "{level:?} {policy:?}: advance granularity changed results"
                );
                assert_eq!(a.1, c.1);
                assert_eq!(a.2, c.2);
            }
        }
    }

    #[test]
    fn empty_ios_and_partial_trims_complete_at_once_via_advance() {
        let mut a = qos_array(&[]);
        a.raid.submit(100, io(1, Op::Trim, 4096, 4096)); // partial stripe: no member IO
        assert_eq!(a.raid.in_flight(), 1);
        assert_eq!(a.raid.next_event_ns(), Some(100));
        let mut done = Vec::new();
        a.raid.advance(100, &mut done);
        assert_eq!(
            done,
            vec![Completion {
                tag: 1,
                done_ns: 100
            }]
        );
        // A whole-stripe trim reaches every member, parity included.
        a.one(0, io(2, Op::Trim, 0, 5 * 64 * KIB));
        assert_eq!(a.count(Op::Trim), 6);
        // A flush goes to every surviving member.
        a.one(0, io(3, Op::Flush, 0, 0));
        assert_eq!(a.count(Op::Flush), 6);
    }

    // ---- with the crate's configs and real models ----------------------

    fn parse(text: &str) -> Result<DeviceConfig, String> {
        toml::from_str::<DeviceConfig>(text).map_err(|e| e.to_string())
    }

    fn hdd_raid5_toml(extra: &str) -> String {
        let member = "{ model = \"hdd\", preset = \"sata-7200-2tb\" }";
        format!(
            "model = \"raid\"\nlevel = \"raid5\"\n{extra}\nmembers = [{}]\n",
            [member; 6].join(", ")
        )
    }

    #[test]
    fn raid_configs_parse_with_defaults_and_build() {
        let config = parse(&hdd_raid5_toml("")).unwrap();
        let DeviceConfig::Raid(p) = &config else {
            panic!("not a raid: {config:?}")
        };
        assert_eq!(p.level, RaidLevel::Raid5);
        assert_eq!(p.stripe_unit_bytes, 64 * KIB);
        assert_eq!(p.read_policy, ReadPolicy::LeastOutstanding);
        assert!(p.failed_members.is_empty());
        assert_eq!(config.model(), "raid");
        // 2 TB members hold 30,517,578 whole 64 KiB units; 5 of 6 hold data.
        let want = 5 * (2_000_000_000_000 / 65536 * 65536);
        assert_eq!(config.capacity_bytes(), want);
        let raid = crate::build(&config, 1).unwrap();
        assert_eq!(raid.capacity_bytes(), want);
        assert_eq!(raid.members().len(), 6);
        // Serializes with every key explicit and parses back the same.
        let text = toml::to_string(&config).unwrap();
        assert_eq!(parse(&text).unwrap(), config);

        // Nested: RAID 0 over two RAID 1 pairs of SSDs.
        let nested = parse(
            r#"
            model = "raid"
            level = "raid0"
            stripe_unit_bytes = 131072
            members = [
              { model = "raid", level = "raid1", read_policy = "round_robin",
                members = [{ model = "ssd", capacity_bytes = 1_000_000_000 },
                           { model = "ssd", capacity_bytes = 2_000_000_000 }] },
              { model = "raid", level = "raid1", failed_members = [0],
                members = [{ model = "ssd" }, { model = "ssd" }] },
            ]
            "#,
        )
        .unwrap();
        // The first pair holds 1e9 rounded down to 64 KiB units (the
        // default unit of the inner arrays); the outer array rounds that
        // down to its 128 KiB units.
        let pair = 1_000_000_000 / 65536 * 65536;
        assert_eq!(nested.capacity_bytes(), 2 * (pair / 131072 * 131072));
        let dev = crate::build(&nested, 1).unwrap();
        assert_eq!(dev.members()[1].members()[0].state(), DeviceState::Failed);
    }

    #[test]
    fn the_docs_example_config_parses() {
        // docs/raid.md's first TOML block, as one entry of `[[devices]]`.
        let doc = include_str!("../../../docs/raid.md");
        let block = doc
            .split("```toml\n")
            .nth(1)
            .unwrap()
            .split("```")
            .next()
            .unwrap();
        let table = block.replace("[[devices]]", "");
        let config = parse(&table).unwrap();
        let DeviceConfig::Raid(p) = &config else {
            panic!("{config:?}")
        };
        assert_eq!(
            (p.level, p.members.len(), &p.failed_members[..]),
            (RaidLevel::Raid5, 6, &[2][..])
        );
        assert!(crate::build(&config, 0).is_ok());
    }

    #[test]
    fn bad_raid_configs_say_what_is_wrong() {
        let e = parse(&hdd_raid5_toml("stripe_size = 4096")).unwrap_err();
        assert!(
            e.contains("unknown field `stripe_size`") && e.contains("stripe_unit_bytes"),
            "{e}"
        );
        let e = parse(&hdd_raid5_toml("").replace("raid5", "raid6")).unwrap_err();
        assert!(
            e.contains("unknown variant `raid6`") && e.contains("`raid10`"),
            "{e}"
        );
        let e = parse(&hdd_raid5_toml("read_policy = \"fastest\"")).unwrap_err();
        assert!(
            e.contains("unknown variant `fastest`") && e.contains("`primary_only`"),
            "{e}"
        );
        let e = parse(&hdd_raid5_toml("stripe_unit_bytes = 1000")).unwrap_err();
        assert!(
            e.contains("key `stripe_unit_bytes`: expected a positive multiple of 512"),
            "{e}"
        );
        let e = parse(&hdd_raid5_toml("failed_members = [1, 4]")).unwrap_err();
        assert!(
            e.contains(
                "key `failed_members`: expected at most 1 failed member for raid5, found [1, 4]"
            ),
            "{e}"
        );
        let e = parse("model = \"raid\"\nlevel = \"raid1\"\nmembers = [{ model = \"ssd\" }]")
            .unwrap_err();
        assert!(
            e.contains("key `members`: expected at least 2 devices for raid1, found 1 devices"),
            "{e}"
        );
        let e = parse(
            "model = \"raid\"\nlevel = \"raid1\"\nmembers = [{ model = \"ssd\" }, { model = \"ssd\", parallel_units = 0 }]",
        )
        .unwrap_err();
        assert!(e.contains("parallel_units"), "{e}");
        // A config built in code is checked member by member too.
        let DeviceConfig::Raid(mut p) = parse(&hdd_raid5_toml("")).unwrap() else {
            unreachable!()
        };
        if let DeviceConfig::Hdd(h) = &mut p.members[2] {
            h.rpm = 0;
        }
        let e = crate::build(&DeviceConfig::Raid(p), 1).err().unwrap();
        assert_eq!(e.key(), "members[2].rpm");
    }

    #[test]
    fn raid1_of_two_ssds_reads_at_least_as_fast_as_one() {
        let ssd = "{ model = \"ssd\", preset = \"intel-p3700\" }";
        let single = parse("model = \"ssd\"\npreset = \"intel-p3700\"").unwrap();
        let mirror = parse(&format!(
            "model = \"raid\"\nlevel = \"raid1\"\nmembers = [{ssd}, {ssd}]"
        ))
        .unwrap();
        let duration_ns = 100_000_000; // 0.1 s
        let mut ratios = Vec::new();
        for depth in [1, 4, 16, 64] {
            let one = closed_loop(
                &mut *crate::build(&single, 1).unwrap(),
                depth,
                duration_ns,
                Op::Read,
                4096,
            );
            let two = closed_loop(
                &mut *crate::build(&mirror, 1).unwrap(),
                depth,
                duration_ns,
                Op::Read,
                4096,
            );
            let ratio = two.0 as f64 / one.0 as f64;
            eprintln!(
                "qd {depth}: single {} IOPS {} ns, raid1 {} IOPS {} ns, x{ratio:.3}",
                one.0 * 10,
                one.1,
                two.0 * 10,
                two.1
            );
            assert!(
                two.0 >= one.0,
                "qd {depth}: raid1 {} < single {}",
                two.0,
                one.0
            );
            ratios.push(ratio);
        }
        // At QD 1 the copies take turns: a read costs what it costs on one
        // SSD. Once one SSD saturates (460 k IOPS cap), two give twice.
        assert!(ratios[0] < 1.01, "{ratios:?}");
        assert!(ratios[3] > 1.9, "{ratios:?}");
    }

    #[test]
    fn raid5_of_hdds_small_writes_cost_a_read_and_a_write_phase() {
        let DeviceConfig::Raid(params) = parse(&hdd_raid5_toml("")).unwrap() else {
            unreachable!()
        };
        let duration_ns = 10_000_000_000; // 10 s at QD 1
        let mut raid = Raid::build(&params, 7).unwrap();
        let reads = closed_loop(&mut raid, 1, duration_ns, Op::Read, 4096);
        let mut raid = Raid::build(&params, 7).unwrap();
        let writes = closed_loop(&mut raid, 1, duration_ns, Op::Write, 4096);
        let st = raid.stats();
        eprintln!(
            "raid5 x6 hdd qd1 4k: reads {} mean {} ns; writes {} mean {} ns; {st:?}",
            reads.0, reads.1, writes.0, writes.1
        );
        // Every write was one RMW stripe: 2 member reads, then 2 member
        // writes (the IO still running at the end may lack its writes).
        assert!(st.rmw_stripes == writes.0 || st.rmw_stripes == writes.0 + 1);
        assert_eq!(st.member_reads, 2 * st.rmw_stripes);
        assert!(st.member_writes >= 2 * writes.0);
        // The write phase rewrites the sectors just read: no seek, but the
        // platter must come round again, so a small write costs a random
        // read plus about a revolution (8.3 ms at 7200 rpm).
        assert!(
            writes.1 > reads.1 + 6_000_000,
            "read {} ns, write {} ns",
            reads.1,
            writes.1
        );
        // Same config and seed, same numbers.
        let mut again = Raid::build(&params, 7).unwrap();
        assert_eq!(
            closed_loop(&mut again, 1, duration_ns, Op::Read, 4096),
            reads
        );
        assert_ne!(member_seed(7, 0), member_seed(7, 1));
    }
}
