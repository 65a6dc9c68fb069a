//! Errors come back as the kind they are, not only as text (issue 20).

use std::path::Path;

use tierlab_trace::formats::native::Header;
use tierlab_trace::generate::{self, KvParams, SizeMix};
use tierlab_trace::{ParamError, TraceError};

#[test]
fn detection_and_headers_fail_as_format_errors_naming_the_file() {
    match tierlab_trace::detect::detect(b"", Path::new("empty.csv")) {
        Err(TraceError::Format { path, message }) => {
            assert_eq!(path, Path::new("empty.csv"));
            assert!(message.contains("empty"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let mut head = vec![0u8; 64];
    head[..8].copy_from_slice(b"TIERLAB\0");
    head[8..12].copy_from_slice(&99u32.to_le_bytes());
    match Header::parse(&head, Path::new("t.tlt")) {
        Err(TraceError::Format { path, message }) => {
            assert_eq!(path, Path::new("t.tlt"));
            assert!(message.contains("version 99"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_choice_of_a_generator_is_a_param_error_with_its_key() {
    let params = KvParams::parse(["arrival=poison"]).unwrap();
    let e = generate::from_spec("uniform", &params, 1)
        .err()
        .expect("refused");
    let TraceError::Param(p) = e else {
        panic!("{e:?}")
    };
    assert_eq!(p.key(), "arrival");
    assert!(p.found.contains("did you mean `poisson`"), "{p}");
    assert!(p.expected.starts_with("one of: fixed, poisson"), "{p}");
}

#[test]
fn size_mixes_and_format_specs_are_param_errors() {
    let e: ParamError = "4k:x".parse::<SizeMix>().unwrap_err();
    assert_eq!(e.found, "`x`");
    let e = tierlab_trace::formats::csv::parse_format_spec("msrc").unwrap_err();
    assert_eq!(e.key(), "format");
    assert!(e.expected.contains("unknown trace format"), "{e}");
}
