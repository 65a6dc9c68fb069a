//! ATSMF: automated tiering between fast memory and slow flash
//! (spec/atsmf.md, seed 000).

pub mod analyzer;
