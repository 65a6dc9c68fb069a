//! A completion for a device IO the policy never submitted (or that already
//! completed) is an executor bug: each policy stops with an assertion
//! rather than ignore it and let its maps drift.

use tierlab_core::policy::{Outbox, Policy};
use tierlab_policies::atsmf::{Atsmf, AtsmfParams};
use tierlab_policies::cache::{Cache, CacheParams};
use tierlab_policies::hswd::{Hswd, HswdParams};

#[test]
#[should_panic(expected = "which is not in flight")]
fn cache_refuses_a_stray_completion() {
    let mut c = Cache::new(&CacheParams::with_capacity(1 << 20)).unwrap();
    c.on_device_completion(0, 0, 12345, &mut Outbox::default());
}

#[test]
#[should_panic(expected = "which is not in flight")]
fn hswd_refuses_a_stray_completion() {
    let mut p = HswdParams::with_pcache(2 << 20);
    p.band_bytes = tierlab_policies::cache::ByteCount(256 << 10);
    let mut h = Hswd::new(&p, 8 << 20).unwrap();
    h.on_device_completion(0, 1, 7, &mut Outbox::default());
}

#[test]
#[should_panic(expected = "which is not in flight")]
fn atsmf_refuses_a_stray_completion() {
    let mut a = Atsmf::new(AtsmfParams::default(), 8 << 30, 10 << 30).unwrap();
    a.on_device_completion(0, 1, 3, &mut Outbox::default());
}
