//! Export configuration checks and the helpers around them.

mod common;

use std::sync::Arc;

use common::*;
use tierlab_nbd::{Connection, Errno, Export, ExportError, validate_exports};

fn base() -> Export {
    exports()[0].clone()
}

fn check(change: impl FnOnce(&mut Export)) -> Result<(), ExportError> {
    let mut export = base();
    change(&mut export);
    export.check()
}

#[test]
fn the_test_exports_are_valid() {
    validate_exports(&exports()).unwrap();
}

#[test]
fn block_sizes_follow_the_spec() {
    assert!(matches!(
        check(|e| e.block_min_bytes = 0),
        Err(ExportError::BlockMinInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_min_bytes = 768),
        Err(ExportError::BlockMinInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_min_bytes = 1 << 17),
        Err(ExportError::BlockMinInvalid { .. })
    ));
    assert!(check(|e| e.block_min_bytes = 1).is_ok());
    assert!(matches!(
        check(|e| e.block_preferred_bytes = 256),
        Err(ExportError::BlockPreferredInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_preferred_bytes = 6144),
        Err(ExportError::BlockPreferredInvalid { .. })
    ));
    assert!(matches!(
        check(|e| {
            e.block_min_bytes = 8192;
            e.block_preferred_bytes = 4096;
        }),
        Err(ExportError::BlockPreferredInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_max_bytes = 2048),
        Err(ExportError::BlockMaxInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_max_bytes = u32::MAX),
        Err(ExportError::BlockMaxInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.block_max_bytes = 64 * 1024 + 100),
        Err(ExportError::BlockMaxUnaligned { .. })
    ));
    assert!(check(|e| e.block_max_bytes = tierlab_nbd::BLOCK_MAX_BYTES_LIMIT).is_ok());
}

#[test]
fn size_must_be_whole_blocks_and_fit_i64() {
    assert!(matches!(
        check(|e| e.size_bytes = 1000),
        Err(ExportError::SizeUnaligned { .. })
    ));
    assert!(matches!(
        check(|e| e.size_bytes = !511),
        Err(ExportError::SizeTooLarge { .. })
    ));
    assert!(check(|e| e.size_bytes = 0).is_ok());
}

#[test]
fn strings_and_contexts_follow_the_spec() {
    assert!(matches!(
        check(|e| e.name = "a\0b".into()),
        Err(ExportError::NameInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.name = "x".repeat(4097)),
        Err(ExportError::NameInvalid { .. })
    ));
    assert!(matches!(
        check(|e| e.description = "\0".into()),
        Err(ExportError::DescriptionInvalid { .. })
    ));
    for bad in ["nocolon", ":leaf", "base:", "ba se:x"] {
        let result = check(|e| e.meta_contexts = vec![bad.into()]);
        assert!(
            matches!(result, Err(ExportError::MetaContextInvalid { .. })),
            "{bad}"
        );
    }
    assert!(matches!(
        check(|e| e.meta_contexts = vec!["base:allocation".into(), "base:allocation".into()]),
        Err(ExportError::MetaContextDuplicate { .. })
    ));
    assert!(check(|e| e.meta_contexts = vec!["qemu:dirty-bitmap:a:b".into()]).is_ok());
}

#[test]
fn validate_names_the_export_and_the_problem() {
    let mut export = base();
    export.block_min_bytes = 3;
    let e = export.validate().unwrap_err();
    assert!(
        matches!(&e, ExportError::InExport { name, error }
            if name == "disk" && **error == ExportError::BlockMinInvalid { block_min_bytes: 3 }),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.starts_with("export \"disk\": "), "{message}");
    assert!(message.contains("block_min_bytes = 3"), "{message}");
    assert!(message.contains("power of two"), "{message}");
}

#[test]
fn export_lists_need_unique_names_and_only_a_first_empty_one() {
    let mut list = exports().to_vec();
    list[1].name = "disk".into();
    assert_eq!(
        validate_exports(&list).unwrap_err(),
        ExportError::ExportNameDuplicate {
            name: "disk".into()
        }
    );
    let mut list = exports().to_vec();
    list[1].name = String::new();
    assert_eq!(
        validate_exports(&list).unwrap_err(),
        ExportError::EmptyNameNotFirst { index: 1 }
    );
    assert!(
        validate_exports(&list)
            .unwrap_err()
            .to_string()
            .contains("empty name")
    );
    let mut list = exports().to_vec();
    list[0].name = String::new();
    assert!(validate_exports(&list).is_ok());
}

#[test]
#[should_panic(expected = "invalid exports")]
fn a_connection_refuses_invalid_exports() {
    let mut list = exports().to_vec();
    list[0].block_max_bytes = 1;
    Connection::new(Arc::from(list));
}

#[test]
fn a_connection_without_exports_refuses_every_name() {
    let mut conn = Connection::new(Arc::from(Vec::new()));
    drain(&mut conn);
    conn.receive(&C_FIXED_NEWSTYLE.to_be_bytes());
    let replies = send_option(&mut conn, OPT_GO, &info_data("", &[]));
    assert_eq!(replies[0].reply_type, REP_ERR_UNKNOWN);
    let replies = send_option(&mut conn, OPT_LIST, &[]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ACK);
}

#[test]
fn io_errors_map_as_the_spec_asks() {
    use std::io::{Error, ErrorKind};
    let map = |kind| Errno::from_io_error(&Error::from(kind));
    assert_eq!(map(ErrorKind::StorageFull), Errno::NoSpc);
    assert_eq!(map(ErrorKind::FileTooLarge), Errno::NoSpc);
    assert_eq!(map(ErrorKind::QuotaExceeded), Errno::NoSpc);
    assert_eq!(map(ErrorKind::ReadOnlyFilesystem), Errno::Perm);
    assert_eq!(map(ErrorKind::PermissionDenied), Errno::Perm);
    assert_eq!(map(ErrorKind::InvalidInput), Errno::Inval);
    assert_eq!(map(ErrorKind::Unsupported), Errno::Inval);
    assert_eq!(map(ErrorKind::OutOfMemory), Errno::NoMem);
    assert_eq!(map(ErrorKind::UnexpectedEof), Errno::Io);
    assert_eq!(
        Errno::from_io_error(&Error::from_raw_os_error(5)),
        Errno::Io
    );
}

#[test]
fn long_error_messages_are_cut_to_the_string_limit() {
    let (mut conn, _) = ready("disk", true, &[]);
    conn.receive(&request(0, CMD_READ, 1, 0, 512));
    events(&mut conn);
    let long = "é".repeat(3000); // 6000 bytes, two-byte characters
    conn.reply_error_message(1, Errno::Io, &long);
    let message = expect_error_chunk(&drain(&mut conn), 1, EIO);
    assert_eq!(message.len(), 4096);
    assert!(long.starts_with(&message));
}
