//! tierlab-policies: storage policies as sans-IO state machines behind
//! `tierlab_core::policy::Policy`, one file per policy.

pub mod atsmf;
pub mod binding;
pub mod cache;
pub mod extent;
pub mod flashcache;
pub(crate) mod free_slots;
pub mod host_sched;
pub mod hswd;
pub mod hswd_meta;
pub mod linear;
pub mod qos;
pub mod slot_meta;
pub mod streams;
pub mod writeback;

pub use linear::Linear;
pub use tierlab_core::policy::Passthrough;
