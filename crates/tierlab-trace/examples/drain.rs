//! Reads a trace to the end on one thread and prints the record count.
use tierlab_trace::RecordStream;
fn main() {
    let path = std::env::args().nth(1).expect("usage: drain TRACE");
    let mut r = tierlab_trace::open(&path).unwrap();
    let mut n = 0u64;
    let mut x = 0u64;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        x ^= rec.offset_bytes.wrapping_add(rec.time_ns);
    }
    println!("{n} {x}");
}
